"""The follow-up (an obligation): a coupled retry ran behind the incumbent; the move for the cost it left behind."""

from __future__ import annotations

from bot.agent.cost_focus import (
    BUBBLE_LESSON,
    dominant_cost_first,
)
from bot.agent.heuristic.checked import relative
from bot.agent.heuristic.constants import (
    BUBBLE_FRAC,
    LESS_RECOMPUTE,
    MAX_CHAIN,
    POLICY,
    RECOMPUTE_FRAC,
    RECOMPUTE_LESSON,
    SCHEDULE,
)
from bot.agent.heuristic.move import Context
from bot.agent.history import (
    AC_RANK,
    already_stepped,
    chain_depth,
    incumbent_diagnosis,
    last_step_trial,
)
from bot.agent.lessons import Lesson, relevant
from bot.agent.memory_screen import predicted_oom
from bot.agent.policy import LeverSpace, lesson_context, validate_change
from bot.agent.space import layout_problem
from bot.agent.stopping import NO_RECOMPUTE_HEADROOM
from bot.core import levers as catalog
from bot.core.diagnosis import Diagnosis, diagnose
from bot.core.records import MEASURED_OUTCOMES, Change, RecordReader, Scalar
from bot.core.state import Campaign, Step


def follow_up(
    campaign: Campaign, space: LeverSpace, records: RecordReader, lessons: list[Lesson] | None = None
) -> Change | None:
    """The last step was a coupled retry (stacked) that ran but did not beat the incumbent, and its own diagnosis
    names the cost the coupling left behind: stack the move that removes it (a large pipeline bubble -> fill the
    pipeline with the whole local batch, or, with it full, the schedule the lessons pick for that run; recompute
    left with memory to spare -> less recompute)."""
    last, trial = last_step_trial(campaign)
    if last is None:
        return None
    if (
        last.kept
        or last.stacked_on is None
        or trial is None
        or trial.outcome not in MEASURED_OUTCOMES
        or not trial.record
    ):
        return None
    if chain_depth(campaign, last) >= MAX_CHAIN:
        return None
    record = records.read(trial.record)
    if record is None:
        return None
    d = diagnose(record)
    return fix_for(
        campaign,
        space,
        d,
        last.levers,
        stacked_on=last.n,
        why_prefix=f"step {last.n} ({last.change.title()}) ran",
        behind=last.gain,
        recompute_left=recompute_left_behind(campaign, last, space, records),
        lessons=lessons,
    )


def fix_for(
    campaign: Campaign,
    space: LeverSpace,
    d: Diagnosis,
    levers: dict[str, Scalar],
    *,
    stacked_on: int | None,
    why_prefix: str,
    behind: float | None = None,
    recompute_left: bool = True,
    lessons: list[Lesson] | None = None,
) -> Change | None:
    """The stacked move for the cost ``d`` names: a large bubble -> the largest local batch; a bubble the local batch
    can no longer shrink -> the pipeline schedule the ``lessons`` pick for that run (before less recompute where the
    bubble is the larger cost); recompute -> less recompute, only where removing all of it could lift a layout
    measured at ``behind`` above the incumbent by the minimum gain (removing a share f speeds it up 1/(1-f) at most)."""
    eff = catalog.effective(levers)
    bubble = d.breakdown.get("bubble", 0.0)
    recompute = d.breakdown.get("recompute", 0.0)
    if (
        behind is not None and (1.0 + behind) / max(1.0 - recompute, 1e-9) < 1.0 + campaign.min_gain
    ) or not recompute_left:
        recompute = 0.0
    lbs_name = "training.local_batch_size"
    if int(eff["parallelism.pipeline_parallel_degree"]) > 1 and bubble >= BUBBLE_FRAC and lbs_name in space.values:
        legal = [
            v
            for v in space.values[lbs_name]
            if isinstance(v, int)
            and v > int(eff[lbs_name])
            and layout_problem(space.recipe, {**levers, lbs_name: v}) is None
        ]
        if legal:
            change = Change(
                lever=lbs_name,
                before=eff[lbs_name],
                after=max(legal),
                lessons=[BUBBLE_LESSON],
                policy=POLICY,
                stacked_on=stacked_on,
                why=f"{why_prefix} with a {bubble:.0%} pipeline bubble: the largest local batch the pinned global "
                "batch allows gives the most microbatches per flush ((p-1)/m shrinks) and fewer flushes",
            )
            if validate_change(campaign, change, space) is None:
                return change
    schedule = None
    if int(eff["parallelism.pipeline_parallel_degree"]) > 1 and bubble >= BUBBLE_FRAC and lessons:
        schedule = schedule_for(
            campaign,
            space,
            lessons,
            d,
            levers,
            stacked_on=stacked_on,
            why=f"{why_prefix} with a {bubble:.0%} pipeline bubble and the local batch at the global batch's share",
        )
    if schedule is not None and bubble >= recompute:
        return schedule
    headroom = d.mem_headroom_frac
    mode = str(eff["activation_checkpoint"])
    if (
        recompute >= RECOMPUTE_FRAC
        and mode in LESS_RECOMPUTE
        and "activation_checkpoint" in space.values
        and (headroom or 0) >= 0.05
    ):
        change = Change(
            lever="activation_checkpoint",
            before=mode,
            after=LESS_RECOMPUTE[mode],
            lessons=[RECOMPUTE_LESSON],
            policy=POLICY,
            stacked_on=stacked_on,
            why=f"{why_prefix} with {recompute:.0%} of the step recomputing activations: less recompute",
        )
        if validate_change(campaign, change, space) is None:
            return change
    return schedule


def schedule_for(
    campaign: Campaign,
    space: LeverSpace,
    lessons: list[Lesson],
    d: Diagnosis,
    levers: dict[str, Scalar],
    *,
    stacked_on: int | None,
    why: str,
) -> Change | None:
    """The first legal, not yet stepped pipeline schedule that the lessons relevant to the run of ``levers`` (its
    diagnosis ``d``) try, those aimed at its dominant cost first, stacked on ``stacked_on``; None without one."""
    if d.outcome in MEASURED_OUTCOMES:  # a run stopped early ran as well as one measured to the end
        d = d.model_copy(update={"outcome": "ok"})
    ctx = lesson_context(campaign, d, space, levers)
    eff = catalog.effective(levers)
    for lesson in dominant_cost_first(relevant(lessons, ctx), d):
        if not lesson.auto_propose:
            continue
        for lc in lesson.try_:
            if lc.lever != SCHEDULE or SCHEDULE not in space.values:
                continue
            value = relative(space, eff.get(SCHEDULE), lc)
            if (
                value is None
                or str(value) == str(eff[SCHEDULE])
                or already_stepped(campaign, {**levers, SCHEDULE: value})
            ):
                continue
            if layout_problem(space.recipe, {**levers, SCHEDULE: value}) is not None:
                continue
            change = Change(
                lever=SCHEDULE,
                before=eff[SCHEDULE],
                after=value,
                lessons=[lesson.id],
                policy=POLICY,
                stacked_on=stacked_on,
                why=f"{why}: {lesson.why}",
            )
            if validate_change(campaign, change, space) is None:
                return change
    return None


def recompute_left_behind(campaign: Campaign, last: Step, space: LeverSpace, records: RecordReader) -> bool:
    """Whether the recompute a stacked step ran with is the coupling's to remove: the chain recomputes more than the
    incumbent, or the incumbent cannot recompute less itself (no headroom, its next mode down predicted not to fit,
    or already stepped). Otherwise less recompute is the incumbent's own move, measured there by the lessons."""
    chain, inc = catalog.effective(last.levers), catalog.effective(campaign.incumbent_levers)
    mode = str(inc["activation_checkpoint"])
    if AC_RANK.get(str(chain["activation_checkpoint"]), 2) > AC_RANK.get(mode, 2) or mode not in LESS_RECOMPUTE:
        return True
    d = incumbent_diagnosis(campaign, records)
    if d is None or (d.mem_headroom_frac or 0.0) < NO_RECOMPUTE_HEADROOM:
        return True
    less = {**campaign.incumbent_levers, "activation_checkpoint": LESS_RECOMPUTE[mode]}
    return already_stepped(campaign, less) or predicted_oom(campaign, less, None, space, records) is not None


class FollowUp:
    """A coupled retry ran behind the incumbent: the stacked move for the cost its own run names (:func:`follow_up`)."""

    id = "follow-up"
    lessons = (BUBBLE_LESSON, RECOMPUTE_LESSON)
    obligation = True

    def propose(self, ctx: Context) -> Change | None:
        return follow_up(ctx.campaign, ctx.space, ctx.records, ctx.lessons)
