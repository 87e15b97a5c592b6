"""The ``costmodel`` baseline: an OptiCo / NeMo AutoConfigurator-style tuner.

It ranks every legal layout of the shared search space (the product of the levers :mod:`bot.agent.costmodel` has
terms for, each through the shared legality pre-check with its prerequisites set) with that analytic model (not the
simulator), drops those predicted to run out of memory, and measures the rest best-first until the budget ends. The
ranking is cached per recipe; the policy is stateless (a resumed campaign proposes the best untried layout).
Details: docs/agent-evidence.md.
"""

from __future__ import annotations

import functools
import itertools
import math

from bot.agent.costmodel import AC, CP, EP, LBS, MB, PP, SCHED, TP, Estimate, estimate, shape_of
from bot.agent.lessons import Lesson
from bot.agent.policy import LeverSpace, validate_change
from bot.agent.samplers import _as_change
from bot.agent.space import layout_problem
from bot.core import levers as catalog
from bot.core.diagnosis import Diagnosis
from bot.core.recipe import Recipe
from bot.core.records import Change, RecordReader, Scalar, Stop
from bot.core.state import Campaign
from bot.sim.hardware import get_hardware
from bot.sim.models import model_for

MODELLED = (TP, PP, CP, EP, LBS, MB, SCHED, AC)


def _values(space: dict[str, list[Scalar]], eff: dict[str, Scalar], name: str) -> list[Scalar]:
    return list(space.get(name) or [eff[name]])


def _quick_legal(
    recipe: Recipe, tp: int, pp: int, cp: int, ep: int, lbs: int, n_heads: int, n_kv: int, layers: int, experts: int
) -> bool:
    """The cheap arithmetic part of legality (degrees divide the world and the heads, the pinned global batch
    splits), to prune before the full pre-check."""
    world = recipe.devices
    if world % (tp * pp * cp) or n_heads % tp or n_kv % tp or pp > layers:
        return False
    dp = world // (tp * pp * cp)
    if ep > 1 and (not experts or experts % ep or (dp * cp * tp) % ep):
        return False
    gbs = int(recipe.pinned.get("training.global_batch_size", 0) or 0)
    return not gbs or gbs % (lbs * dp) == 0


Ranked = tuple[float, tuple[tuple[str, Scalar], ...], str]  # (estimated step s, levers, summary)
# how far over the device the formula may put a layout that still fits: it counts a dense layer's activations about
# 1.7x the bytes Megatron's 18 + 4F/h formula gives (docs/reference/performance-model.md#42-memory-per-gpu), so a layout it puts at up to twice
# the device's memory can still fit by a measured peak times its ratio (:mod:`bot.agent.layout_jump`)
MEMORY_SLACK = 2.0


def ranking(recipe_json: str, fitting_only: bool = True) -> tuple[Ranked, ...]:
    """Every legal layout the model predicts to fit, fastest first: (estimated step s, levers, summary).
    ``fitting_only=False``: also those its memory formula puts over the device by up to MEMORY_SLACK (for a caller
    that judges fit on a measured peak, :mod:`bot.agent.layout_jump`)."""
    return _fitting(recipe_json) if fitting_only else tuple(r for r, _fits in _layouts(recipe_json))


@functools.lru_cache(maxsize=16)
def _fitting(recipe_json: str) -> tuple[Ranked, ...]:
    return tuple(r for r, fits in _layouts(recipe_json) if fits)


@functools.lru_cache(maxsize=4)
def _layouts(recipe_json: str) -> tuple[tuple[Ranked, bool], ...]:
    """Every legal layout the formula puts within MEMORY_SLACK of the device, fastest first, and whether it fits."""
    recipe = Recipe.model_validate_json(recipe_json)
    from bot.agent.space import search_space

    space = search_space(recipe)
    base = dict(recipe.levers)
    eff = catalog.effective(base)
    m = model_for(recipe.workload)
    hw = get_hardware(recipe.cluster.hardware)
    gbs = int(recipe.pinned.get("training.global_batch_size", 0) or 0)
    seq = int(recipe.pinned.get("training.seq_len", 2048))
    out: list[tuple[Ranked, bool]] = []
    for tp, pp, cp, ep in itertools.product(*(_values(space, eff, k) for k in (TP, PP, CP, EP))):
        tp, pp, cp, ep = int(tp), int(pp), int(cp), int(ep)
        for lbs in _values(space, eff, LBS):
            if not _quick_legal(recipe, tp, pp, cp, ep, int(lbs), m.n_heads, m.n_kv_heads, m.n_layers, m.n_experts):
                continue
            mbs = _values(space, eff, MB) if pp > 1 else [eff[MB]]
            scheds = _values(space, eff, SCHED) if pp > 1 else [eff[SCHED]]
            for mb, sched, ac in itertools.product(mbs, scheds, _values(space, eff, AC)):
                if pp > 1 and int(lbs) % int(mb):
                    continue
                shape = shape_of({**eff, TP: tp, PP: pp, CP: cp, EP: ep, LBS: lbs, MB: mb, SCHED: sched, AC: ac})
                est: Estimate = estimate(
                    m, hw, recipe.devices, gbs or int(lbs) * recipe.devices // (tp * pp * cp), seq, shape
                )
                if not (math.isfinite(est.step_s) and est.memory_gib <= MEMORY_SLACK * hw.hbm_gib):
                    continue
                levers = {**base, TP: tp, PP: pp, CP: cp, LBS: lbs, AC: ac}
                if EP in space or ep != 1:
                    levers[EP] = ep
                if pp > 1 or MB in base:
                    levers[MB] = mb
                if pp > 1 or SCHED in base:
                    levers[SCHED] = sched
                levers = {k: v for k, v in levers.items() if k in base or v != catalog.DEFAULTS.get(k)}
                out.append(((est.step_s, tuple(sorted(levers.items())), est.summary), est.fits))
    out.sort(key=lambda x: x[0][0])
    return tuple(out)


class CostModelPolicy:
    name = "costmodel"

    def propose(
        self, campaign: Campaign, diagnosis: Diagnosis, lessons: list[Lesson], levers: LeverSpace, records: RecordReader
    ) -> Change | Stop:
        recipe = levers.recipe
        try:
            ranked = ranking(recipe.model_copy(update={"levers": dict(campaign.baseline_levers)}).model_dump_json())
        except (KeyError, ValueError) as exc:
            return Stop(why=f"the cost model does not know this workload ({exc})", policy=self.name)
        tried = [catalog.effective(c) for c in [campaign.baseline_levers, *(s.levers for s in campaign.steps)]]
        for rank, (_t, items, summary) in enumerate(ranked, start=1):
            # with the prerequisites a layout needs (CUDA graphs off under PP or EP), as the other baselines' repair sets them
            config = catalog.with_prerequisites(dict(items), levers.model, set(levers.values))
            if catalog.effective(config) in tried or layout_problem(recipe, config) is not None:
                continue
            change = _as_change(campaign, config, self.name, f"cost model rank {rank} of {len(ranked)}: {summary}")
            if (
                change
                and validate_change(campaign, change, levers, allow_multi=True, check_prerequisites=False) is None
            ):
                return change
        return Stop(why="every layout the cost model ranks was measured", policy=self.name)
