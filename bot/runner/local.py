"""The ``local`` backend: real torchtitan under torchrun on this machine.

1. Resolve the full config in-process with torchtitan's ConfigManager; a refused config is
   outcome ``invalid`` with no launch.
2. Launch torchrun in its own process group; stream its output, parse each metric line.
3. Classify: ``ok``; ``oom`` (CUDA OOM text, or host memory exhaustion on the CPU);
   ``crash``; ``hang`` (no new step line for ``hang_s``); ``timeout`` (wall clock over
   ``timeout_s``); ``invalid``. On hang or timeout (or when the runner is interrupted: Ctrl-C, or SIGTERM made an
   exception by the caller) torchrun and every rank are killed — each rank runs in a process group of its own.
   torchrun gets SIGTERM when the process that started it dies, even by SIGKILL (:func:`.procs.die_with_parent`),
   and then terminates its ranks. A run into a folder an interrupted run left starts without that run's files.
4. Compile cache: every run compiles into the runner's Inductor cache (:mod:`.compilecache`), kept across runs; a
   run that did not end ``ok`` has what it wrote there removed, so no half-written kernel reaches a later run.
"""

from __future__ import annotations

import contextlib
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path

from bot.core.recipe import Recipe
from bot.core.records import Outcome, RunRecord, StepMetric, content_hash
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
from bot.runner.command import build_launch
from bot.runner.compilecache import CACHE_ENV, CompileCache, Lease, cache_root, default_root
from bot.runner.logparse import is_oom, parse_step_line, span_medians
from bot.runner.procs import die_with_parent, end_tree
from bot.runner.rank_logs import RANK_LOGS, crash_cause
from bot.runner.resolve import ResolveError, dp_degree, resolve_recipe
from bot.runner.seed import SeedError, ensure_seed_checkpoint, load_args, wants_seed
from bot.runner.workdir import rank_pythonpath, recipe_root


class LocalRunner:
    def __init__(
        self,
        *,
        hang_s: float = 120.0,
        startup_s: float = 300.0,
        timeout_s: float = 1800.0,
        hook: str | None = None,
        extra_env: dict[str, str] | None = None,
        on_step=None,
        seed_cache: Path | None = None,
        check_layout: bool = True,
        compile_cache: Path | None = None,
        workdir: Path | None = None,
    ) -> None:
        """``seed_cache``: where seed checkpoints are cached; when given, every run loads its objective's seed
        checkpoint (:mod:`bot.runner.seed`, made on first use), so that layouts start from the same weights.
        ``compile_cache``: the Inductor cache of the runs when neither the environment nor ``extra_env`` sets
        ``TORCHINDUCTOR_CACHE_DIR`` (default ``<tmp>/attune_inductor_<user>``; see :mod:`.compilecache`).
        ``workdir``: the root the ranks start in, importable (default: the repository holding ``recipe_path``, else
        the working directory; :mod:`.workdir`)."""
        self.hang_s, self.startup_s, self.timeout_s = hang_s, startup_s, timeout_s
        self.seed_cache = Path(seed_cache) if seed_cache is not None else None
        self.check_layout = (
            check_layout  # False: launch what the catalog would refuse (the real-run matrix measures it)
        )
        self.hook = hook
        self.extra_env = extra_env or {}
        self.on_step = on_step
        self.compile_cache = Path(compile_cache) if compile_cache is not None else None
        self.workdir = Path(workdir).resolve() if workdir is not None else None

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
        out_dir = Path(out_dir).resolve()  # absolute: the ranks start in the repository root, not here
        out_dir.mkdir(parents=True, exist_ok=True)
        steps = steps or recipe.bench.steps
        root = self.workdir or recipe_root(recipe_path)
        dump = out_dir / "titan"
        if dump.exists():  # left by a run that was interrupted here: its logs must not mix with this run's
            shutil.rmtree(dump, ignore_errors=True)
        seed = None
        seed_error = ""
        if self.seed_cache is not None and wants_seed(recipe):
            try:
                resolve_recipe(
                    recipe, steps=steps, dump_folder=str(dump), check_layout=self.check_layout, workdir=root
                )  # a refused config costs no seed run either
                seed = ensure_seed_checkpoint(recipe, self.seed_cache, root)
            except ResolveError:
                pass  # reported as invalid below, with the launch it would have made
            except (SeedError, OSError, subprocess.TimeoutExpired) as exc:
                seed_error = f"seed checkpoint: {exc}"
        launch = build_launch(
            recipe,
            steps=steps,
            dump_folder=str(dump),
            torchrun=[sys.executable, "-m", "torch.distributed.run"],
            extra=load_args(seed) if seed else None,
            log_dir=str(out_dir / RANK_LOGS) if recipe.cluster.devices_per_node > 1 else None,
        )
        # torchrun is this Python's torch.distributed.run: a `--system-site-packages` venv (trial.yml's run job on a GPU
        # runner) has no torchrun script of its own beside its python
        text = (
            recipe_text
            if recipe_text is not None
            else (Path(recipe_path).read_text() if recipe_path else recipe.model_dump_json())
        )
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
            hook=self.hook,
            seed_checkpoint=seed.key if seed else None,
        )
        from bot.core.records import LaunchShape

        shape = LaunchShape(
            launcher="local",
            nodes=recipe.cluster.nodes,
            devices_per_node=recipe.cluster.devices_per_node,
            world_size=recipe.devices,
            command=launch.argv,
            env=launch.env,
        )
        if recipe.cluster.nodes != 1:
            return RunRecord(
                **base,
                launch=shape,
                outcome="invalid",
                reason="the local launcher runs one node; use launcher slurm for more",
            )
        try:
            flat = resolve_recipe(
                recipe,
                steps=steps,
                dump_folder=str(dump),
                extra=load_args(seed) if seed else None,
                check_layout=self.check_layout,
                workdir=root,
            )
        except ResolveError as exc:
            return RunRecord(**base, launch=shape, outcome="invalid", reason=str(exc))
        if seed_error:
            return RunRecord(**base, launch=shape, outcome="crash", reason=seed_error)
        tokens_per_step = int(flat["training.seq_len"]) * (
            int(flat["training.global_batch_size"])
            if int(flat["training.global_batch_size"]) > 0
            else int(flat["training.local_batch_size"]) * dp_degree(flat, recipe.devices)
        )
        env = {**os.environ, **launch.env, **self.extra_env}
        env["PYTHONPATH"] = rank_pythonpath(root, env.get("PYTHONPATH"))
        env["PYTHONUNBUFFERED"] = "1"
        if recipe.cluster.hardware == "cpu":
            env["ATTUNE_CPU_COMPAT"] = "1"
        if self.hook:
            env["ATTUNE_HOOK"] = self.hook
        lease = self._lease(env)
        try:
            outcome, reason, metrics, log_tail, wall, startup = self._launch(
                launch.argv, env, out_dir, steps, max_wall_s, early_stop, recipe.bench.warmup_steps, cwd=root
            )
        except BaseException:
            _end_lease(lease, ok=False)
            raise
        _end_lease(lease, ok=outcome == "ok")
        summary = summarize(
            metrics,
            warmup_steps=recipe.bench.warmup_steps,
            devices=recipe.devices,
            wall_s=wall,
            startup_s=startup,
            tokens_per_step=tokens_per_step,
        )
        spans = span_medians(dump / "structured_logs", skip_steps=recipe.bench.warmup_steps)
        return RunRecord(
            **base,
            launch=shape,
            outcome=outcome,
            reason=reason,
            steps=metrics,
            spans_ms=spans,
            summary=summary,
            log_tail=log_tail,
        )

    def _lease(self, env: dict[str, str]) -> Lease | None:
        """Point the run's ``env`` at the compile cache and register the run there (None: the cache could not be
        prepared; the run goes on, and torch reports the folder if it cannot use it either). A recipe's own
        ``TORCHINDUCTOR_CACHE_DIR`` is overridden: the cache's place is this runner's, not a training knob."""
        root = cache_root(os.environ, self.extra_env, default=self.compile_cache or default_root())
        env[CACHE_ENV] = str(root)
        try:
            return CompileCache(root).begin()
        except OSError:
            return None

    def _launch(
        self,
        argv: list[str],
        env: dict[str, str],
        out_dir: Path,
        steps: int,
        max_wall_s: float | None = None,
        early_stop: EarlyStop | None = None,
        warmup_steps: int = 0,
        cwd: Path | None = None,
    ) -> tuple[Outcome, str, list[StepMetric], str, float, float | None]:
        log_path = out_dir / "train.log"
        # the wall-clock cap stops the run early enough that killing every rank still ends inside it
        budget_s = None if max_wall_s is None else max(0.0, max_wall_s - KILL_MARGIN_S)
        timeout_s = self.timeout_s if budget_s is None else min(self.timeout_s, budget_s)
        t0 = time.monotonic()
        proc = subprocess.Popen(
            argv,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
            start_new_session=True,
            cwd=cwd or out_dir,
            preexec_fn=die_with_parent(),
        )
        lines: queue.Queue[str | None] = queue.Queue()

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.put(line)
            lines.put(None)

        threading.Thread(target=pump, daemon=True).start()
        tail: deque[str] = deque(maxlen=80)
        metrics: dict[int, StepMetric] = {}
        first_ts = None
        startup: float | None = None
        last_progress = t0
        killed: Outcome | None = None
        stop_why: str | None = None
        try:
            with log_path.open("w") as log:
                while True:
                    try:
                        line = lines.get(timeout=1.0)
                    except queue.Empty:
                        line = ""
                    if line is None:
                        break
                    now = time.monotonic()
                    if line:
                        log.write(line)
                        tail.append(line.rstrip("\n"))
                        parsed = parse_step_line(line)
                        if parsed:
                            metric, when = parsed
                            if first_ts is None and when is not None:
                                first_ts = when
                            if when is not None and first_ts is not None:
                                metric.time_s = (when - first_ts).total_seconds()
                            if metric.step not in metrics:
                                metrics[metric.step] = metric
                                last_progress = now
                                if startup is None:
                                    startup = now - t0
                                if self.on_step:
                                    self.on_step(metric)
                                if metric.step < steps:  # a run that completed is ok, whatever it measured
                                    stop_why = early_stop_reason(
                                        [metrics[k] for k in sorted(metrics)], warmup_steps, early_stop
                                    )
                    limit = self.hang_s if metrics else self.startup_s
                    if stop_why is not None:
                        killed = "stopped"
                    elif now - t0 > timeout_s:
                        killed = "timeout"
                    elif now - last_progress > limit:
                        killed = "hang"
                    if killed:
                        _kill_group(proc)
                        break
        except BaseException:  # the runner itself interrupted (Ctrl-C): leave no rank behind
            _kill_group(proc)
            raise
        proc.wait()
        wall = time.monotonic() - t0
        got = [metrics[k] for k in sorted(metrics)]
        tail_text = "\n".join(tail)
        if killed == "timeout":
            if max_wall_s is not None and timeout_s == budget_s:
                why = f"{wall_cap_reason(max_wall_s)}; process group killed"
                return "timeout", why, got, tail_text, wall, startup
            return (
                "timeout",
                f"wall clock over {self.timeout_s:.0f}s; process group killed",
                got,
                tail_text,
                wall,
                startup,
            )
        if killed == "stopped":
            return "stopped", f"{stop_why}; process group killed", got, tail_text, wall, startup
        if killed == "hang":
            what = "no new step line" if metrics else "no first step line"
            return "hang", f"{what} for {limit:.0f}s; process group killed", got, tail_text, wall, startup
        full_log = log_path.read_text(errors="replace")
        if proc.returncode == 0 and got and got[-1].step >= steps:
            return "ok", "", got, tail_text, wall, startup
        cause = crash_cause(out_dir / RANK_LOGS, full_log)  # from the rank that failed first, where it is not shown
        if is_oom(full_log) or is_oom(cause) or proc.returncode in (-signal.SIGKILL, 128 + signal.SIGKILL):
            return "oom", cause or _first_error(full_log) or "out of memory", got, tail_text, wall, startup
        return "crash", cause or _first_error(full_log) or f"exit code {proc.returncode}", got, tail_text, wall, startup


KILL_MARGIN_S = 12.0  # SIGTERM, 5 s grace, SIGKILL, 5 s: what stopping every rank can take


def _first_error(log: str) -> str:
    for line in log.splitlines():
        s = line.strip()
        if (
            any(k in s for k in ("Error:", "Error ", "error:", "Exception:"))
            and "lspci" not in s
            and "WARNING" not in s
        ):
            return s[-400:]
    return ""


def _end_lease(lease: Lease | None, *, ok: bool) -> None:
    """The run is over: a run that did not end ``ok`` leaves nothing it wrote in the compile cache."""
    if lease is not None:
        with contextlib.suppress(OSError):
            lease.end(ok=ok)


def _kill_group(proc: subprocess.Popen[str]) -> None:
    """Terminate torchrun and every rank, then kill what is left (:func:`bot.runner.procs.end_tree`)."""
    end_tree(proc)
