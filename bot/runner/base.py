"""The Runner protocol and what every backend shares (summary, stack).

``run(recipe, *, steps, out_dir) -> RunRecord``: a backend runs a recipe and always returns a
record — a failed run is an outcome (``oom``, ``crash``, ``hang``, ``timeout``, ``invalid``; under Slurm
also ``node_fail``, ``preempted``, ``pending_timeout``), never an exception.
"""

from __future__ import annotations

import platform
import statistics
import subprocess
import uuid
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, Field

from bot.core.recipe import Recipe
from bot.core.records import RunRecord, RunSummary, StackFingerprint, StepMetric


class EarlyStop(BaseModel):
    """Stop a run that is clearly too slow: once ``after_steps`` steps past the warm-up are measured, a median
    below ``below_tps`` tokens/s/device ends the run with outcome ``stopped``. A campaign sets the bound to the
    incumbent's tokens/s less the noise band (such a candidate would need to gain twice the band over its remaining
    steps to be kept; its device-hours go to the next candidate instead); ``attune run --stop-below`` to the
    user's number. ``basis``: what the bound is, in a few words, for the reason (e.g. "the incumbent less the noise
    band"); None says only the number."""

    below_tps: float = Field(gt=0)
    after_steps: int = Field(default=3, ge=2)
    basis: str | None = Field(default=None, max_length=120)


def early_stop_reason(steps: list[StepMetric], warmup_steps: int, rule: EarlyStop | None) -> str | None:
    """Why ``rule`` stops a run that has logged ``steps`` so far (None: keep going)."""
    if rule is None:
        return None
    tps = [s.tps for s in steps if s.step > max(warmup_steps, 1) and s.tps is not None]
    if len(tps) < rule.after_steps:
        return None
    med = statistics.median(tps)
    if med >= rule.below_tps:
        return None
    basis = f" ({rule.basis})" if rule.basis else ""
    return (
        f"stopped early: the median of {len(tps)} measured steps, {med:,.0f} tokens/s/device, is below "
        f"the early-stop threshold of {rule.below_tps:,.0f}{basis}"
    )


def wall_cap_reason(max_wall_s: float) -> str:
    """Why a run stopped at its ``max_wall_s``: true of a campaign's budget cap (what is left of the budget, as wall
    seconds on the recipe's devices) and of ``attune run --max-wall-s`` alike."""
    return f"stopped at the wall-clock cap of {max_wall_s:,.0f} s"


class Runner(Protocol):
    """``max_wall_s``: the run is stopped (outcome ``timeout``) before it has run this long, in wall seconds — in a
    campaign its hard budget cap, what is left of the budget in wall seconds on the recipe's devices; under
    ``attune run``, ``--max-wall-s``. ``early_stop``: a run that measures clearly slower than its bound ends early
    (outcome ``stopped``; see :class:`EarlyStop`)."""

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
    ) -> RunRecord: ...


def new_run_id() -> str:
    return uuid.uuid4().hex[:12]


def git_commit(cwd: Path | None = None) -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def stack_fingerprint() -> StackFingerprint:
    import torch

    try:
        from importlib.metadata import version

        titan = version("torchtitan")
    except Exception:
        titan = "unknown"
    cuda = torch.version.cuda if torch.cuda.is_available() else None
    name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    family = (
        "cuda" if torch.cuda.is_available() and torch.version.cuda else ("rocm" if torch.cuda.is_available() else "cpu")
    )
    return StackFingerprint(
        python=platform.python_version(),
        torch=torch.__version__,
        torchtitan=titan,
        cuda=cuda,
        device_name=name,
        device_family=family,
    )


def summarize(
    steps: list[StepMetric],
    *,
    warmup_steps: int,
    devices: int,
    wall_s: float,
    startup_s: float | None,
    tokens_per_step: int | None,
    memory_capacity_gib: float | None = None,
) -> RunSummary:
    """Median tokens/s per device after warm-up (step 1 is never counted), its CV, and the rest."""
    measured = [s for s in steps if s.step > max(warmup_steps, 1)]
    if not measured and len(steps) > 1:
        measured = [s for s in steps if s.step > 1]
    tps = [s.tps for s in measured if s.tps is not None]
    # per-step time between consecutive metric lines (they are metrics.log_freq steps apart)
    times = [
        (b.time_s - a.time_s) / (b.step - a.step)
        for a, b in zip(steps, steps[1:], strict=False)
        if a.time_s is not None and b.time_s is not None and b.step > a.step and b.step > max(warmup_steps, 1)
    ]
    tps_median = statistics.median(tps) if tps else None
    cv = statistics.pstdev(tps) / statistics.mean(tps) if len(tps) > 1 else None
    step_time = statistics.median(times) if times else None
    if step_time is None and tps_median and tokens_per_step:
        step_time = tokens_per_step / (tps_median * devices)
    mfus = [s.mfu for s in measured if s.mfu is not None]
    mems = [s.memory_gib for s in steps if s.memory_gib is not None]
    return RunSummary(
        steps_completed=max((s.step for s in steps), default=0),
        tokens_per_step=tokens_per_step,
        tps_median=tps_median,
        tps_cv=cv,
        step_time_median_s=step_time,
        mfu=statistics.median(mfus) if mfus else None,
        peak_memory_gib=max(mems) if mems else None,
        memory_capacity_gib=memory_capacity_gib,
        loss_first=steps[0].loss if steps else None,
        loss_last=steps[-1].loss if steps else None,
        wall_s=round(wall_s, 3),
        startup_s=startup_s,
        device_hours=devices * wall_s / 3600.0,
    )


def model_fields(recipe: Recipe, root: Path | None = None) -> dict[str, Any]:
    """A run record's ``model`` (the recipe's label) and ``moe`` (from the model's facts; None where unknown)."""
    from bot.sim.models import UnknownModel, model_for, model_label

    try:
        moe: bool | None = model_for(recipe.workload, root).is_moe
    except (UnknownModel, ValueError):
        moe = None
    return {"model": model_label(recipe.workload), "moe": moe}
