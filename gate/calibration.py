"""Noise-band calibration runs and the band cache (one band per recipe and stack fingerprint).

The band of a recipe lives in ``<cache_dir>/calibration/<recipe-id>/<stack-key>.json``
(default cache dir ``.attune``). A different stack fingerprint is a different file, so a new
torch / torchtitan / device is recalibrated; a band whose recipe objective (workload, pins,
hardware) differs from the recipe's is ignored and recalibrated too.

Calibration runs (:func:`calibration_specs`), all against the baseline run with the same seed:

1. the baseline again (determinism; on this CPU it is bitwise identical);
2. the baseline with every initial weight multiplied by (1 + 1e-6 * N(0,1)) (hook
   ``init_perturb``; a stand-in for nondeterministic kernels, docs/reference/gate.md §4.3);
3. a gradient-accumulation split (another local batch, the global batch pinned);
4. another ``loss.num_chunks`` (chunked cross-entropy).

The benchmark (``bot/bench/gate_faults.py``) holds its other legitimate changes out of this set and counts
false rejects on them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

from bot.core.recipe import Recipe, parse_recipe_text, set_lever_text
from bot.core.records import atomic_write_text, content_hash
from gate.convergence import DEFAULT_SAFETY, LossBand, calibrate_band
from gate.runs import RunSpec, located, run_many

DEFAULT_CACHE = Path(".attune")


def objective_hash(recipe: Recipe) -> str:
    """What a band depends on besides the stack: workload, pins and hardware."""
    payload = {"workload": recipe.workload.model_dump(), "pinned": recipe.pinned, "hardware": recipe.cluster.hardware}
    return content_hash(json.dumps(payload, sort_keys=True, default=str))


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._+-]+", "_", text).strip("_") or "_"


def band_path(cache_dir: Path, recipe_id: str, stack_key: str) -> Path:
    parts = [_slug(p) for p in recipe_id.split("/") if p]
    return Path(cache_dir).joinpath("calibration", *parts, f"{_slug(stack_key)}.json")


def load_band(cache_dir: Path, recipe: Recipe, stack_key: str) -> LossBand | None:
    """The cached band for this recipe and stack, or None (absent, unreadable or stale)."""
    path = band_path(cache_dir, recipe.name, stack_key)
    try:
        band = LossBand.model_validate_json(path.read_text())
    except (OSError, ValueError):
        return None
    if band.stack_key != stack_key or band.objective_hash != objective_hash(recipe):
        return None
    return band


def save_band(cache_dir: Path, band: LossBand) -> Path:
    path = band_path(cache_dir, band.recipe_id, band.stack_key)
    atomic_write_text(path, band.model_dump_json(indent=1) + "\n")
    return path


def _other_divisor(n: int, current: int, limit: int | None = None) -> int | None:
    for d in range(2, n + 1):
        if n % d == 0 and d != current and (limit is None or d <= limit):
            return d
    return None


def calibration_specs(
    recipe_text: str,
    *,
    steps: int,
    env: dict[str, str] | None = None,
    label: str = "baseline",
    workdir: str | None = None,
) -> dict[str, RunSpec]:
    """The calibration runs for a baseline recipe (ids -> specs); the baseline itself is not among them. ``workdir``:
    the root their ranks start in, the baseline's repository (default: where they are run from)."""
    recipe = parse_recipe_text(recipe_text, label)
    env = env or {}
    specs = {
        "cal:repeat": RunSpec(label=f"{label} (repeat)", recipe_text=recipe_text, steps=steps, env=env, repeat=1),
        "cal:init_perturb": RunSpec(
            label=f"{label} + init x(1+1e-6 N)", recipe_text=recipe_text, steps=steps, env=env, hook="init_perturb:1"
        ),
    }
    gbs = int(recipe.pinned.get("training.global_batch_size", -1))
    lbs = int(recipe.levers.get("training.local_batch_size", 8))
    if gbs > 0 and gbs % recipe.devices == 0:
        other = _other_divisor(gbs // recipe.devices, lbs)
        if other:
            text = set_lever_text(recipe_text, "training.local_batch_size", other, source=label)
            specs["cal:ga_split"] = RunSpec(label=f"{label} lbs {other}", recipe_text=text, steps=steps, env=env)
    seq = int(recipe.pinned.get("training.seq_len", 0))
    chunks = int(recipe.levers.get("loss.num_chunks", 8))
    other_chunks = _other_divisor(seq, chunks, limit=16) if seq else None
    if other_chunks:
        text = set_lever_text(recipe_text, "loss.num_chunks", other_chunks, source=label)
        specs["cal:num_chunks"] = RunSpec(
            label=f"{label} loss.num_chunks {other_chunks}", recipe_text=text, steps=steps, env=env
        )
    return {sid: spec.model_copy(update={"workdir": workdir}) for sid, spec in specs.items()}


def calibrate(
    recipe_text: str,
    *,
    baseline_spec: RunSpec,
    cache_dir: Path = DEFAULT_CACHE,
    steps: int,
    safety: float = DEFAULT_SAFETY,
    jobs: int = 1,
    progress: Callable[[str], None] | None = None,
) -> LossBand:
    """Run (or reuse) the calibration runs, build the band and cache it."""
    recipe = parse_recipe_text(recipe_text, baseline_spec.label)
    baseline_spec = located(baseline_spec)
    specs = {
        "baseline": baseline_spec,
        **calibration_specs(
            recipe_text, steps=steps, env=baseline_spec.env, label=baseline_spec.label, workdir=baseline_spec.workdir
        ),
    }
    records = run_many(specs, cache_dir, jobs=jobs, progress=progress)
    runs = [records[k] for k in specs if k != "baseline"]
    band = calibrate_band(
        runs,
        records["baseline"],
        safety,
        labels=[specs[k].label for k in specs if k != "baseline"],
        objective_hash=objective_hash(recipe),
    )
    save_band(cache_dir, band)
    return band
