"""Screens on a proposal: the speed screen's prediction on a retry or a line search's notch, and a held-back
lesson's change kept only where the memory screen predicts it fits."""

from __future__ import annotations

from bot.agent.memory_screen import change_levers, predicted_peak
from bot.agent.policy import LeverSpace
from bot.agent.speed_screen import predicted_slower
from bot.core.records import Change, RecordReader, Scalar
from bot.core.state import Campaign


def screened(campaign: Campaign, space: LeverSpace, change: Change | None) -> Change | None:
    """``change`` -- an out-of-memory retry or a line search's next notch, moves that carry no knowledge of their
    own about speed -- with the speed screen's prediction where the analytic model puts the layout it leads to
    slower than the incumbent by more than its error (:mod:`bot.agent.speed_screen`): proposed, not run."""
    if change is None or change.enabler:
        return change
    slower = predicted_slower(space, campaign.incumbent_levers, change_levers(campaign, change))
    return change.model_copy(update={"predicted_slower": slower}) if slower is not None else change


def if_predicted_to_fit(
    campaign: Campaign, change: Change, target: dict[str, Scalar], space: LeverSpace, records: RecordReader
) -> Change | None:
    """``change`` (of a lesson held back only by its headroom threshold; an enabler of it included) when the memory
    screen predicts the levers it leads to, ``target``, fit the device -- the incumbent's measured peak x the memory
    model's ratio, at most the device's memory, no margin -- with the prediction added to its reasons; else None
    (it does not fit, or nothing can tell)."""
    pred = predicted_peak(campaign, target, change.stacked_on, space, records)
    if pred is None or pred.predicted > pred.capacity:
        return None
    why = (
        f"{change.why} (below the lesson's memory headroom, but predicted to fit: {pred.predicted:.0f} GiB, the "
        f"measured {pred.measured:.0f} GiB x the memory model's {pred.ratio:.2f}, of the device's {pred.capacity:.0f} GiB)"
    )
    return change.model_copy(update={"why": why})
