"""Enablers: gated one-lever changes (not run) that make the next change legal or measurable -- the local batch that
keeps the pinned global batch, a missing prerequisite, a schedule's microbatches, a stepping-stone schedule, the
fill that goes with more pipeline stages."""

from __future__ import annotations

from bot.agent.cost_focus import (
    BUBBLE_LESSON,
)
from bot.agent.costmodel import bubble_fraction
from bot.agent.heuristic.constants import (
    BUBBLE_FRAC,
    DEGREES,
    MAX_CHAIN,
    MICROBATCH_LESSON,
    POLICY,
    SCHEDULE,
    SHARE_LESSON,
    STEPPING_STONE,
    STONE_LESSON,
    TOO_FEW_MICROBATCHES,
)
from bot.agent.heuristic.screens import if_predicted_to_fit
from bot.agent.history import (
    already_stepped,
    chain_steps,
)
from bot.agent.layout_moves import (
    batch_share,
    fewer_dp_degrees,
    model_parallel,
)
from bot.agent.memory_screen import change_levers
from bot.agent.policy import LeverSpace, validate_change
from bot.agent.space import layout_problem
from bot.core import levers as catalog
from bot.core.diagnosis import Diagnosis
from bot.core.records import Change, RecordReader, Scalar, Setting
from bot.core.state import Campaign


def batch_enabler(
    campaign: Campaign,
    space: LeverSpace,
    lever: str,
    value: Scalar,
    illegal: str,
    lessons: list[str],
    *,
    stacked_on: int | None = None,
    why: str = "",
) -> Change | None:
    """``lever=value`` is refused only by the pinned global batch (or by the microbatches per flush its share
    leaves a schedule): the local-batch change that keeps it -- from the incumbent, or stacked on step
    ``stacked_on`` (a retry's degree change; ``why``: the retry's reason)."""
    lbs_name = "training.local_batch_size"
    too_few = TOO_FEW_MICROBATCHES in illegal
    if lever not in DEGREES or not ("local_batch_size*dp" in illegal or too_few) or lbs_name not in space.values:
        return None
    base = campaign.step(stacked_on).levers if stacked_on else campaign.incumbent_levers
    cur = catalog.effective(base)
    old_mp, new_mp = model_parallel(cur), model_parallel({**cur, lever: value})
    lbs = int(cur[lbs_name])
    target = batch_share(lbs, old_mp, new_mp)
    if target < 1 or target not in space.values[lbs_name]:
        return None
    enabled = {**base, lbs_name: target, lever: value}
    if layout_problem(space.recipe, enabled) is not None:
        return None
    if already_stepped(campaign, enabled):
        return None  # the change it would enable was already measured (or refused): nothing to enable
    change = Change(
        lever=lbs_name,
        before=lbs,
        after=target,
        lessons=lessons,
        policy=POLICY,
        enabler=True,
        stacked_on=stacked_on,
        enables=[Setting(lever=lever, value=value)],
        why=f"enabler of {lever}={value}: "
        + (
            f"the local batch that gives the schedule its microbatches at the new DP degree ({illegal})"
            if too_few
            else f"keeps local_batch x dp = the pinned global batch split when the DP degree changes ({illegal})"
        )
        + (f"; {why}" if why else ""),
    )
    if validate_change(campaign, change, space) is not None or layout_problem(space.recipe, {**base, lbs_name: target}):
        return None
    return change


def prerequisite(
    campaign: Campaign,
    space: LeverSpace,
    lever: str,
    value: Scalar,
    fix: tuple[str, Scalar],
    problem: str,
    lessons: list[str],
    incumbent: Diagnosis | None = None,
) -> Change | None:
    """``lever=value`` needs ``fix`` first (expert parallel with the host-synced dispatcher needs CUDA graphs off):
    that prerequisite as a gated enabler, the change stacked on it and measured. A prerequisite that replaces the
    incumbent's pipeline schedule only while the incumbent's bubble is under BUBBLE_FRAC, without recompute
    (InterleavedZeroBubble with activation checkpointing: torchtitan#773, gate rule interleaved-zero-bubble-with-ac),
    and not away from DualPipeV under expert parallel (moe-pp-dualpipe-hides-all-to-all)."""
    current = catalog.effective(campaign.incumbent_levers)
    if fix[0] == SCHEDULE and (
        incumbent is None
        or incumbent.outcome != "ok"
        or "bubble" not in incumbent.breakdown
        or incumbent.breakdown["bubble"] >= BUBBLE_FRAC
        or current["activation_checkpoint"] != "none"
        or (current.get(SCHEDULE) == "DualPipeV" and int(current.get("parallelism.expert_parallel_degree") or 1) > 1)
    ):
        return None
    enabled = {**campaign.incumbent_levers, fix[0]: fix[1], lever: value}
    if already_stepped(campaign, enabled):
        return None  # the change it would enable was already measured (or refused)
    if layout_problem(space.recipe, enabled) is not None or layout_problem(
        space.recipe, {**campaign.incumbent_levers, fix[0]: fix[1]}
    ):
        return None
    pre = Change(
        lever=fix[0],
        before=current.get(fix[0]),
        after=fix[1],
        lessons=lessons,
        policy=POLICY,
        enabler=True,
        enables=[Setting(lever=lever, value=value)],
        why=f"enabler of {lever}={value}: its prerequisite ({problem.removeprefix('prerequisite missing: ')})",
    )
    return pre if validate_change(campaign, pre, space) is None else None


def microbatch_enabler(
    campaign: Campaign,
    space: LeverSpace,
    value: Scalar,
    illegal: str,
    why: str,
    lessons: list[str],
    probe: bool = False,
) -> Change | None:
    """The schedule ``value`` is refused only for too few microbatches per flush (DualPipeV): the local batch that
    gives them, as its gated enabler; with the local batch already the global batch's share, twice (then four
    times) the TP degree inside the node, then CP, as the enabler of that larger local batch, itself the enabler of
    the schedule -- a chain of two enablers with the schedule measured on them (the layout alone would price the old
    schedule). None where no such chain is legal or it was already stepped. ``probe``: the reason is a blind probe's."""
    lbs_name = "training.local_batch_size"
    if TOO_FEW_MICROBATCHES not in illegal or lbs_name not in space.values:
        return None
    inc = campaign.incumbent_levers
    cur = catalog.effective(inc)
    lbs = int(cur[lbs_name])
    reason = f"{cur.get(SCHEDULE)} -> {value} is refused for too few microbatches ({illegal}); {why}"
    for v in sorted(x for x in space.values[lbs_name] if isinstance(x, int) and x > lbs):
        target = {**inc, lbs_name: v}
        if (
            layout_problem(space.recipe, target) is None
            and layout_problem(space.recipe, {**target, SCHEDULE: value}) is None
        ):
            if already_stepped(campaign, {**target, SCHEDULE: value}):
                return None
            change = Change(
                lever=lbs_name,
                before=lbs,
                after=v,
                lessons=[*lessons, MICROBATCH_LESSON],
                policy=POLICY,
                enabler=True,
                enables=[Setting(lever=SCHEDULE, value=value)],
                probe=probe,
                why=f"enabler of {SCHEDULE}={value}: the local batch that gives it its microbatches; {reason}",
            )
            return change if validate_change(campaign, change, space) is None else None
    for lever, degree in fewer_dp_degrees(space, cur, (2, 4)):
        factor = degree // int(cur[lever])
        if factor * lbs not in space.values[lbs_name]:
            continue
        layout = {**inc, lever: degree, lbs_name: factor * lbs}
        if (
            layout_problem(space.recipe, {**inc, lever: degree})
            or layout_problem(space.recipe, layout)
            or layout_problem(space.recipe, {**layout, SCHEDULE: value})
        ):
            continue
        if already_stepped(campaign, {**layout, SCHEDULE: value}):
            return None
        change = Change(
            lever=lever,
            before=cur[lever],
            after=degree,
            lessons=[*lessons, MICROBATCH_LESSON],
            policy=POLICY,
            enabler=True,
            enables=[Setting(lever=lbs_name, value=factor * lbs), Setting(lever=SCHEDULE, value=value)],
            probe=probe,
            why=f"enabler of {lbs_name}={factor * lbs}, then {SCHEDULE}={value}: the local batch is "
            f"already the pinned global batch's share, so {factor} times the {lever.split('.')[-1].replace('_', ' ')} "
            f"divides the DP degree by {factor} and the local batch, and with it the microbatches per flush, can "
            f"grow {factor} times; {reason}",
        )
        if validate_change(campaign, change, space) is None:
            return change
    return None


def stepping_stone(
    campaign: Campaign, space: LeverSpace, last, lever: str, value: Scalar, illegal: str, lesson: str, why: str
) -> Change | None:
    """Stacked on ``last``: ``lever=value`` is refused because its schedule needs at least as many microbatches
    per flush as stages, and no local batch the pinned global batch allows at the old degree gives them
    (DualPipeV at PP 2 -> 4 with the local batch at its share: 4 microbatches for 8 stages, while 8 would not
    divide the global batch at PP 2). The schedule with the same stage placement that has no such bound
    (STEPPING_STONE) goes first, as its enabler (gated, not run); once the stages are kept, ``_restore_schedule``
    proposes the schedule back where it is legal again."""
    sched = str(catalog.effective(last.levers).get(SCHEDULE, ""))
    stone = STEPPING_STONE.get(sched)
    if stone is None or TOO_FEW_MICROBATCHES not in illegal or stone not in space.values.get(SCHEDULE, []):
        return None
    stepped = {**last.levers, SCHEDULE: stone}
    if (
        layout_problem(space.recipe, stepped) is not None
        or layout_problem(space.recipe, {**stepped, lever: value}) is not None
    ):
        return None
    if already_stepped(campaign, {**stepped, lever: value}):
        return None
    change = Change(
        lever=SCHEDULE,
        before=sched,
        after=stone,
        lessons=[lesson, STONE_LESSON],
        policy=POLICY,
        enabler=True,
        stacked_on=last.n,
        enables=[Setting(lever=lever, value=value)],
        why=f"enabler of {lever}={value}: {sched} would need more microbatches per flush than the pinned "
        f"global batch leaves ({illegal}); {stone} places the same stages without that bound, and "
        f"{sched} comes back once the local batch allows it; {why}",
    )
    return change if validate_change(campaign, change, space) is None else None


def smaller_batch_share(
    campaign: Campaign, space: LeverSpace, change: Change, target: dict[str, Scalar], records: RecordReader
) -> Change | None:
    """A held-back lesson's degree change that trades model-parallel ranks for data-parallel ones (halving TP or CP
    doubles the DP degree) and is predicted not to fit at the incumbent's local batch: at the pinned global batch
    each rank's share of it shrinks by the same factor, and the local batch shrunk with it keeps the accumulation
    split and, to first order, the per-rank activation memory (activations per layer ~ s·b·h/t, Korthikanti et al.
    2022, Table 2) while FSDP keeps the per-rank model state. That local batch as the change's enabler, when the
    memory screen predicts the pair fits; else None."""
    lbs_name = "training.local_batch_size"
    if change.enabler or change.stacked_on is not None or change.lever not in DEGREES or lbs_name not in space.values:
        return None
    cur = catalog.effective(campaign.incumbent_levers)
    old_mp, new_mp = model_parallel(cur), model_parallel({**cur, change.lever: change.after})
    lbs = int(cur[lbs_name])
    share = batch_share(lbs, old_mp, new_mp)
    if new_mp >= old_mp or not share:
        return None
    enabled = {**target, lbs_name: share}
    if (
        share not in space.values[lbs_name]
        or layout_problem(space.recipe, enabled) is not None
        or layout_problem(space.recipe, {**campaign.incumbent_levers, lbs_name: share}) is not None
        or already_stepped(campaign, enabled)
    ):
        return None
    enabler = Change(
        lever=lbs_name,
        before=lbs,
        after=share,
        lessons=[*change.lessons, SHARE_LESSON],
        policy=POLICY,
        enabler=True,
        enables=[Setting(lever=change.lever, value=change.after)],
        why=f"enabler of {change.lever}={change.after}: {change.lever} {change.before} -> "
        f"{change.after} multiplies the DP degree by {old_mp // new_mp}, so each rank's share of the pinned "
        f"global batch, and with it the activations it keeps, shrinks back by the same factor ({change.why})",
    )
    if validate_change(campaign, enabler, space) is not None:
        return None
    return if_predicted_to_fit(campaign, enabler, enabled, space, records)


def fill_first(campaign: Campaign, space: LeverSpace, change: Change) -> Change | None:
    """A change to more pipeline stages that would leave an analytic bubble ((p-1)/(v·m)) of BUBBLE_FRAC of the step or
    more becomes the gated enabler of the largest local batch the pinned global batch allows: run alone it would
    measure the bubble, not the layout. Applies to an out-of-memory retry too. None for fewer stages, a chain at
    MAX_CHAIN, no larger legal local batch, or a configuration already stepped (the change then runs alone)."""
    pp_name, lbs_name = "parallelism.pipeline_parallel_degree", "training.local_batch_size"
    if (
        change.enabler
        or change.lever != pp_name
        or not isinstance(change.after, int)
        or not isinstance(change.before, int)
        or change.after <= max(change.before, 1)
        or lbs_name not in space.values
    ):
        return None
    if change.stacked_on and len(chain_steps(campaign, change.stacked_on)) + 2 > MAX_CHAIN:
        return None
    levers = change_levers(campaign, change)
    eff = catalog.effective(levers)
    lbs = int(eff[lbs_name])
    m = max(lbs // max(int(eff["parallelism.pipeline_parallel_microbatch_size"]), 1), 1)
    frac = bubble_fraction(change.after, str(eff[SCHEDULE]), m)
    share = frac / (1.0 + frac)  # of the step: the bubble over busy time + bubble
    if share < BUBBLE_FRAC:
        return None
    legal = [
        v
        for v in space.values[lbs_name]
        if isinstance(v, int) and v > lbs and layout_problem(space.recipe, {**levers, lbs_name: v}) is None
    ]
    if not legal or already_stepped(campaign, {**levers, lbs_name: max(legal)}):
        return None
    enabler = change.model_copy(
        update={
            "enabler": True,
            "lessons": [*change.lessons, BUBBLE_LESSON],
            "enables": [Setting(lever=lbs_name, value=max(legal))],
            "why": f"enabler of {lbs_name}={max(legal)}: {change.why}; alone, {change.after} stages at {m} microbatches "
            f"per flush would idle about {share:.0%} of the step in the pipeline bubble ((p-1)/(v·m)), so the "
            "largest local batch the pinned global batch allows is stacked on it and measured with it",
        }
    )
    return enabler if validate_change(campaign, enabler, space) is None else None
