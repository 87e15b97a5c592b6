"""Pushing an undecided step one notch further along its lever."""

from __future__ import annotations

from bot.agent.heuristic.checked import checked
from bot.agent.heuristic.move import Context
from bot.agent.heuristic.screens import screened
from bot.agent.history import (
    last_step_trial,
)
from bot.agent.layout_moves import (
    next_notch,
)
from bot.agent.policy import LeverSpace
from bot.core import levers as catalog
from bot.core.records import Change
from bot.core.state import Campaign


def push_further(campaign: Campaign, space: LeverSpace) -> Change | None:
    """The last step (one numeric lever, from the incumbent) measured a positive estimate but ended undecided: the same
    lever one notch further the same way -- a bigger change has a bigger effect to measure."""
    last, trial = last_step_trial(campaign)
    if last is None:
        return None
    if (
        last.kept
        or last.stacked_on is not None
        or last.change.extra
        or trial is None
        or trial.outcome != "ok"
        or last.gain is None
        or last.gain <= 0
        or last.verdict is None
        or not last.verdict.ok
        or last.measurement is None
        or last.measurement.decision != "undecided"
    ):
        return None
    if catalog.effective(campaign.incumbent_levers).get(last.change.lever) != last.change.before:
        return None  # the incumbent moved on since
    notch = next_notch(space.values.get(last.change.lever, []), last.change.before, last.change.after)
    if notch is None:
        return None
    why = (
        f"step {last.n} ({last.change.title()}) gained {last.gain:+.1%}, undecided (its interval straddles the minimum gain): one notch further "
        "along the same lever, for a larger effect to measure"
    )
    return checked(campaign, space, last.change.lever, notch, why, list(last.change.lessons))


class PushFurther:
    """The last step gained but ended undecided: its lever one notch further (:func:`push_further`), speed-screened."""

    id = "push-further"
    lessons: tuple[str, ...] = ()
    obligation = False

    def propose(self, ctx: Context) -> Change | None:
        return screened(ctx.campaign, ctx.space, push_further(ctx.campaign, ctx.space))
