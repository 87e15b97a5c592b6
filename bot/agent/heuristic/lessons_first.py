"""The relevant lessons against the diagnosis-driven move: which of the two acts for the incumbent."""

from __future__ import annotations

from bot.agent.cost_focus import (
    aimed_at_a_larger_cost,
    aimed_cost,
    aims_at,
    dominant_cost_first,
    predicted_faster,
)
from bot.agent.heuristic.diagnosis_driven import diagnosis_driven
from bot.agent.heuristic.from_lessons import from_lessons
from bot.agent.heuristic.move import Context
from bot.core.records import Change


class LessonsFirst:
    """The first legal, untried change of the relevant lessons (dominant cost first) -- unless the diagnosis-driven
    move is aimed at a cost LARGER_COST times the lesson's; then that move, or a lesson aimed at the same cost where
    the analytic cost model predicts its change at least as fast (:mod:`bot.agent.cost_focus`)."""

    id = "lessons-or-diagnosis"
    lessons: tuple[str, ...] = ()
    obligation = False

    def propose(self, ctx: Context) -> Change | None:
        c, space, d = ctx.campaign, ctx.space, ctx.matched
        lesson_change = from_lessons(
            c, space, dominant_cost_first(ctx.hits, d, c), ctx.current, ctx.moot, ctx.incumbent
        )
        driven = diagnosis_driven(c, d, space)
        if lesson_change is not None and not aimed_at_a_larger_cost(driven, lesson_change, d, c):
            return lesson_change
        if driven is None:
            return None
        aimed = [ls for ls in ctx.hits if aims_at(ls, aimed_cost(driven))] if lesson_change is not None else []
        same = from_lessons(c, space, aimed, ctx.current, ctx.moot, ctx.incumbent) if aimed else None
        return same if same is not None and predicted_faster(c, space, same, driven) else driven
