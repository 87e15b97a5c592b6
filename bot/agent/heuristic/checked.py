"""A lever change made a legal proposal from the incumbent: the change itself, or the enabler it needs first."""

from __future__ import annotations

from bot.agent.heuristic.constants import POLICY, SCHEDULE, TOO_FEW_MICROBATCHES
from bot.agent.heuristic.enablers import batch_enabler, microbatch_enabler, prerequisite
from bot.agent.lessons import LeverChange, apply_op
from bot.agent.policy import LeverSpace, validate_change
from bot.agent.space import layout_problem
from bot.core import levers as catalog
from bot.core.diagnosis import Diagnosis
from bot.core.records import Change, Scalar
from bot.core.state import Campaign


def relative(
    space: LeverSpace, current: Scalar | None, lc: LeverChange, levers: dict[str, Scalar] | None = None
) -> Scalar | None:
    """The value a lesson's change takes ``current`` to; ``max``: the largest legal value above it with the other
    ``levers`` (the incumbent's) as they are, None when there is none."""
    if lc.op is None:
        return lc.value
    order = space.values.get(lc.lever) or list(catalog.get(lc.lever).choices)
    if lc.op != "max":
        return apply_op(lc.op, current, order)
    above = order[order.index(current) + 1 :] if current in order else order
    for value in reversed(above):
        if layout_problem(space.recipe, {**(levers or {}), lc.lever: value}) is None:
            return value
    return None


def checked(
    campaign: Campaign,
    space: LeverSpace,
    lever: str,
    value: Scalar,
    why: str,
    lessons: list[str],
    incumbent: Diagnosis | None = None,
    *,
    probe: bool = False,
) -> Change | None:
    """``lever=value`` as a step from the incumbent if it may be one; else its enabler (a local batch that keeps the
    pinned global batch, a missing prerequisite) when one exists; else None. ``incumbent``: the incumbent's
    diagnosis, which a prerequisite that replaces its pipeline schedule needs (:meth:`_prerequisite`)."""
    current = catalog.effective(campaign.incumbent_levers)
    change = Change(
        lever=lever, before=current.get(lever), after=value, why=why, lessons=lessons, policy=POLICY, probe=probe
    )
    problem = validate_change(campaign, change, space)
    if problem is None:
        illegal = layout_problem(space.recipe, {**campaign.incumbent_levers, lever: value})
        if illegal is None:
            return change
        if lever == SCHEDULE:
            return microbatch_enabler(campaign, space, value, illegal, why, lessons, probe)
        return batch_enabler(campaign, space, lever, value, illegal, lessons)
    if problem.startswith("prerequisite missing") and lever == SCHEDULE and TOO_FEW_MICROBATCHES in problem:
        return microbatch_enabler(
            campaign, space, value, problem.removeprefix("prerequisite missing: "), why, lessons, probe
        )
    if problem.startswith("prerequisite missing"):
        fix = catalog.prerequisite_for(campaign.incumbent_levers, lever, value, space.model)
        if fix is not None:
            return prerequisite(campaign, space, lever, value, fix, problem, lessons, incumbent)
    return None
