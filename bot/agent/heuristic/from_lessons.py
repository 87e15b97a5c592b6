"""Changes from the lessons: the first legal, untried one of the lessons given, and the lessons held back only by
their memory-headroom threshold."""

from __future__ import annotations

from collections.abc import Callable

from bot.agent.cost_focus import dominant_cost_first
from bot.agent.heuristic.checked import checked, relative
from bot.agent.heuristic.enablers import smaller_batch_share
from bot.agent.heuristic.move import Context
from bot.agent.heuristic.screens import if_predicted_to_fit
from bot.agent.history import (
    MOMENTUM_GAIN,
    refuted,
    undoes_a_kept_step,
)
from bot.agent.lessons import Lesson, relevant
from bot.agent.memory_screen import change_levers
from bot.agent.policy import LeverSpace
from bot.core.diagnosis import Diagnosis
from bot.core.records import Change, Scalar
from bot.core.state import Campaign


def from_lessons(
    campaign: Campaign,
    space: LeverSpace,
    lessons: list[Lesson],
    current: dict[str, Scalar],
    moot: set[str],
    incumbent: Diagnosis | None = None,
    fits: Callable[[Change, dict[str, Scalar]], Change | None] | None = None,
) -> Change | None:
    """The first legal, untried change of ``lessons`` (in order; each lesson's ``try`` list in order), passed
    through ``fits`` when given, with the levers the lesson's change runs with (an enabler's too; None from it:
    that change is passed over)."""
    for lesson in lessons:
        if not lesson.auto_propose:
            continue
        for lc in lesson.try_:
            if lc.lever not in space.values and lc.lever not in space.recipe.levers:
                continue  # the recipe does not let the tuner change it
            if lc.lever in moot:
                continue
            value = relative(space, current.get(lc.lever), lc, campaign.incumbent_levers)
            if (
                value is None
                or refuted(campaign, lesson, lc.lever, value)
                or undoes_a_kept_step(campaign, lc.lever, value, MOMENTUM_GAIN)
            ):
                continue
            change = checked(campaign, space, lc.lever, value, lesson.why, [lesson.id], incumbent)
            if change is not None and fits is not None:
                change = fits(change, {**change_levers(campaign, change), lc.lever: value})
            if change is not None:
                return change
    return None


def held_back_by_headroom(lessons: list[Lesson], ctx: dict, hits: list[Lesson]) -> list[Lesson]:
    """The lessons that match but for their memory-headroom condition: those ``relevant`` finds once the measured
    headroom is taken as the whole device and not before. A lesson's fixed headroom threshold (25 %, 30 %, 35 %)
    stands in for a prediction it has no model to make; where a measured peak and the memory model can predict the
    lesson's own change (:func:`_if_predicted_to_fit`), the prediction decides instead."""
    if ctx.get("diagnosis.mem_headroom_frac") is None:
        return []
    ids = {lesson.id for lesson in hits}
    return [lesson for lesson in relevant(lessons, {**ctx, "diagnosis.mem_headroom_frac": 1.0}) if lesson.id not in ids]


class HeldBackLessons:
    """The lessons held back only by their memory-headroom threshold, where the memory screen predicts their change
    fits (an enabler that shrinks the local batch with the DP degree's growth allowed)."""

    id = "held-back-lessons"
    lessons: tuple[str, ...] = ()
    obligation = False

    def propose(self, ctx: Context) -> Change | None:
        c, space, records = ctx.campaign, ctx.space, ctx.records
        held = dominant_cost_first(held_back_by_headroom(ctx.lessons, ctx.lesson_ctx, ctx.hits), ctx.matched, c)
        return from_lessons(
            c,
            space,
            held,
            ctx.current,
            ctx.moot,
            ctx.incumbent,
            fits=lambda ch, lv: (
                if_predicted_to_fit(c, ch, lv, space, records) or smaller_batch_share(c, space, ch, lv, records)
            ),
        )
