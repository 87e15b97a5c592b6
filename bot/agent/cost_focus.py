"""Which cost a move is aimed at, and which move goes first: lessons aimed at the incumbent's dominant cost ahead
of the others, a diagnosis-driven move aimed at a much larger cost ahead of a lesson's, levers whose whole cost is
inside the noise left alone, and memory partners in the order the analytic cost model (:mod:`bot.agent.costmodel`,
not the simulator) predicts fastest.

Pure functions of the measured breakdown (:class:`bot.core.diagnosis.Diagnosis`), the changes and the lessons.
"""

from __future__ import annotations

import math
from itertools import takewhile

from bot.agent.costmodel import estimate_of
from bot.agent.history import chain_steps, enabled_settings
from bot.agent.lessons import Lesson
from bot.agent.memory_screen import change_levers
from bot.agent.policy import LeverSpace
from bot.agent.stopping import ADDRESSABLE
from bot.core import levers as catalog
from bot.core.diagnosis import Diagnosis
from bot.core.matcher import positive_fields
from bot.core.records import Change, Scalar
from bot.core.state import Campaign, Step

BUBBLE_LESSON = "pp-fill-the-pipeline"
DP_BUBBLE_LESSON = "pp-bubble-fewer-dp-ranks"
COMM_DP_LESSON = "fsdp-comm-fewer-dp-ranks"
# the one cost a lever exists to remove, as named in the step-time breakdown
ADDRESSES = {"parallelism.pipeline_parallel_schedule": "bubble", "activation_checkpoint": "recompute"}
# what each lever's change can remove from the step, for putting first the lessons aimed at a cost that dominates it
REMOVES = {
    "parallelism.fsdp_reshard_after_forward": "exposed_comm",
    "parallelism.expert_parallel_degree": "exposed_comm",
    "parallelism.pipeline_parallel_schedule": "bubble",
    "parallelism.pipeline_parallel_microbatch_size": "bubble",
    "activation_checkpoint": "recompute",
}
# of the step: a cost over two fifths of it comes first (higher, a dominant cost waited behind lessons aimed at
# nothing measured; lower, a moderate one went before the moves that shrink it: docs/agent-evidence.md)
DOMINANT = 0.4
AIMS = {BUBBLE_LESSON: "bubble", DP_BUBBLE_LESSON: "bubble", COMM_DP_LESSON: "exposed_comm"}
# measured steps aimed at the dominant cost that gained nothing, after which it no longer goes first: the diagnosis
# named a cost its moves did not reach, and the lessons' own order gives the other costs their turn
SPENT = 2
LARGER_COST = 2.0  # a diagnosis-driven move aimed at a cost this many times a lesson's goes ahead of the lesson


def aimed_cost(change: Change | None) -> str:
    """The cost ``change`` is aimed at: its diagnosis-driven lesson's, or what its lever (an enabler's: the lever it
    enables) REMOVES ("" for none)."""
    if change is None:
        return ""
    enables = enabled_settings(change) if change.enabler else []
    return next((AIMS[x] for x in change.lessons if x in AIMS), None) or REMOVES.get(
        enables[0].lever if enables else change.lever, ""
    )


def costs_aimed_at(change: Change, lessons: dict[str, Lesson]) -> set[str]:
    """Every cost ``change`` is aimed at: ``aimed_cost``'s, and each cost whose share of the step one of its lessons
    fires on (DualPipeV from the MoE lesson that fires on exposed communication: the bubble and exposed_comm)."""
    out = {aimed_cost(change)} - {""}
    for lid in change.lessons:
        les = lessons.get(lid)
        if les is not None:
            out |= {cost for cost in ADDRESSABLE if fires_on(les, cost)}
    return out


def aimed_at_a_larger_cost(
    driven: Change | None, lesson_change: Change, diagnosis: Diagnosis, campaign: Campaign | None = None
) -> bool:
    """Whether the diagnosis-driven move is aimed at a cost more than LARGER_COST times the one the lesson's change
    is aimed at (both named by the incumbent's breakdown), and not at one SPENT measured steps since the incumbent
    was kept failed to reach (``campaign``)."""
    if driven is None or diagnosis.outcome != "ok" or not diagnosis.breakdown:
        return False
    if campaign is not None and failed_aims(campaign).count(aimed_cost(driven)) >= SPENT:
        return False
    d, lesson = diagnosis.breakdown.get(aimed_cost(driven)), diagnosis.breakdown.get(aimed_cost(lesson_change))
    return d is not None and lesson is not None and d > LARGER_COST * lesson


def dominant_cost_first(lessons: list[Lesson], diagnosis: Diagnosis, campaign: Campaign | None = None) -> list[Lesson]:
    """The relevant lessons with those aimed at the incumbent's dominant cost first (the largest addressable cost,
    when over DOMINANT of its measured step), each group in priority order: a first probe is better spent on what
    dominates the step than on a small cost, however high that lesson's priority. Without a dominant cost (or a
    breakdown), or once SPENT measured steps aimed at it since the incumbent was kept gained nothing (``campaign``),
    the order is the lessons' own."""
    if diagnosis.outcome != "ok" or not diagnosis.breakdown:
        return lessons
    cost, share = max(
        ((k, v) for k, v in diagnosis.breakdown.items() if k in ADDRESSABLE), key=lambda kv: kv[1], default=("", 0.0)
    )
    if share <= DOMINANT or campaign is not None and failed_aims(campaign).count(cost) >= SPENT:
        return lessons
    aimed = [ls for ls in lessons if aims_at(ls, cost)]
    return aimed + [ls for ls in lessons if ls not in aimed]


def failed_aims(campaign: Campaign) -> list[str]:
    """The cost each measured step since the incumbent was kept was aimed at (an enabled change's: the first its
    enablers name, where its own names none), for those that gained nothing -- not kept, and not an enabler or a
    predicted out-of-memory that made no run."""
    out: list[str] = []
    for st in campaign.steps[campaign.incumbent_step :]:
        if st.kept or not st.runs or st.change.enabler:
            continue
        below = [campaign.step(n) for n in chain_steps(campaign, st.n)[1:]]
        links = [st, *takewhile(lambda s: s.change.enabler, below)]
        out.append(next((cost for s in links if (cost := aimed_cost(s.change))), ""))
    return out


def aims_at(lesson: Lesson, cost: str) -> bool:
    """Whether ``lesson`` is aimed at ``cost``: a lever it tries exists to remove that cost (REMOVES), or it fires on
    that cost's share of the measured step (its ``when`` reads ``diagnosis.breakdown.<cost>_frac`` outside a ``not``)."""
    return any(REMOVES.get(lc.lever) == cost for lc in lesson.try_) or fires_on(lesson, cost)


def fires_on(lesson: Lesson, cost: str) -> bool:
    """Whether ``lesson`` fires on ``cost``'s share of the measured step (reads ``diagnosis.breakdown.<cost>_frac``
    outside a ``not``; one held back by the share reads it under ``not``)."""
    return lesson.when is not None and f"diagnosis.breakdown.{cost}_frac" in positive_fields(lesson.when)


def unmeasurable(campaign: Campaign, diagnosis: Diagnosis) -> set[str]:
    """Levers whose whole addressable cost is below the minimum worthwhile gain: removing all of it could not be kept
    as a gain, so a trial would spend runs to learn nothing. Only with a measured breakdown that names the cost."""
    if campaign.band is None or diagnosis.outcome != "ok":
        return set()

    def best_gain(f: float) -> float:  # removing a share f of the step speeds it up by f / (1 - f)
        return f / (1.0 - f) if f < 1.0 else float("inf")

    return {
        lever
        for lever, cost in ADDRESSES.items()
        if cost in diagnosis.breakdown and best_gain(diagnosis.breakdown[cost]) < campaign.min_gain
    }


Partner = tuple[str, Scalar, str, str]  # a memory partner: (lever, value, lesson, how it frees memory)


def fastest_first(campaign: Campaign, space: LeverSpace, last: Step, options: list[Partner]) -> list[Partner]:
    """Memory partners ``(lever, value, lesson, how)`` for the chain ending at ``last``, ordered by the step time the
    analytic cost model predicts for the layout each leads to (:mod:`bot.agent.costmodel`, not the simulator), their
    listed order breaking ties and kept where the model cannot tell (a model or hardware it does not know). The model
    orders the partners but vetoes none: a partner it ranks last is still tried before the batch is halved (why:
    docs/agent-evidence.md)."""

    def predicted(option: Partner) -> float:
        lever, value = option[0], option[1]
        on = campaign.step(last.stacked_on) if lever == last.change.lever and last.stacked_on else last
        return predicted_step(space, {**on.levers, lever: value})

    return sorted(options, key=predicted)


def predicted_step(space: LeverSpace, levers: dict[str, Scalar]) -> float:
    """The analytic cost model's step time for the recipe run with ``levers``; infinite where it cannot tell."""
    try:
        return estimate_of(space.recipe, levers).step_s
    except (KeyError, ValueError, ZeroDivisionError, catalog.LeverError):
        return math.inf


def predicted_faster(campaign: Campaign, space: LeverSpace, a: Change, b: Change) -> bool:
    """Whether the analytic cost model predicts the run ``a`` leads to (an enabler's: with the change it enables) at
    least as fast as ``b``'s; False where it cannot tell (a model or hardware it does not know)."""

    def target(change: Change) -> dict[str, Scalar]:
        levers = change_levers(campaign, change)
        enables = enabled_settings(change) if change.enabler else []
        if enables:
            levers = {**levers, enables[0].lever: enables[0].value}
        return levers

    ta, tb = predicted_step(space, target(a)), predicted_step(space, target(b))
    return math.isfinite(ta) and math.isfinite(tb) and ta <= tb
