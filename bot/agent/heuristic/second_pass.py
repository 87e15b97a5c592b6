"""The second coordinate-descent pass over kept steps that gained little, after the layout changed."""

from __future__ import annotations

from bot.agent.cost_focus import (
    costs_aimed_at,
)
from bot.agent.heuristic.checked import checked
from bot.agent.heuristic.constants import DEGREES, SCHEDULE, SECOND_PASS_LESSON
from bot.agent.heuristic.move import Context
from bot.agent.history import (
    MOMENTUM_GAIN,
    already_stepped,
    chain_steps,
    proposed_by,
    tried_from_incumbent,
)
from bot.agent.lessons import Lesson
from bot.agent.policy import LeverSpace
from bot.core import levers as catalog
from bot.core.records import Change
from bot.core.state import Campaign


def second_pass(
    campaign: Campaign, space: LeverSpace, lessons: list[Lesson], *, just_kept: bool = False
) -> Change | None:
    """A kept parallel-degree step that gained under MOMENTUM_GAIN, followed by a kept layout change (a degree or the
    schedule) that gained MOMENTUM_GAIN or more and was aimed at a cost the small one was aimed at too: the small
    one's change measured once the other way on the incumbent (a second coordinate-descent pass). A later change
    aimed elsewhere leaves the small one's cost as it was: no pass."""
    by_id = {ls.id: ls for ls in lessons}
    kept = [s for s in campaign.steps if s.kept]
    current = catalog.effective(campaign.incumbent_levers)
    for s in kept:
        c = s.change
        back = c.before
        if (
            back is None
        ):  # the lever had no value before it (a record that does not say): there is no way back to measure
            continue
        if (
            s.stacked_on is not None
            or c.enabler
            or c.extra
            or s.gain is None
            or not 0 < s.gain < MOMENTUM_GAIN
            or c.lever not in DEGREES
            or c.lever not in space.values
            or current.get(c.lever) != c.after
            or SECOND_PASS_LESSON in c.lessons
        ):
            continue
        costs = costs_aimed_at(c, by_id)
        later = [
            t
            for t in kept
            if t.n > s.n
            and (t.gain or 0.0) >= MOMENTUM_GAIN
            and any(campaign.step(m).change.lever in (*DEGREES, SCHEDULE) for m in chain_steps(campaign, t.n))
            and any(costs & costs_aimed_at(campaign.step(m).change, by_id) for m in chain_steps(campaign, t.n))
        ]
        if not later or (just_kept and later[-1].n != campaign.steps[-1].n):
            continue
        if (c.lever, str(back)) in tried_from_incumbent(campaign) or already_stepped(
            campaign, {**campaign.incumbent_levers, c.lever: back}
        ):
            continue
        if proposed_by(campaign, SECOND_PASS_LESSON, c.lever, back):
            continue
        why = (
            f"step {s.n} ({c.title()}) gained {s.gain:+.1%} on the layout of then; step {later[0].n} "
            f"({campaign.step(later[0].n).change.title()}) changed the layout since (kept at {later[0].gain:+.1%}): "
            f"{c.lever} back to {back}, measured once on the incumbent (a second coordinate-descent pass)"
        )
        change = checked(campaign, space, c.lever, back, why, [SECOND_PASS_LESSON])
        if change is not None:
            return change
    return None


class SecondPass:
    """A second coordinate-descent pass over the kept small gains (:func:`second_pass`); ``just_kept``: only right
    after the kept step that changed the layout."""

    lessons = (SECOND_PASS_LESSON,)
    obligation = False

    def __init__(self, *, just_kept: bool = False) -> None:
        self.just_kept = just_kept
        self.id = "second-pass-after-a-kept-step" if just_kept else "second-pass"

    def propose(self, ctx: Context) -> Change | None:
        return second_pass(ctx.campaign, ctx.space, ctx.lessons, just_kept=self.just_kept)
