"""The policy interface and the checks every proposal passes (the registry is the package face, :mod:`bot.agent`).

``propose(campaign, diagnosis, lessons, levers, records) -> Change | Stop``. A policy never runs
anything. Whatever a policy proposes (the heuristic, Claude, a sampler) goes through
:func:`validate_change` before it becomes a step: a known lever, a legal value, not already
tried, not objective-changing, prerequisites met.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from bot.agent.lessons import Lesson
from bot.core import levers as catalog
from bot.core.diagnosis import Diagnosis
from bot.core.recipe import Recipe
from bot.core.records import Change, RecordReader, Scalar, Stop
from bot.core.state import Campaign


@dataclass
class LeverSpace:
    """The recipe being tuned and the legal values of each lever the tuner may change."""

    recipe: Recipe
    values: dict[str, list[Scalar]]
    model: catalog.ModelFacts | None = None
    stack: dict[str, str] = field(default_factory=dict)


class Policy(Protocol):
    name: str

    def propose(
        self, campaign: Campaign, diagnosis: Diagnosis, lessons: list[Lesson], levers: LeverSpace, records: RecordReader
    ) -> Change | Stop: ...


def base_levers(campaign: Campaign, change: Change) -> dict[str, Scalar]:
    return campaign.step(change.stacked_on).levers if change.stacked_on else campaign.incumbent_levers


def validate_change(
    campaign: Campaign,
    change: Change,
    space: LeverSpace,
    *,
    allow_multi: bool = False,
    check_prerequisites: bool = True,
    reopen_screened: bool = False,
) -> str | None:
    """Why ``change`` may not become a step, or None when it may; ``reopen_screened``: a configuration the memory
    screen ruled out (predicted, not run) counts as untried."""
    try:
        lever = catalog.get(change.lever)
        value = lever.parse(change.after)
    except catalog.LeverError as exc:
        return str(exc)
    if change.extra and not allow_multi:
        return "a step changes exactly one lever"
    if lever.tier_of(value) == "X":
        return f"{change.lever} is objective-changing (tier X)"
    if lever.precision or lever.tier_of(value) == "N":
        return f"{change.lever}={value} changes numeric precision; only a person may opt in"
    if change.lever in space.recipe.pinned:
        return f"{change.lever} is pinned"
    for name, raw in ((change.lever, value), *change.extra.items()):
        legal = space.values.get(name)
        try:
            parsed = catalog.parse_value(name, raw)
        except catalog.LeverError as exc:
            return str(exc)
        if legal and parsed not in legal:
            return (
                f"{name}={parsed!r} is not a legal value for this recipe (expected one of {', '.join(map(str, legal))})"
            )
    base = effective = base_levers(campaign, change)
    effective = {**base, **change.extra, change.lever: value}
    if catalog.effective(base).get(change.lever) == value and not change.extra:
        return f"{change.lever} is already {value!r}"
    # "already tried" means this exact configuration was measured (or refused) in this campaign: the same
    # lever value on top of another incumbent is a new configuration (AC off may lose at microbatch 1 and win at 8)
    target = catalog.effective(effective)
    # an enabler that was gated but never run measured nothing: its configuration stays open
    same = [
        s
        for s in campaign.steps
        if catalog.effective(s.levers) == target
        and (s.runs or not s.change.enabler)
        and not (reopen_screened and s.change.predicted_oom)
    ]
    undecided = all(s.measurement is not None and s.measurement.decision == "undecided" for s in same)
    if same and not (undecided and change.retry_reason):
        if undecided:
            return f"{change.lever}={value!r} was measured undecided; propose it again only with a retry_reason"
        return (
            f"{change.lever}={value!r} was already tried"
            if not change.extra
            else "this configuration was already tried"
        )
    if target == catalog.effective(campaign.baseline_levers):
        return "this configuration is the baseline's"
    if not check_prerequisites:
        return None
    hw = space.recipe.cluster.hardware
    new_problems = set(catalog.prerequisite_problems(effective, space.model, hw)) - set(
        catalog.prerequisite_problems(base, space.model, hw)
    )
    if new_problems:
        return "prerequisite missing: " + "; ".join(sorted(new_problems))
    return None


def lesson_context(
    campaign: Campaign, diagnosis: Diagnosis, space: LeverSpace, levers: dict[str, Scalar] | None = None
) -> dict[str, Any]:
    """What the lessons' conditions read: ``diagnosis``, the recipe and stack, and the levers of the incumbent (or of
    ``levers``: a rejected layout the diagnosis is of)."""
    recipe = space.recipe
    ctx: dict[str, Any] = {
        **diagnosis.context(),
        "recipe.hardware": recipe.cluster.hardware,
        "recipe.devices": recipe.devices,
        "recipe.nodes": recipe.cluster.nodes,
        "recipe.model": recipe.workload.model,
        "recipe.moe": bool(space.model and space.model.num_experts),
        **{f"stack.{k}": v for k, v in space.stack.items()},
        **{f"recipe.env.{k}": v for k, v in recipe.env.items()},
    }
    eff = catalog.effective(campaign.incumbent_levers if levers is None else levers)
    for name, value in eff.items():
        ctx[f"levers.{name}"] = value
    gbs = recipe.pinned.get("training.global_batch_size")
    seq = recipe.pinned.get("training.seq_len")
    lbs = int(eff["training.local_batch_size"])
    ctx["recipe.global_batch_pinned"] = isinstance(gbs, int) and gbs > 0
    ep = max(int(eff.get("parallelism.expert_parallel_degree", 1) or 1), 1)
    ctx["recipe.devices_per_node"] = recipe.cluster.devices_per_node
    ctx["recipe.expert_parallel_groups_per_node"] = recipe.cluster.devices_per_node / ep
    if isinstance(seq, int):
        ctx.setdefault("recipe.seq_len", seq)
        ctx["recipe.tokens_per_microbatch"] = lbs * seq
    if isinstance(gbs, int) and gbs > 0:
        tp, pp, cp = (int(eff[f"parallelism.{k}_parallel_degree"]) for k in ("tensor", "pipeline", "context"))
        dp = max(recipe.devices // (tp * pp * cp), 1)
        ctx["recipe.grad_accum_steps"] = max(gbs // (lbs * dp), 1)
    return ctx
