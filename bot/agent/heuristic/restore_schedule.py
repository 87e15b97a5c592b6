"""Restoring a schedule (an obligation) that a stepping stone stood in for, once it is legal again."""

from __future__ import annotations

from bot.agent.heuristic.checked import checked
from bot.agent.heuristic.constants import SCHEDULE, STONE_LESSON
from bot.agent.heuristic.move import Context
from bot.agent.history import (
    already_stepped,
    chain_steps,
    proposed_by,
)
from bot.agent.policy import LeverSpace
from bot.agent.space import layout_problem
from bot.core import levers as catalog
from bot.core.records import Change
from bot.core.state import Campaign


def restore_schedule(campaign: Campaign, space: LeverSpace) -> Change | None:
    """A kept chain went through a stepping-stone schedule (``_stepping_stone``) and the incumbent still runs it:
    the schedule it replaced, once legal on the incumbent, measured once -- it was kept before the stone for
    what it buys."""
    current = catalog.effective(campaign.incumbent_levers)
    for n in sorted({n for s in campaign.steps if s.kept for n in chain_steps(campaign, s.n)}, reverse=True):
        c = campaign.step(n).change
        if STONE_LESSON not in c.lessons or c.lever != SCHEDULE or current.get(SCHEDULE) != c.after:
            continue
        replaced = c.before
        if replaced is None:  # the schedule it stood in for is not recorded: nothing to restore
            continue
        if proposed_by(campaign, STONE_LESSON, SCHEDULE, replaced):
            return None  # measured back once already (a later incumbent does not reopen it)
        if already_stepped(campaign, {**campaign.incumbent_levers, SCHEDULE: replaced}):
            return None
        if layout_problem(space.recipe, {**campaign.incumbent_levers, SCHEDULE: replaced}) is not None:
            return None  # not legal yet: it comes back when a later step gives it the microbatches
        why = f"step {n} ({c.title()}) stood in for {replaced} until the local batch allowed it: {replaced} back"
        return checked(campaign, space, SCHEDULE, replaced, why, [STONE_LESSON])
    return None


class RestoreSchedule:
    """A kept chain went through a stepping-stone schedule: the schedule it replaced, once legal (:func:`restore_schedule`)."""

    id = "restore-schedule"
    lessons = (STONE_LESSON,)
    obligation = True

    def propose(self, ctx: Context) -> Change | None:
        return restore_schedule(ctx.campaign, ctx.space)
