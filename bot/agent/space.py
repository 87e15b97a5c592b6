"""The search space every policy shares: the recipe's levers and their legal values.

Tier-X levers and precision changes are never in it (the gate would reject them; a precision
change is a policy decision, not a throughput lever). The same space feeds the heuristic's
generic exploration, random search, optuna (TPE/GP) and the oracle, so the comparison is fair.
"""

from __future__ import annotations

from bot.agent.policy import LeverSpace
from bot.core import levers as catalog
from bot.core.recipe import Recipe
from bot.core.records import Scalar
from bot.sim.models import model_for


def _powers(lo: int, hi: int) -> list[int]:
    out, v = [], 1
    while v <= hi:
        if v >= lo:
            out.append(v)
        v *= 2
    return out


def lever_values(recipe: Recipe, name: str) -> list[Scalar]:
    lever = catalog.get(name)
    devices = recipe.devices
    if lever.precision or lever.tier == "X":
        return []
    if name == "training.disable_cuda_graphs" and recipe.cluster.hardware == "cpu":
        return [True]  # CUDA graphs need CUDA: never propose turning them on on a CPU host
    if lever.kind == "bool":
        return [False, True]
    if lever.kind == "choice":
        return [c for c in lever.choices if lever.tier_of(c) not in ("X", "N")]
    if lever.kind == "float":
        return [0.25, 0.5, 0.75] if name == "activation_checkpoint.memory_budget" else []
    if name == "training.local_batch_size":
        gbs = int(recipe.pinned.get("training.global_batch_size", 64))
        return [v for v in _powers(1, max(gbs, 1)) if v <= gbs]
    if name == "parallelism.data_parallel_shard_degree":
        return [-1, *_powers(1, devices)]
    if name.endswith("_degree"):
        return [*_powers(1, min(devices, 64))]
    if name == "parallelism.pipeline_parallel_microbatch_size":
        return [*_powers(1, 16)]
    if name == "loss.num_chunks":
        return [1, 2, 4, 8, 16]
    if name in ("training.gc_freq", "metrics.log_freq"):
        return [1, 10, 50, 100]
    return []


def search_space(recipe: Recipe) -> dict[str, list[Scalar]]:
    space = {name: lever_values(recipe, name) for name in recipe.levers}
    return {k: v for k, v in space.items() if len(v) > 1}


def layout_problem(recipe: Recipe, levers: dict[str, Scalar]) -> str | None:
    """Why torchtitan would refuse ``levers`` at parse/build time (degree divisibility, batch arithmetic, stage
    split, lever prerequisites), or None when it would start. Legality only, computed in code for free -- no
    speed or memory estimate (those are what a trial measures). None also when the model is not one the
    layout checker knows (the trial then finds out)."""
    from bot.facts.legality import LayoutError, resolve_layout
    from bot.sim.hardware import get_hardware

    c = recipe.cluster
    try:
        model, hw = model_for(recipe.workload), get_hardware(c.hardware)
    except (KeyError, ValueError):
        return None
    try:
        resolve_layout(model, hw, c.nodes, c.devices_per_node, dict(levers), dict(recipe.pinned))
    except LayoutError as exc:
        return str(exc)
    except (KeyError, ValueError, TypeError):
        return None
    return None


def make_space(recipe: Recipe) -> LeverSpace:
    """The lever space a policy is handed for ``recipe``: its legal values, and the model's shape where the
    simulator's zoo knows the model (head and layer counts bound TP and PP)."""
    facts = None
    where = {"devices": recipe.devices}
    try:
        m = model_for(recipe.workload)
        facts = catalog.ModelFacts(
            n_heads=m.n_heads, n_kv_heads=m.n_kv_heads, n_layers=m.n_layers, num_experts=m.n_experts or None, **where
        )
    except (KeyError, ValueError):
        facts = None
    return LeverSpace(recipe=recipe, values=search_space(recipe), model=facts)
