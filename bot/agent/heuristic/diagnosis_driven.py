"""Diagnosis-driven moves: from the incumbent's own step-time breakdown, fill the pipeline or use fewer DP ranks."""

from __future__ import annotations

from bot.agent.cost_focus import (
    BUBBLE_LESSON,
    COMM_DP_LESSON,
    DP_BUBBLE_LESSON,
)
from bot.agent.heuristic.constants import BUBBLE_FRAC, COMM_FRAC, POLICY
from bot.agent.history import (
    already_stepped,
)
from bot.agent.layout_moves import (
    CP,
    TP,
    dp_spans_nodes,
    fewer_dp_degrees,
)
from bot.agent.policy import LeverSpace, validate_change
from bot.agent.space import layout_problem
from bot.core import levers as catalog
from bot.core.diagnosis import Diagnosis
from bot.core.records import MEASURED_OUTCOMES, Change, Setting
from bot.core.state import Campaign


def diagnosis_driven(campaign: Campaign, diagnosis: Diagnosis, space: LeverSpace) -> Change | None:
    """The incumbent's own breakdown: a large pipeline bubble with gradient accumulation -> fill the pipeline;
    with none left to fill, or exposed FSDP communication across nodes without PP -> fewer DP ranks."""
    if diagnosis.outcome != "ok" or not diagnosis.breakdown:
        return None
    eff = catalog.effective(campaign.incumbent_levers)
    lbs_name = "training.local_batch_size"
    legal = [
        v
        for v in space.values.get(lbs_name, [])
        if isinstance(v, int)
        and v > int(eff[lbs_name])
        and layout_problem(space.recipe, {**campaign.incumbent_levers, lbs_name: v}) is None
    ]
    pp = int(eff["parallelism.pipeline_parallel_degree"])
    comm = diagnosis.breakdown.get("exposed_comm", 0.0)
    if pp <= 1 and not legal and comm >= COMM_FRAC and dp_spans_nodes(space, eff):
        return fewer_dp_ranks(campaign, diagnosis, space, cost="comm")
    if pp <= 1 or diagnosis.breakdown.get("bubble", 0.0) < BUBBLE_FRAC:
        return None
    if not legal:
        return fewer_dp_ranks(campaign, diagnosis, space)
    change = Change(
        lever=lbs_name,
        before=eff[lbs_name],
        after=max(legal),
        lessons=[BUBBLE_LESSON],
        policy=POLICY,
        why=f"the incumbent spends {diagnosis.breakdown['bubble']:.0%} of its step in the pipeline bubble: the "
        "largest local batch the pinned global batch allows gives the most microbatches per flush and the fewest flushes",
    )
    return change if validate_change(campaign, change, space) is None else None


def fewer_dp_ranks(campaign: Campaign, diagnosis: Diagnosis, space: LeverSpace, cost: str = "bubble") -> Change | None:
    """Fewer DP ranks sharing the pinned global batch: twice the tensor (then context) parallel degree inside the
    node, as the gated enabler of twice the local batch, which is measured on it; one measured try per incumbent.
    ``cost="bubble"``: under PP with the local batch at its share, the bubble (p-1)/m halves (Narayanan et al. 2021
    §3.3). ``cost="comm"``: without PP, exposed communication of COMM_FRAC or more with the FSDP group spread over
    nodes: half the FSDP ranks each all-gather a TP-sharded half of the weights (lesson fsdp-comm-fewer-dp-ranks)."""
    eff = catalog.effective(campaign.incumbent_levers)
    lbs_name = "training.local_batch_size"
    lbs = int(eff[lbs_name])
    if lbs_name not in space.values or 2 * lbs not in space.values[lbs_name]:
        return None
    lesson = COMM_DP_LESSON if cost == "comm" else DP_BUBBLE_LESSON
    if any(
        s.n > campaign.incumbent_step
        and lesson in s.change.lessons
        and not s.kept
        and any(r.kind == "trial" and r.outcome in MEASURED_OUTCOMES for r in s.runs)
        for s in campaign.steps
    ):
        return None  # one degree's try measured what halving the DP ranks buys this incumbent; the other buys the same
    for lever, value in fewer_dp_degrees(space, eff, (2,)):
        if cost == "comm" and lever == CP:
            continue
        name = "tensor parallel" if lever == TP else "context parallel"
        enabled = {**campaign.incumbent_levers, lever: value, lbs_name: 2 * lbs}
        if layout_problem(space.recipe, {**campaign.incumbent_levers, lever: value}) or layout_problem(
            space.recipe, enabled
        ):
            continue
        if already_stepped(campaign, enabled):
            continue
        if cost == "comm":
            why = (
                f"enabler of {lbs_name}={2 * lbs}: the incumbent spends {diagnosis.breakdown['exposed_comm']:.0%} of its step in "
                "exposed communication with its FSDP group spread over nodes, and its local batch is already the global batch's "
                f"share; twice the {name} degree (inside the node) halves the FSDP group and the weight shard each all-gather "
                "moves, and each rank's local batch can double"
            )
        else:
            why = (
                f"enabler of {lbs_name}={2 * lbs}: the incumbent spends {diagnosis.breakdown['bubble']:.0%} of its step "
                f"in the pipeline bubble and its local batch is already the global batch's share; twice the {name} "
                "degree halves the DP degree, so the local batch and the microbatches per flush can double ((p-1)/m halves)"
            )
        change = Change(
            lever=lever,
            before=eff[lever],
            after=value,
            lessons=[lesson],
            policy=POLICY,
            enabler=True,
            enables=[Setting(lever=lbs_name, value=2 * lbs)],
            why=why,
        )
        if validate_change(campaign, change, space) is None:
            return change
    return None
