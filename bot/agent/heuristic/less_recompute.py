"""Less recompute where recompute is the incumbent's largest removable cost and the next mode down fits."""

from __future__ import annotations

from bot.agent.heuristic.checked import checked
from bot.agent.heuristic.constants import LESS_RECOMPUTE, LESS_RECOMPUTE_FITS_LESSON
from bot.agent.heuristic.move import Context
from bot.agent.history import (
    already_stepped,
    incumbent_diagnosis,
    tried_from_incumbent,
)
from bot.agent.memory_screen import predicted_peak
from bot.agent.policy import LeverSpace
from bot.core import levers as catalog
from bot.core.records import Change, RecordReader
from bot.core.state import Campaign


def less_recompute_that_fits(campaign: Campaign, space: LeverSpace, records: RecordReader) -> Change | None:
    """Recomputation is the incumbent's largest removable cost (larger than its exposed communication and its
    bubble) and worth a gain on its own (its share s of the step gives s / (1 - s) >= the minimum worthwhile
    gain), and the memory screen predicts the next mode down fits the device -- the incumbent's measured peak
    scaled by the analytic memory model (:func:`bot.agent.memory_screen.predicted_peak`), at most the device's
    memory: less recompute, before the lessons. The headroom lessons ask for a fixed headroom (25 %, 35 %) since
    they have no model of what the activations will take; with a measured peak and a model, the prediction is
    the better test (recompute is pure overhead once the activations fit: Korthikanti et al. 2022). Nothing
    fires without a prediction (a CPU run reports no device memory)."""
    incumbent = incumbent_diagnosis(campaign, records)
    if incumbent is None or incumbent.outcome != "ok" or "activation_checkpoint" not in space.values:
        return None
    b = incumbent.breakdown
    share = b.get("recompute", 0.0)
    if (
        share <= max(b.get("exposed_comm", 0.0), b.get("bubble", 0.0))
        or share / max(1.0 - share, 1e-9) < campaign.min_gain
    ):
        return None
    mode = str(catalog.effective(campaign.incumbent_levers)["activation_checkpoint"])
    after = LESS_RECOMPUTE.get(mode)
    if (
        after is None
        or after not in space.values["activation_checkpoint"]
        or ("activation_checkpoint", after) in tried_from_incumbent(campaign)
    ):
        return None
    levers = {**campaign.incumbent_levers, "activation_checkpoint": after}
    if already_stepped(campaign, levers):
        return None
    pred = predicted_peak(campaign, levers, None, space, records)
    if pred is None or pred.predicted > pred.capacity:
        return None
    why = (
        f"the incumbent spends {share:.0%} of its step recomputing activations, its largest removable cost, and "
        f"{after} recompute is predicted to fit: {pred.predicted:.0f} GiB (its measured {pred.measured:.0f} GiB x "
        f"the memory model's {pred.ratio:.2f}) of the device's {pred.capacity:.0f} GiB"
    )
    return checked(campaign, space, "activation_checkpoint", after, why, [LESS_RECOMPUTE_FITS_LESSON])


class LessRecompute:
    """Recompute is the incumbent's largest removable cost and less of it is predicted to fit (:func:`less_recompute_that_fits`)."""

    id = "less-recompute-that-fits"
    lessons = (LESS_RECOMPUTE_FITS_LESSON,)
    obligation = False

    def propose(self, ctx: Context) -> Change | None:
        return less_recompute_that_fits(ctx.campaign, ctx.space, ctx.records)
