"""Content-keyed cache of the gate's real runs, so a rerun of the gate or the benchmark is fast.

A run is keyed by everything that decides its numbers: the recipe's parsed content (comments do
not count), the test hook, the step count, the runner's extra environment, a fingerprint of the
code that runs inside the ranks (``bot/workloads``, the CPU compatibility layer, the launch
command) and the stack key. Only ``ok`` records are cached (a crash or hang may be transient);
they live in ``<cache_dir>/runs/<key>.json``, the run's logs in ``<cache_dir>/work/<key>/``.

Runs execute in worker *processes* (``run_many``): ``bot.runner.resolve`` redirects the
process-wide stderr while torchtitan parses, which is not thread-safe.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from pathlib import Path

from pydantic import BaseModel, Field

from bot.recipe import parse_recipe_text
from bot.records import RunRecord, read_record, write_record

REPO = Path(__file__).resolve().parents[1]
RUN_ENV = {"OMP_WAIT_POLICY": "PASSIVE"}  # idle OpenMP threads sleep: no effect on numerics
CODE_FILES = ("bot/workloads", "bot/runner/cpu_compat.py", "bot/runner/command.py", "bot/runner/_site/sitecustomize.py")


class RunSpec(BaseModel):
    """One run to make (or find in the cache)."""

    label: str
    recipe_text: str
    steps: int
    hook: str | None = None
    env: dict[str, str] = Field(default_factory=dict)  # runner extra environment (not the recipe's)
    repeat: int = 0  # a deliberate repeat of an otherwise identical run gets its own key
    recipe_path: str | None = None


def code_fingerprint() -> str:
    """Hash of the code that runs inside the ranks (edits invalidate cached runs)."""
    h = hashlib.sha256()
    for rel in CODE_FILES:
        path = REPO / rel
        files = sorted(path.rglob("*.py")) if path.is_dir() else [path]
        for f in files:
            h.update(str(f.relative_to(REPO)).encode())
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
        "code": code_fingerprint(),
        "stack": stack_key,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:20]


def _stack_key() -> str:
    from bot.runner.base import stack_fingerprint

    return stack_fingerprint().key()


def cached_path(spec: RunSpec, cache_dir: Path) -> Path:
    return Path(cache_dir) / "runs" / f"{run_key(spec, _stack_key())}.json"


def lookup(spec: RunSpec, cache_dir: Path) -> RunRecord | None:
    path = cached_path(spec, cache_dir)
    if path.exists():
        try:
            record = read_record(path)
        except (OSError, ValueError):
            return None
        return record if record.outcome == "ok" else None
    return None


def run_one(spec: RunSpec, cache_dir: Path) -> RunRecord:
    """The cached record for ``spec``, or a fresh real run (cached when ok)."""
    from bot.runner.local import LocalRunner

    found = lookup(spec, cache_dir)
    if found is not None:
        return found
    path = cached_path(spec, cache_dir)
    recipe = parse_recipe_text(spec.recipe_text, spec.label)
    runner = LocalRunner(hook=spec.hook, extra_env={**RUN_ENV, **spec.env})
    record = runner.run(recipe, steps=spec.steps, out_dir=Path(cache_dir) / "work" / path.stem, recipe_path=spec.recipe_path, recipe_text=spec.recipe_text)
    if record.outcome == "ok":
        write_record(record, path)
    return record


def run_many(
    specs: dict[str, RunSpec],
    cache_dir: Path,
    *,
    jobs: int = 1,
    progress: Callable[[str], None] | None = None,
) -> dict[str, RunRecord]:
    """Run every spec (cache first), at most ``jobs`` at a time; returns records by spec id."""
    say = progress or (lambda _msg: None)
    out: dict[str, RunRecord] = {}
    todo: dict[str, RunSpec] = {}
    for sid, spec in specs.items():
        found = lookup(spec, cache_dir)
        if found is not None:
            out[sid] = found
        else:
            todo[sid] = spec
    if todo:
        say(f"{len(out)} run(s) from the cache, {len(todo)} to run ({jobs} at a time)")
    if not todo:
        return out
    with ProcessPoolExecutor(max_workers=max(1, jobs), mp_context=get_context("spawn")) as pool:
        futures = {pool.submit(run_one, spec, Path(cache_dir)): sid for sid, spec in todo.items()}
        for done, future in enumerate(as_completed(futures), 1):
            sid = futures[future]
            record = future.result()
            out[sid] = record
            say(f"[{done}/{len(todo)}] {todo[sid].label}: {record.outcome} in {record.summary.wall_s:.0f}s")
    return out
