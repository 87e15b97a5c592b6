"""Content-keyed cache of the gate's real runs, so a rerun of the gate or the benchmark is fast.

A run is keyed by everything that decides its numbers: the recipe's parsed content (comments do
not count), the test hook, the step count, the runner's extra environment, a fingerprint of the
code that runs inside the ranks (``bot/inrank/workloads``, the CPU compatibility layer, the launch
command) and the stack key. Only ``ok`` records are cached (a crash or hang may be transient);
they live in ``<cache_dir>/runs/<key>.json``, the run's logs in ``<cache_dir>/work/<key>/``. A local run loads its
objective's seed checkpoint (``<cache_dir>/seed/``, :mod:`bot.runner.seed`) unless its spec says ``seed=False``, so
every layout of a comparison starts from the same weights.

With ``jobs > 1`` (``run_many``) runs execute in ``python -m gate.runs`` worker *processes*:
``bot.runner.resolve`` redirects the process-wide stderr while torchtitan parses, which is not
thread-safe. Failed records are kept in ``<cache_dir>/failed/`` for inspection, never reused.
"""

from __future__ import annotations

import functools
import hashlib
import json
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, Field

from bot.core.recipe import parse_recipe_text
from bot.core.records import RunRecord, content_hash, read_record, write_record

REPO = Path(__file__).resolve().parents[1]
RUN_ENV = {"OMP_WAIT_POLICY": "PASSIVE"}  # idle OpenMP threads sleep: no effect on numerics


class RunSpec(BaseModel):
    """One run to make (or find in the cache)."""

    label: str
    recipe_text: str
    steps: int
    hook: str | None = None
    env: dict[str, str] = Field(default_factory=dict)  # runner extra environment (not the recipe's)
    repeat: int = 0  # a deliberate repeat of an otherwise identical run gets its own key
    recipe_path: str | None = None
    workdir: str | None = None  # the root the ranks start in (default: the recipe's repository, bot/runner/workdir.py)
    seed: bool = True  # load the objective's seed checkpoint (bot/runner/seed.py, cached in the cache dir)
    max_wall_s: float | None = None  # the run is stopped at this wall time (a campaign's budget cap; not in its key)


def code_fingerprint() -> str:
    """Hash of the code that runs inside the ranks (edits invalidate cached runs): the in-rank package
    (``bot.inrank``, found wherever it is installed) and the launch command builder."""
    from bot.inrank import HERE, code_files
    from bot.runner import command

    h = hashlib.sha256()
    for f in [*code_files(), Path(command.__file__).resolve()]:
        h.update(str(f.relative_to(HERE.parent) if f.is_relative_to(HERE.parent) else f.name).encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def run_key(spec: RunSpec, stack_key: str) -> str:
    recipe = parse_recipe_text(spec.recipe_text, spec.label)
    payload = {
        "recipe": json.loads(recipe.model_dump_json()),
        "hook": spec.hook,
        "steps": spec.steps,
        "env": {**RUN_ENV, **spec.env},
        "repeat": spec.repeat,
        "seed": spec.seed,
        "code": code_fingerprint(),
        "stack": stack_key,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:20]


@functools.lru_cache(maxsize=1)
def stack_key() -> str:
    """This machine's stack key (runs made here carry it)."""
    from bot.runner.base import stack_fingerprint

    return stack_fingerprint().key()


def cached_path(spec: RunSpec, cache_dir: Path) -> Path:
    return Path(cache_dir) / "runs" / f"{run_key(spec, stack_key())}.json"


def lookup(spec: RunSpec, cache_dir: Path) -> RunRecord | None:
    """The cached ``ok`` record of ``spec``, or None. The file is named by the hash of what decides the run; its
    content must describe that run too -- the recipe's content hash and the hook -- so a record copied or written
    under another run's name (another recipe, another repository's runs in a shared cache) is never reused."""
    path = cached_path(spec, cache_dir)
    if path.exists():
        try:
            record = read_record(path)
        except (OSError, ValueError):
            return None
        if record.recipe_hash != content_hash(spec.recipe_text) or record.hook != spec.hook:
            return None
        return record if record.outcome == "ok" else None
    return None


def _failed_path(spec: RunSpec, cache_dir: Path) -> Path:
    return Path(cache_dir) / "failed" / cached_path(spec, cache_dir).name


def located(spec: RunSpec) -> RunSpec:
    """``spec`` with its ranks' root filled in, where the caller stands: a worker process starts elsewhere."""
    if spec.workdir:
        return spec
    from bot.runner.workdir import recipe_root

    return spec.model_copy(update={"workdir": str(recipe_root(spec.recipe_path))})


def run_one(spec: RunSpec, cache_dir: Path) -> RunRecord:
    """The cached record for ``spec``, or a fresh real run (cached when ok): under Slurm for a ``launcher: slurm``
    recipe (a calibration made on a Slurm login node), else on this machine."""
    from bot.runner import get_runner

    found = lookup(spec, cache_dir)
    if found is not None:
        return found
    path = cached_path(spec, cache_dir)
    recipe = parse_recipe_text(spec.recipe_text, spec.label)
    launcher = "slurm" if recipe.cluster.launcher == "slurm" else "local"
    seed = {"seed_cache": Path(cache_dir)} if spec.seed else {}
    runner = get_runner(
        launcher, hook=spec.hook, extra_env={**RUN_ENV, **spec.env}, workdir=Path(located(spec).workdir or "."), **seed
    )
    record = runner.run(
        recipe,
        steps=spec.steps,
        out_dir=Path(cache_dir) / "work" / path.stem,
        recipe_path=spec.recipe_path,
        recipe_text=spec.recipe_text,
        max_wall_s=spec.max_wall_s,
    )
    write_record(record, path if record.outcome == "ok" else _failed_path(spec, cache_dir))
    return record


RESULT = "ATTUNE-RUN-RESULT "


def _terminated(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds through the runner, which kills its torchrun and ranks


def _worker(cache_dir: Path) -> None:
    """``python -m gate.runs CACHE_DIR``: read RunSpec JSON lines, run each, answer with the record path."""
    signal.signal(signal.SIGTERM, _terminated)
    # Ctrl-C reaches the whole foreground process group: the parent decides, and terminates this worker
    signal.signal(signal.SIGINT, lambda signum, frame: None)
    for line in sys.stdin:
        if not line.strip():
            continue
        spec = RunSpec.model_validate_json(line)
        try:
            record = run_one(spec, cache_dir)
            path = cached_path(spec, cache_dir) if record.outcome == "ok" else _failed_path(spec, cache_dir)
            answer = {"path": str(path)}
        except Exception as exc:  # reported to the parent, which raises it
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        sys.stdout.write(RESULT + json.dumps(answer) + "\n")
        sys.stdout.flush()


class _Worker:
    """One ``python -m gate.runs`` subprocess (its own interpreter: resolution is not thread-safe)."""

    def __init__(self, cache_dir: Path) -> None:
        from bot.runner.procs import die_with_parent

        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gate.runs", str(cache_dir)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
            cwd=REPO,
            preexec_fn=die_with_parent(),
        )

    def run(self, spec: RunSpec) -> RunRecord:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(spec.model_dump_json() + "\n")
        self.proc.stdin.flush()
        for line in self.proc.stdout:
            if line.startswith(RESULT):
                answer = json.loads(line[len(RESULT) :])
                if "error" in answer:
                    raise RuntimeError(f"run {spec.label!r} failed in the worker: {answer['error']}")
                return read_record(answer["path"])
        raise RuntimeError(f"run worker exited (code {self.proc.wait()}) during {spec.label!r}")

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait()

    def terminate(self, grace_s: float = 20.0) -> None:
        """End the worker and its run: SIGTERM (it kills its torchrun and ranks), then SIGKILL after ``grace_s``."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def run_many(
    specs: dict[str, RunSpec],
    cache_dir: Path,
    *,
    jobs: int = 1,
    progress: Callable[[str], None] | None = None,
) -> dict[str, RunRecord]:
    """Run every spec (cache first), at most ``jobs`` at a time; returns records by spec id."""
    say = progress or (lambda _msg: None)
    cache_dir = Path(cache_dir).resolve()
    specs = {sid: located(spec) for sid, spec in specs.items()}
    out: dict[str, RunRecord] = {}
    todo: queue.Queue[str] = queue.Queue()
    stack = stack_key()
    first: dict[str, str] = {}  # run key -> the spec id that runs it
    twins: dict[str, list[str]] = {}  # spec id -> other ids with the same run key
    for sid, spec in specs.items():
        found = lookup(spec, cache_dir)
        if found is not None:
            out[sid] = found
            continue
        key = run_key(spec, stack)
        if key in first:
            twins[first[key]].append(sid)
            continue
        first[key], twins[sid] = sid, []
        todo.put(sid)
    total = todo.qsize()
    if not total:
        return out
    say(f"{len(out)} run(s) from the cache, {total} to run ({jobs} at a time)")
    lock = threading.Lock()
    errors: list[BaseException] = []
    done = [0]

    def drain(worker: Callable[[RunSpec], RunRecord]) -> None:
        while not errors:
            try:
                sid = todo.get_nowait()
            except queue.Empty:
                return
            try:
                record = worker(specs[sid])
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
                errors.append(exc)
                return
            with lock:
                for same in [sid, *twins.get(sid, [])]:
                    out[same] = record
                done[0] += 1
                say(f"[{done[0]}/{total}] {specs[sid].label}: {record.outcome} in {record.summary.wall_s:.0f}s")

    if jobs <= 1:
        drain(lambda spec: run_one(spec, cache_dir))
    else:
        workers = [_Worker(cache_dir) for _ in range(min(jobs, total))]
        threads = [threading.Thread(target=drain, args=(w.run,), daemon=True) for w in workers]
        try:
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        except BaseException:  # interrupted (Ctrl-C, SIGTERM): no worker, torchrun or rank is left running
            errors.append(RuntimeError("interrupted"))  # the drain threads take no further spec
            for w in workers:
                w.terminate()
            raise
        for w in workers:
            w.close()
    if errors:
        raise errors[0]
    return out


if __name__ == "__main__":
    _worker(Path(sys.argv[1]))
