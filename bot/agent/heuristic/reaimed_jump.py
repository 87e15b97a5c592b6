"""The re-aimed layout jump (an obligation): the incumbent's jump ran out of memory with a measured peak."""

from __future__ import annotations

from bot.agent.heuristic.constants import JUMP_LESSON
from bot.agent.heuristic.jump import reaimed_jump
from bot.agent.heuristic.move import Context
from bot.core.records import Change


class ReaimedJump:
    """One more jump from the same incumbent, its memory anchored on the failed jump's peak (:func:`reaimed_jump`);
    before any out-of-memory retry."""

    id = "reaimed-jump"
    lessons = (JUMP_LESSON,)
    obligation = True

    def propose(self, ctx: Context) -> Change | None:
        return reaimed_jump(ctx.campaign, ctx.space, ctx.lessons, ctx.diagnosis, ctx.records)
