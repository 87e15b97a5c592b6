"""The layout jump (:mod:`bot.agent.layout_jump`) as moves: once a third of the budget is spent, and once the
lessons and the second pass have nothing left."""

from __future__ import annotations

from bot.agent.cost_focus import (
    unmeasurable,
)
from bot.agent.heuristic.constants import JUMP_AT, JUMP_LESSON, POLICY
from bot.agent.heuristic.move import Context
from bot.agent.history import (
    compile_gain,
    compile_untried,
    incumbent_diagnosis,
    last_layout_step,
    last_step_trial,
)
from bot.agent.layout_jump import layout_jump as jump_target
from bot.agent.lessons import Lesson, relevant
from bot.agent.memory_screen import MeasuredPeak, reference_peak
from bot.agent.policy import LeverSpace, lesson_context, validate_change
from bot.core import levers as catalog
from bot.core.diagnosis import Diagnosis
from bot.core.records import Change, RecordReader, Setting
from bot.core.state import Campaign


def layout_jump(
    campaign: Campaign,
    space: LeverSpace,
    lessons: list[Lesson],
    diagnosis: Diagnosis,
    records: RecordReader,
    anchor: MeasuredPeak | None = None,
) -> Change | None:
    """The diagnosis- and lesson-driven moves are spent: the layout the analytic cost model ranks best from the
    incumbent (:mod:`bot.agent.layout_jump`), once per incumbent, as a chain of one-lever enablers with its last
    lever measured on them (``layout-jump-from-cost-model``; the lesson must be in the catalog and match).
    ``anchor``: the measured peak its memory is judged on, for the re-aimed jump (``_reaimed_jump``); else the
    incumbent's."""
    if not any(lesson.id == JUMP_LESSON for lesson in relevant(lessons, lesson_context(campaign, diagnosis, space))):
        return None
    if anchor is None and any(JUMP_LESSON in s.change.lessons for s in campaign.steps if s.n > campaign.incumbent_step):
        return None
    if not campaign.incumbent_step:
        return None  # nothing kept: no measured speed-up the model could be checked against
    stepped = [campaign.baseline_levers, *(s.levers for s in campaign.steps if s.runs or not s.change.enabler)]
    jump = jump_target(
        space.recipe,
        campaign.baseline_levers,
        campaign.incumbent_levers,
        space.values,
        stepped,
        space.model,
        frozenset(unmeasurable(campaign, diagnosis)),
        anchor or reference_peak(campaign, None, records),
        campaign.incumbent_tps / campaign.baseline_tps if campaign.incumbent_tps and campaign.baseline_tps else None,
        last_layout_step(campaign),
        compile_untried(campaign, space),
        compile_gain(campaign),
    )
    if jump is None:
        return None
    current = catalog.effective(campaign.incumbent_levers)
    (lever, value), *rest = jump.links
    layout = ", ".join(f"{k.rsplit('.', 1)[-1]} {current.get(k)} -> {v}" for k, v in jump.links)
    why = (
        f"no diagnosis- or lesson-driven move is left; the analytic cost model predicts the layout {layout} "
        f"{jump.saving:.0%} faster than the incumbent's ({jump.incumbent_step_s:.2f} s -> {jump.step_s:.2f} s a step; "
        f"{jump.summary}), its other levers kept: measured once, reached one lever at a time"
    )
    if rest:
        why = f"enabler of {', then '.join(f'{k}={v}' for k, v in rest)}: {why}"
    change = Change(
        lever=lever,
        before=current.get(lever),
        after=value,
        lessons=[JUMP_LESSON],
        policy=POLICY,
        why=why,
        enabler=bool(rest),
        enables=[Setting(lever=k, value=v) for k, v in rest],
    )
    return change if validate_change(campaign, change, space) is None else None


def reaimed_jump(
    campaign: Campaign, space: LeverSpace, lessons: list[Lesson], diagnosis: Diagnosis, records: RecordReader
) -> Change | None:
    """The incumbent's layout jump ran out of memory and its run measured a peak: one more jump from the same
    incumbent, its memory anchored on that peak (the memory model's ratio errs more the further layouts lie apart,
    and the failed layout is the measured one nearest the jump). None otherwise, and never a third jump."""
    last, trial = last_step_trial(campaign)
    if last is None or trial is None or trial.outcome != "oom" or JUMP_LESSON not in last.change.lessons:
        return None
    if (
        sum(1 for s in campaign.steps if s.n > campaign.incumbent_step and JUMP_LESSON in s.change.lessons and s.runs)
        != 1
    ):
        return None
    peak = reference_peak(campaign, last.n, records)
    if peak is None or catalog.effective(peak.levers) != catalog.effective(last.levers):
        return None  # the failed run reported no peak: the same anchor would aim the same way
    on = incumbent_diagnosis(campaign, records)  # the lessons match the incumbent, which ran fine
    return layout_jump(campaign, space, lessons, on, records, anchor=peak) if on is not None else None


class LayoutJumpAtAThird:
    """Once a campaign, when JUMP_AT of the budget is spent and no jump was made yet: the layout jump, so a search
    still climbing in its starting layout's basin sees another before the budget ends."""

    id = "layout-jump-at-a-third"
    lessons = (JUMP_LESSON,)
    obligation = False

    def propose(self, ctx: Context) -> Change | None:
        c = ctx.campaign
        if c.budget > 0 and c.spent >= JUMP_AT * c.budget and not any(JUMP_LESSON in s.change.lessons for s in c.steps):
            return layout_jump(c, ctx.space, ctx.lessons, ctx.diagnosis, ctx.records)
        return None


class LayoutJump:
    """The lessons and the second pass have nothing left for the incumbent: the layout jump (:func:`layout_jump`)."""

    id = "layout-jump"
    lessons = (JUMP_LESSON,)
    obligation = False

    def propose(self, ctx: Context) -> Change | None:
        return layout_jump(ctx.campaign, ctx.space, ctx.lessons, ctx.matched, ctx.records)
