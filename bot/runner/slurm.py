"""The ``slurm`` backend: real torchtitan under ``srun torchrun`` on N nodes of a Slurm cluster, from a login node.

1. Pre-flight, free: torchtitan's ConfigManager resolves the recipe in-process (as the local runner does); a refused
   config is outcome ``invalid`` and nothing is submitted. (The campaign's gate config check runs before the runner
   is asked, whatever the launcher.)
2. Render the batch script (:mod:`.slurmscript`, torchtitan's ``multinode_trainer.slurm`` shape) into the run
   folder and submit it with ``sbatch --parsable``.
3. Follow the job with ``squeue`` while it is queued or running, then read its end from ``scontrol show job``, the
   accounting database (``sacct``) or the job completion log (``JobCompType=jobcomp/filetxt``), whichever answers
   (:mod:`.slurmtext`). Global rank 0's lines of the job log go through the local runner's metric parser.
4. Stop the job with ``scancel`` at the run's wall-clock cap (a campaign's hard budget cap; running time only: queue wait is not device
   time), an early stop, a hang, a queue wait over the recipe's ``queue_budget``, a requeue, or an interrupted
   runner (Ctrl-C, SIGTERM from a cancelled workflow).
5. Classify: ``ok``; ``oom``; ``crash``; ``hang``; ``stopped``; ``timeout`` (Slurm's time limit, or the budget
   cap); ``node_fail`` (NODE_FAIL, BOOT_FAIL); ``preempted`` (PREEMPTED, or requeued); ``pending_timeout``;
   ``invalid`` (refused by torchtitan or by sbatch). A job cancelled by anyone but this runner is a ``crash`` whose
   reason says so.

The stack fingerprint is global rank 0's (it writes ``stack.json`` at exit: :mod:`bot.inrank.stack`), the login
node's when rank 0 did not exit normally. Device-hours are the allocated devices (nodes x devices per node) times the job's running time, start-up included,
on Slurm's clock; the queue wait is recorded (``launch.queue_wait_s``), never charged. The run folder must be on a
filesystem the compute nodes share with the login node (the job writes its log there).

The job compiles into ``<root>/g-<generation>`` on each node (``TORCHINDUCTOR_CACHE_DIR``; root: the runner's
environment's or ``extra_env``'s ``TORCHINDUCTOR_CACHE_DIR``, else ``/tmp/attune_inductor_<user>``), kept across
jobs; a job that ran and did not end ``ok`` retires its generation, so a kernel half-written when it was cancelled
never reaches a later job (:class:`.compilecache.Generations`).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from bot.core.recipe import Recipe
from bot.core.records import LaunchShape, Outcome, RunRecord, StackFingerprint, StepMetric, content_hash
from bot.core.slurm import SlurmSettings, minutes_text
from bot.inrank import IMPORT_ROOT
from bot.runner import slurmscript
from bot.runner.base import (
    EarlyStop,
    early_stop_reason,
    git_commit,
    model_fields,
    new_run_id,
    stack_fingerprint,
    summarize,
    wall_cap_reason,
)
from bot.runner.command import titan_args
from bot.runner.compilecache import CACHE_ENV, Generations, cache_root, default_root, user_name
from bot.runner.logparse import is_oom, parse_step_line, span_medians
from bot.runner.resolve import ResolveError, dp_degree, resolve_recipe
from bot.runner.seed import SeedCheckpoint, SeedError, ensure_seed_checkpoint, load_args, wants_seed
from bot.runner.slurmtext import (
    REQUEUED,
    SACCT_FIELDS,
    SQUEUE_FORMAT,
    JobInfo,
    SlurmTextError,
    config_value,
    parse_jobcomp,
    parse_sacct,
    parse_sbatch,
    parse_scontrol,
    parse_squeue,
)
from bot.runner.workdir import rank_pythonpath, recipe_root

KILL_MARGIN_S = 12.0  # the budget cap cancels this early: scancel, then Slurm's KillWait, end inside the cap
RANK0 = "[rank0]:"
SLURM_CMD_TIMEOUT_S = 60.0
STACK_FILE = "stack.json"  # global rank 0's stack, written at its exit (bot/inrank/stack.py)
SLURM_SILENCE_S = 600.0  # squeue failing this long in a row: the job is given up (and cancelled)


class Stopped(BaseModel):
    """Why this runner cancelled the job (None in the runner: nobody did)."""

    outcome: Outcome
    reason: str


def classify(
    info: JobInfo | None,
    *,
    stopped: Stopped | None,
    steps: list[StepMetric],
    want_steps: int,
    job_log: str,
    backstop_min: str | None = None,
) -> tuple[Outcome, str]:
    """The outcome of a finished job: this runner's own stop first, then what Slurm says, then the log."""
    state = info.state if info else "UNKNOWN"
    done = bool(steps) and steps[-1].step >= want_steps
    where = f" (job {info.job_id}, nodes {info.node_list or '?'})" if info else ""
    if state == "COMPLETED" and done and (stopped is None or stopped.outcome != "pending_timeout"):
        return "ok", ""
    if stopped is not None:
        return stopped.outcome, stopped.reason
    if info is None:
        return "crash", "the job's end could not be read from squeue, scontrol, sacct or the job completion log"
    if state in ("NODE_FAIL", "BOOT_FAIL"):
        return "node_fail", f"Slurm lost a node of the job ({state}, reason {info.reason or 'none given'}){where}"
    if state == "PREEMPTED" or state in REQUEUED or info.restarts:
        return "preempted", f"Slurm preempted the job ({state}, restarts {info.restarts}){where}; not a measurement"
    if state in ("TIMEOUT", "DEADLINE"):
        if backstop_min is not None:
            return "timeout", (
                f"Slurm time limit reached ({backstop_min} min, set from the run's wall-clock cap "
                f"because this runner could not stop the job itself){where}"
            )
        return "timeout", f"Slurm time limit reached ({state}){where}"
    if state == "OUT_OF_MEMORY" or is_oom(job_log):
        return "oom", first_error(job_log) or f"out of memory ({state}){where}"
    if state == "CANCELLED":
        return "crash", f"the job was cancelled outside ATTUNE (scancel by a user or an administrator){where}"
    if state == "COMPLETED":
        got = steps[-1].step if steps else 0
        return "crash", f"the job ended after {got} of {want_steps} steps{where}"
    return "crash", first_error(job_log) or f"Slurm job {state}, exit code {info.exit_code or '?'}{where}"


def first_error(log: str) -> str:
    for line in log.splitlines():
        s = line.strip()
        if (
            any(k in s for k in ("Error:", "Error ", "error:", "Exception:"))
            and "lspci" not in s
            and "WARNING" not in s
        ):
            return s[-400:]
    return ""


class LogTail:
    """Reads a growing job log: complete new lines since the last call (the file may not exist yet)."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset, self.rest = path, 0, b""

    def lines(self) -> list[str]:
        try:
            with self.path.open("rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except OSError:
            return []
        self.offset += len(data)
        data = self.rest + data
        *complete, self.rest = data.split(b"\n")
        return [c.decode(errors="replace") for c in complete]

    def flush(self) -> list[str]:
        out = self.lines()
        if self.rest:
            out.append(self.rest.decode(errors="replace"))
            self.rest = b""
        return out


def _sigterm_as_interrupt() -> contextlib.AbstractContextManager[None]:
    """Inside: SIGTERM (a cancelled workflow, a killed runner) raises KeyboardInterrupt, so the job is cancelled."""

    @contextlib.contextmanager
    def scope() -> Iterator[None]:
        def raise_interrupt(signum: int, frame: object) -> None:
            raise KeyboardInterrupt(f"signal {signum}")

        previous = signal.signal(signal.SIGTERM, raise_interrupt)
        try:
            yield
        finally:
            signal.signal(signal.SIGTERM, previous)

    if threading.current_thread() is threading.main_thread():
        return scope()
    return contextlib.nullcontext()


def sbatch_argv(script: Path, out_dir: Path) -> list[str]:
    """How the batch script is submitted: the job runs in the run folder and logs to ``slurm-<job id>.out`` there."""
    return ["sbatch", "--parsable", f"--chdir={out_dir}", f"--output={_pattern(out_dir)}/slurm-%j.out", str(script)]


def torchrun_command(settings: SlurmSettings) -> list[str]:
    """torchrun on the compute nodes: the recipe's ``torchrun``; ``torchrun`` inside a container; else this Python's
    ``-m torch.distributed.run`` (torchrun's own entry point), which works in a ``--system-site-packages`` venv too,
    where the ``torchrun`` script lives beside the base interpreter, not the venv's."""
    if settings.torchrun:
        return shlex.split(settings.torchrun)
    if settings.container_image:
        return ["torchrun"]
    return [sys.executable, "-m", "torch.distributed.run"]


def batch_script(
    recipe: Recipe,
    *,
    steps: int,
    out_dir: Path,
    max_wall_s: float | None = None,
    hook: str | None = None,
    extra_env: dict[str, str] | None = None,
    payload: list[str] | None = None,
    seed: SeedCheckpoint | None = None,
    compile_cache: str | None = None,
    workdir: Path | None = None,
) -> tuple[str, str | None]:
    """The batch script of a run (see :mod:`.slurmscript`) and, when the run's wall-clock cap is the tighter limit,
    the job's time limit in minutes set from it (a backstop should this runner die; else None). ``seed``: the
    checkpoint every rank loads its initial weights from (its folder is mounted into a container as well).
    ``compile_cache``: the job's ``TORCHINDUCTOR_CACHE_DIR`` on the nodes (over the recipe's own, if it has one).
    ``workdir``: the recipe's repository root (default: the working directory), where torchrun starts on every node,
    on ``PYTHONPATH`` (and mounted into a container): :mod:`.workdir`."""
    settings = recipe.cluster.slurm or SlurmSettings()
    root = Path(workdir or Path.cwd()).resolve()
    targs = titan_args(recipe, steps=steps, dump_folder=str(out_dir / "titan"), extra=load_args(seed) if seed else None)
    command = payload or slurmscript.torchrun_argv(recipe, settings, targs, torchrun_command(settings))
    env = {
        **recipe.launch_env,
        **(extra_env or {}),
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": rank_pythonpath(root),
        "ATTUNE_STACK_FILE": str(out_dir / STACK_FILE),
    }
    if recipe.cluster.hardware == "cpu":
        env["ATTUNE_CPU_COMPAT"] = "1"
    if hook:
        env["ATTUNE_HOOK"] = hook
    if compile_cache:
        env[CACHE_ENV] = compile_cache
    backstop = minutes_text(max_wall_s) if max_wall_s is not None else None
    limit = settings.time_limit
    if backstop is not None and (settings.time_limit_s is None or int(backstop) * 60 < settings.time_limit_s):
        limit = backstop
    else:
        backstop = None
    body = slurmscript.render(
        recipe,
        settings,
        command=command,
        env=env,
        time_limit=limit,
        workdir=root,
        mounts=[f"{p}:{p}" for p in (out_dir, IMPORT_ROOT, root, *([Path(seed.path).parent] if seed else []))],
    )
    return body, backstop


class SlurmRunner:
    """``hang_s``/``startup_s``: no new rank-0 step line for that long (from the job's start) cancels the job as a
    hang. ``poll_s``: how often squeue is asked. ``payload``: test-only, replaces torchrun on every node (a sleep
    job for the classification tests); it is recorded as the run's hook. ``seed_cache``: where seed
    checkpoints are cached (on the filesystem the nodes share); when given, every run loads its objective's seed
    checkpoint (:mod:`bot.runner.seed`), made on first use on this (login) node with one rank, as the local runner makes it.
    ``compile_state``: the file on this node that holds the jobs' compile-cache generation (default
    ``<tmp>/attune_slurm_<user>/compile-generation``; see :mod:`.compilecache`). ``workdir``: the root the ranks start
    in, importable (default: the repository holding ``recipe_path``, else the working directory; :mod:`.workdir`)."""

    def __init__(
        self,
        *,
        hang_s: float = 300.0,
        startup_s: float = 900.0,
        poll_s: float = 2.0,
        hook: str | None = None,
        extra_env: dict[str, str] | None = None,
        on_step: Callable[[StepMetric], None] | None = None,
        payload: list[str] | None = None,
        slurm_env: dict[str, str] | None = None,
        seed_cache: Path | None = None,
        compile_state: Path | None = None,
        workdir: Path | None = None,
    ) -> None:
        self.workdir = Path(workdir).resolve() if workdir is not None else None
        self.seed_cache = Path(seed_cache) if seed_cache is not None else None
        self.hang_s, self.startup_s, self.poll_s = hang_s, startup_s, poll_s
        self.hook, self.extra_env, self.on_step, self.payload = hook, extra_env or {}, on_step, payload
        self.slurm_env = {**os.environ, **(slurm_env or {})}  # what Slurm's commands run with (SLURM_CONF, PATH)
        state = compile_state or default_root().with_name(f"attune_slurm_{user_name()}") / "compile-generation"
        self.generations = Generations(state)

    # -- Slurm's commands -------------------------------------------------------------------------------------------
    def _slurm(self, *argv: str) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(
                list(argv), capture_output=True, text=True, timeout=SLURM_CMD_TIMEOUT_S, env=self.slurm_env
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return subprocess.CompletedProcess(list(argv), 255, "", f"{argv[0]}: {exc}")

    def _queued(self, job_id: str) -> JobInfo | None | Literal[False]:
        """The job as squeue lists it; None once the queue no longer lists it; False when squeue did not answer."""
        out = self._slurm("squeue", "-h", "-j", job_id, "-o", SQUEUE_FORMAT)
        if out.returncode != 0:
            return None if "Invalid job id" in out.stderr else False
        return parse_squeue(out.stdout, job_id)

    def _final(self, job_id: str) -> JobInfo | None:
        """The finished job from scontrol (while slurmctld holds it), sacct, or the job completion log."""
        out = self._slurm("scontrol", "show", "job", "-o", job_id)
        info = parse_scontrol(out.stdout, job_id) if out.returncode == 0 else None
        if info is not None:
            return info
        out = self._slurm("sacct", "-n", "-P", "-X", "-j", job_id, "-o", SACCT_FIELDS)
        info = parse_sacct(out.stdout, job_id) if out.returncode == 0 else None
        if info is not None:
            return info
        conf = self._slurm("scontrol", "show", "config").stdout
        if config_value(conf, "JobCompType") == "jobcomp/filetxt" and (loc := config_value(conf, "JobCompLoc")):
            with contextlib.suppress(OSError):
                return parse_jobcomp(Path(loc).read_text(errors="replace"), job_id)
        return None

    def _cancel(self, job_id: str) -> None:
        self._slurm("scancel", job_id)

    # -- the compile cache ------------------------------------------------------------------------------------------
    def _generation(self) -> str | None:
        """The compile-cache generation the next job compiles into (None: the state file is out of reach)."""
        try:
            return self.generations.current()
        except OSError:
            return None

    def _compile_cache(self, gen: str | None) -> str | None:
        """The job's ``TORCHINDUCTOR_CACHE_DIR`` on the nodes, for generation ``gen``."""
        if gen is None:
            return None
        root = cache_root(os.environ, self.extra_env, default=default_root("/tmp"))
        return self.generations.path(str(root), gen)

    def _retire(self, gen: str | None) -> None:
        """A job of generation ``gen`` ran and did not end ok: later jobs compile into a new generation."""
        if gen is not None:
            with contextlib.suppress(OSError):
                self.generations.retire(gen)

    # -- the run ------------------------------------------------------------------------------------------------------
    def run(
        self,
        recipe: Recipe,
        *,
        steps: int | None = None,
        out_dir: Path,
        recipe_path: str | None = None,
        recipe_text: str | None = None,
        max_wall_s: float | None = None,
        early_stop: EarlyStop | None = None,
    ) -> RunRecord:
        out_dir = Path(out_dir).resolve()
        out_dir.mkdir(parents=True, exist_ok=True)
        steps = steps or recipe.bench.steps
        dump = out_dir / "titan"
        text = (
            recipe_text
            if recipe_text is not None
            else (Path(recipe_path).read_text() if recipe_path else recipe.model_dump_json())
        )
        hook = self.hook if self.payload is None else f"payload: {' '.join(self.payload)}"
        base = dict(
            run_id=new_run_id(),
            recipe_id=recipe.name,
            recipe_path=recipe_path,
            recipe_hash=content_hash(text),
            **model_fields(recipe),
            hardware=recipe.cluster.hardware,
            levers=recipe.levers,
            pinned=recipe.pinned,
            git_commit=git_commit(Path(recipe_path).parent if recipe_path else None),
            stack=stack_fingerprint(),
            usd_per_device_hour=recipe.cluster.usd_per_device_hour,
            hook=hook,
        )
        settings = recipe.cluster.slurm or SlurmSettings()
        script = out_dir / "job.sbatch"
        sbatch = sbatch_argv(script, out_dir)
        shape = LaunchShape(
            launcher="slurm",
            nodes=recipe.cluster.nodes,
            devices_per_node=recipe.cluster.devices_per_node,
            world_size=recipe.devices,
            command=sbatch,
            env=recipe.launch_env,
        )
        root = self.workdir or recipe_root(recipe_path)
        try:
            flat = resolve_recipe(recipe, steps=steps, dump_folder=str(dump), workdir=root)
        except ResolveError as exc:
            return RunRecord(**base, launch=shape, outcome="invalid", reason=str(exc))
        seed = None
        if self.seed_cache is not None and self.payload is None and wants_seed(recipe):
            try:  # after the free pre-flight: a refused config costs no seed run
                seed = ensure_seed_checkpoint(recipe, self.seed_cache, root)
            except (SeedError, OSError, subprocess.TimeoutExpired) as exc:
                return RunRecord(**base, launch=shape, outcome="crash", reason=f"seed checkpoint: {exc}")
            base["seed_checkpoint"] = seed.key
        gen = self._generation()
        try:
            body, backstop = batch_script(
                recipe,
                steps=steps,
                out_dir=out_dir,
                max_wall_s=max_wall_s,
                hook=self.hook,
                extra_env=self.extra_env,
                payload=self.payload,
                seed=seed,
                compile_cache=self._compile_cache(gen),
                workdir=root,
            )
        except ValueError as exc:
            return RunRecord(**base, launch=shape, outcome="invalid", reason=str(exc))
        gbs = int(flat["training.global_batch_size"])
        tokens_per_step = int(flat["training.seq_len"]) * (
            gbs if gbs > 0 else int(flat["training.local_batch_size"]) * dp_degree(flat, recipe.devices)
        )
        if shutil.which("sbatch", path=self.slurm_env.get("PATH")) is None:
            return RunRecord(
                **base,
                launch=shape,
                outcome="crash",
                reason="sbatch is not on PATH: launcher slurm runs on a Slurm login node (sbatch, squeue, scontrol, scancel)",
            )
        (out_dir / STACK_FILE).unlink(missing_ok=True)  # a previous run's in this folder
        script.write_text(body)
        sub = self._slurm(*sbatch)
        try:
            job_id = parse_sbatch(sub.stdout) if sub.returncode == 0 else None
        except SlurmTextError as exc:
            sub, job_id = subprocess.CompletedProcess(sbatch, 1, "", str(exc)), None
        if job_id is None:
            why = " ".join((sub.stderr or sub.stdout).split())[:400] or f"exit code {sub.returncode}"
            return RunRecord(**base, launch=shape, outcome="invalid", reason=f"sbatch refused the job: {why}")
        shape.job_id = job_id
        job_log = out_dir / f"slurm-{job_id}.out"
        with _sigterm_as_interrupt():
            try:
                follow = self._follow(
                    recipe, settings, job_id, job_log, out_dir / "train.log", steps, max_wall_s, early_stop
                )
            except BaseException:  # the runner itself interrupted: leave no job behind
                self._cancel(job_id)
                self._retire(gen)
                raise
        info = follow.info
        log_text = job_log.read_text(errors="replace") if job_log.exists() else ""
        outcome, reason = classify(
            info, stopped=follow.stopped, steps=follow.steps, want_steps=steps, job_log=log_text, backstop_min=backstop
        )
        if outcome not in ("ok", "pending_timeout"):  # it may have been killed while it compiled
            self._retire(gen)
        elapsed = (info.elapsed_s if info else None) or follow.running_s
        nodes = info.num_nodes if info and info.num_nodes else recipe.cluster.nodes
        shape.job_state, shape.node_list = (info.state, info.node_list) if info else (None, None)
        shape.queue_wait_s = info.queue_wait_s if info and info.queue_wait_s is not None else follow.queued_s
        summary = summarize(
            follow.steps,
            warmup_steps=recipe.bench.warmup_steps,
            devices=nodes * recipe.cluster.devices_per_node,
            wall_s=elapsed,
            startup_s=follow.startup_s,
            tokens_per_step=tokens_per_step,
        )
        spans = span_medians(dump / "structured_logs", skip_steps=recipe.bench.warmup_steps)
        with contextlib.suppress(OSError, ValueError):  # the compute nodes' stack, when rank 0 exited normally
            base["stack"] = StackFingerprint.model_validate_json((out_dir / STACK_FILE).read_text())
        return RunRecord(
            **base,
            launch=shape,
            outcome=outcome,
            reason=reason,
            steps=follow.steps,
            spans_ms=spans,
            summary=summary,
            log_tail=follow.tail,
        )

    def _follow(
        self,
        recipe: Recipe,
        settings: SlurmSettings,
        job_id: str,
        job_log: Path,
        rank0_log: Path,
        steps: int,
        max_wall_s: float | None,
        early_stop: EarlyStop | None,
    ) -> Followed:
        t_submit = time.monotonic()
        t_run: float | None = None
        last_progress = 0.0
        seen: Followed = Followed()
        metrics: dict[int, StepMetric] = {}
        first_ts = None
        tail: deque[str] = deque(maxlen=80)
        reader = LogTail(job_log)
        queue_budget = settings.queue_budget_s
        budget_s = None if max_wall_s is None else max(0.0, max_wall_s - KILL_MARGIN_S)
        info: JobInfo | None = None
        with rank0_log.open("w") as rank0:

            def take(lines: list[str]) -> None:
                nonlocal first_ts, last_progress
                for line in lines:
                    own = line.startswith("[rank") and not line.startswith(RANK0)
                    if own:
                        continue  # another rank's line: global rank 0 is the one measured
                    rank0.write(line + "\n")
                    tail.append(line)
                    parsed = parse_step_line(line)
                    if not parsed:
                        continue
                    metric, stamp = parsed
                    if first_ts is None and stamp is not None:
                        first_ts = stamp
                    if stamp is not None and first_ts is not None:
                        metric.time_s = (stamp - first_ts).total_seconds()
                    if metric.step in metrics:
                        continue
                    metrics[metric.step] = metric
                    last_progress = time.monotonic()
                    if seen.startup_s is None and t_run is not None:
                        seen.startup_s = last_progress - t_run
                    if self.on_step:
                        self.on_step(metric)
                    if metric.step < steps and seen.stopped is None:
                        why = early_stop_reason(
                            [metrics[k] for k in sorted(metrics)], recipe.bench.warmup_steps, early_stop
                        )
                        if why:
                            seen.stopped = Stopped(outcome="stopped", reason=f"{why}; job {job_id} cancelled")

            silent_since: float | None = None
            while True:
                now = time.monotonic()
                queued = self._queued(job_id)
                take(reader.lines())
                rank0.flush()
                if queued is False:  # slurmctld busy or restarting: ask again, for a while
                    silent_since = silent_since or now
                    if now - silent_since > SLURM_SILENCE_S:
                        seen.stopped = Stopped(
                            outcome="crash",
                            reason=f"squeue did not answer for {SLURM_SILENCE_S:.0f}s; job {job_id} cancelled",
                        )
                        self._cancel(job_id)
                        break
                    time.sleep(self.poll_s)
                    continue
                silent_since = None
                if queued is not None:
                    info = queued
                if queued is None or queued.terminal:
                    break  # left the queue (or finishing): read its end below
                if queued.state == "PENDING" or queued.state in REQUEUED:
                    if t_run is not None:  # ran, and queues again: requeued (preemption, a node failure)
                        seen.stopped = Stopped(
                            outcome="preempted",
                            reason=f"Slurm requeued job {job_id} after it started "
                            f"({queued.state}, {queued.reason or 'no reason given'}); not a measurement; cancelled",
                        )
                    elif now - t_submit > queue_budget:
                        seen.stopped = Stopped(
                            outcome="pending_timeout",
                            reason=(
                                f"job {job_id} pending for {now - t_submit:.0f}s, over the recipe's queue budget "
                                f"({settings.queue_budget}; Slurm's reason: {queued.reason or 'none'}); cancelled"
                            ),
                        )
                elif queued.state in (
                    "RUNNING",
                    "COMPLETING",
                    "CONFIGURING",
                    "SUSPENDED",
                    "STOPPED",
                    "RESIZING",
                    "SIGNALING",
                ):
                    if t_run is None:
                        t_run = now
                        seen.queued_s = now - t_submit
                        last_progress = now
                    ran = now - t_run
                    if max_wall_s is not None and budget_s is not None and ran > budget_s and seen.stopped is None:
                        seen.stopped = Stopped(
                            outcome="timeout",
                            reason=(f"{wall_cap_reason(max_wall_s)} of running time; job {job_id} cancelled"),
                        )
                    idle_limit = self.hang_s if metrics else self.startup_s
                    if seen.stopped is None and now - last_progress > idle_limit:
                        what = "no new step line" if metrics else "no first step line"
                        seen.stopped = Stopped(
                            outcome="hang", reason=f"{what} for {idle_limit:.0f}s; job {job_id} cancelled"
                        )
                if seen.stopped is not None:
                    self._cancel(job_id)
                    self._wait_gone(job_id)
                    break
                time.sleep(self.poll_s)
            if t_run is not None:
                seen.running_s = time.monotonic() - t_run
            final = self._final(job_id)
            take(reader.lines())
            take(reader.flush())
        seen.info = final or info
        seen.steps = [metrics[k] for k in sorted(metrics)]
        seen.tail = "\n".join(tail)
        return seen

    def _wait_gone(self, job_id: str, limit_s: float = 120.0) -> None:
        """After scancel: until the job has left the queue (Slurm's KillWait), at most ``limit_s``."""
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            queued = self._queued(job_id)
            if queued is None or (queued is not False and queued.terminal):
                return
            time.sleep(min(self.poll_s, 1.0))


class Followed(BaseModel):
    """What following one job saw."""

    info: JobInfo | None = None
    stopped: Stopped | None = None
    steps: list[StepMetric] = []
    startup_s: float | None = None  # job start to the first step line
    queued_s: float | None = None  # submission to the first sight of the job running (this runner's clock)
    running_s: float = 0.0  # first sight running to the end (this runner's clock)
    tail: str = ""


def _pattern(path: Path) -> str:
    """A path as an sbatch filename pattern (``%`` is Slurm's escape: ``%%`` is one ``%``)."""
    return str(path).replace("%", "%%")
