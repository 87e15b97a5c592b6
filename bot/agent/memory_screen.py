"""Will this layout run out of memory? A measured peak, scaled by the analytic memory model, answers before a run.

predicted peak(candidate) = measured peak(reference) x model(candidate) / model(reference): the reference is the run
the change is stacked on (a failed trial's peak included) or else the incumbent's latest run, the model
:mod:`bot.agent.costmodel` (not the simulator). A change predicted over the device by more than MARGIN is proposed
with that prediction (``Change.predicted_oom``) and not run, an out-of-memory trial at no cost; nothing is screened
where a figure is missing (no measured peak, e.g. a CPU run). The margin's measurements: docs/agent-evidence.md.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from bot.agent.costmodel import estimate_of
from bot.agent.policy import LeverSpace, base_levers
from bot.core.records import Change, RecordReader, Scalar
from bot.core.state import Campaign

MARGIN = 0.25  # screened only above (1 + MARGIN) x the device's memory: over the ratio's usual error (docs)
# the rule that runs, once, a change this screen ruled out (bot.agent.heuristic.screen_check): never screened itself
SCREEN_CHECK_LESSON = "memory-screen-check-before-stopping"


def change_levers(campaign: Campaign, change: Change) -> dict[str, Scalar]:
    """The full lever set a change would run with."""
    return {**base_levers(campaign, change), change.lever: change.after, **change.extra}


def checks_the_screen(change: Change) -> bool:
    """Whether ``change`` is the run that measures what this screen predicted (it is not screened again)."""
    return SCREEN_CHECK_LESSON in change.lessons


class MeasuredPeak(NamedTuple):
    """A peak this campaign measured: the layout it ran, its peak and the device's memory (GiB)."""

    levers: dict[str, Scalar]
    peak_gib: float
    capacity_gib: float


def reference_peak(campaign: Campaign, stacked_on: int | None, records: RecordReader) -> MeasuredPeak | None:
    """The measured peak of the run a prediction is anchored on -- the trial of the step
    it is stacked on (an enabler made no run: then that step's own base), else the incumbent's latest run -- or None."""
    candidates = []
    n = stacked_on or 0
    while n:
        st = campaign.step(n)
        candidates += [(st.levers, r) for r in st.runs if r.kind == "trial"]
        n = st.stacked_on or 0
    inc = campaign.step(campaign.incumbent_step).runs if campaign.incumbent_step else campaign.baseline
    candidates += [(campaign.incumbent_levers, r) for r in reversed(inc or []) if r.outcome == "ok"]
    for levers, ref in candidates:
        record = records.read(ref.record) if ref.record else None
        s = record.summary if record is not None else None
        if s is not None and s.peak_memory_gib and s.memory_capacity_gib:
            return MeasuredPeak(dict(levers), s.peak_memory_gib, s.memory_capacity_gib)
    return None


class PeakPrediction(NamedTuple):
    """A predicted peak: the measured peak it is anchored on times the memory model's ratio (GiB)."""

    predicted: float
    capacity: float  # the device's memory
    measured: float
    ratio: float


def predicted_peak(
    campaign: Campaign, levers: dict[str, Scalar], stacked_on: int | None, space: LeverSpace, records: RecordReader
) -> PeakPrediction | None:
    """The predicted peak of a run with ``levers`` (stacked on step ``stacked_on``, or on the incumbent), anchored on
    a measured peak -- or None where nothing can tell (no measured peak, a model or layout the cost model does not
    know)."""
    ref = reference_peak(campaign, stacked_on, records)
    if ref is None:
        return None
    ref_levers, peak, capacity = ref
    try:
        before = estimate_of(space.recipe, ref_levers).memory_gib
        after = estimate_of(space.recipe, levers).memory_gib
    except (KeyError, ValueError, ZeroDivisionError):
        return None
    if not before > 0 or not math.isfinite(after):
        return None
    return PeakPrediction(peak * after / before, capacity, peak, after / before)


def predicted_oom(
    campaign: Campaign, levers: dict[str, Scalar], stacked_on: int | None, space: LeverSpace, records: RecordReader
) -> str | None:
    """Why a run with ``levers`` (stacked on step ``stacked_on``, or on the incumbent) would run out of memory --
    the prediction, anchored on a measured peak -- or None (it may fit, or nothing can tell)."""
    pred = predicted_peak(campaign, levers, stacked_on, space, records)
    if pred is None:
        return None
    if pred.predicted <= pred.capacity * (1.0 + MARGIN):
        return None
    return (
        f"predicted to run out of memory: {pred.predicted:.0f} GiB (the measured {pred.measured:.0f} GiB x the memory "
        f"model's {pred.ratio:.2f}) is over the device's {pred.capacity:.0f} GiB by more than {MARGIN:.0%}"
    )
