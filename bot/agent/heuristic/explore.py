"""Generic exploration once nothing else proposes (blind probes, one lever at a time), and the patience stop."""

from __future__ import annotations

from bot.agent.heuristic.checked import checked
from bot.agent.heuristic.constants import EXPLORE_ORDER, POLICY
from bot.agent.heuristic.move import Context, Proposal
from bot.agent.history import (
    AC_RANK,
    BATCH_LEVERS,
    EXPLORING,
    oom_dominated,
    oom_values,
    undoes_a_kept_step,
)
from bot.agent.policy import LeverSpace
from bot.agent.stopping import patience_stop
from bot.core import levers as catalog
from bot.core.records import Scalar, Stop
from bot.core.state import Campaign


def neighbours(campaign: Campaign, space: LeverSpace, lever: str, current: Scalar | None) -> list[Scalar]:
    """Generic exploration moves for one lever: adjacent values of an ordered domain (batch sizes and degrees
    one doubling/halving away, larger first), every value of a categorical one, recompute only downwards; never a
    value that a step from this incumbent already showed runs out of memory (less recompute than a mode that
    did not fit, a larger batch than one that did not)."""
    values = list(space.values.get(lever, []))
    oom = oom_values(campaign, lever)
    if lever == "activation_checkpoint":
        worst = min((AC_RANK.get(str(v), 2) for v in oom), default=None)
        # only towards less recomputation (more never speeds a step up), least aggressive first
        cur = AC_RANK.get(str(current), 2)
        return sorted(
            (v for v in values if AC_RANK.get(str(v), 2) < cur and (worst is None or AC_RANK.get(str(v), 2) > worst)),
            key=lambda v: -AC_RANK.get(str(v), 2),
        )
    numeric = all(isinstance(v, int) and not isinstance(v, bool) for v in values) and isinstance(current, int)
    if not numeric or current not in values:
        return values
    ints = [int(v) for v in values]  # numeric: every value is an int
    i = values.index(current)
    out: list[Scalar] = [ints[j] for j in (i + 1, i - 1) if 0 <= j < len(ints) and ints[j] > 0]
    if lever in BATCH_LEVERS:
        limit = min((int(v) for v in oom), default=None)
        out = [v for v in out if limit is None or int(v) < limit]
    if (
        lever == "training.local_batch_size"
        and int(catalog.effective(campaign.incumbent_levers)["parallelism.pipeline_parallel_degree"]) > 1
    ):
        # under PP the activations follow the PP microbatch, not the local batch: a smaller one only means fewer
        # microbatches per flush (a larger bubble), never a memory or speed win
        out = [v for v in out if int(v) > int(current)]
    return out


class PatienceStop:
    """Nothing but blind probes is left and patience has run out since the last kept step: stop."""

    id = "patience-stop"
    lessons: tuple[str, ...] = ()
    obligation = False

    def propose(self, ctx: Context) -> Stop | None:
        stop = patience_stop(ctx.campaign)
        return Stop(why=stop, policy=POLICY) if stop is not None else None


class Explore:
    """Generic exploration, one lever at a time (a blind probe): first each lever's nearest values, most impactful
    levers first, then every other legal value; never a moot or inert lever, nor back across a kept step."""

    id = "explore"
    lessons: tuple[str, ...] = ()
    obligation = False

    def propose(self, ctx: Context) -> Proposal:
        campaign, levers, current = ctx.campaign, ctx.space, ctx.current
        order = sorted(
            levers.values, key=lambda k: EXPLORE_ORDER.index(k) if k in EXPLORE_ORDER else len(EXPLORE_ORDER)
        )
        # blind probes skip, besides the moot levers, those that do nothing in the incumbent's layout
        moot = ctx.moot | {k for k in levers.values if catalog.inert(campaign.incumbent_levers, k)}
        order = [k for k in order if k not in moot]
        for lever in order:  # first the nearest moves of each lever, most impactful levers first
            for value in neighbours(campaign, levers, lever, current.get(lever)):
                if undoes_a_kept_step(campaign, lever, value):
                    continue
                change = checked(campaign, levers, lever, value, EXPLORING, [], ctx.incumbent, probe=True)
                if change is not None:
                    return change
        for lever, values in levers.values.items():  # then every other legal value, in the space's order
            if lever in moot:
                continue
            for value in values:
                if oom_dominated(campaign, lever, value) or undoes_a_kept_step(campaign, lever, value):
                    continue
                change = checked(campaign, levers, lever, value, EXPLORING, [], ctx.incumbent, probe=True)
                if change is not None:
                    return change
        return Stop(why="no untried legal change is left in the search space", policy=POLICY)
