"""Will this extrapolated move be slower? The analytic cost model answers before a run, as the memory screen does.

An out-of-memory layout's retry (more recompute, smaller microbatches) and a line search's next notch are screened
out when :mod:`bot.agent.costmodel` (its ratio between two layouts, not the simulator) predicts the layout they lead
to slower than the incumbent by more than MIN_SAVING; the change is proposed with that prediction
(``Change.predicted_slower``) and not run. Nothing is screened where the model cannot tell (an unknown model or
accelerator, a tie) or on a CPU host. The measurements: docs/agent-evidence.md.
"""

from __future__ import annotations

import math

from bot.agent.cost_focus import predicted_step
from bot.agent.costmodel import global_batch
from bot.agent.layout_jump import MIN_SAVING
from bot.agent.policy import LeverSpace
from bot.core.records import Scalar
from bot.sim.hardware import get_hardware


def predicted_tps(space: LeverSpace, levers: dict[str, Scalar]) -> tuple[float, float] | None:
    """The analytic cost model's (sequences per second, step seconds) for the recipe run with ``levers``; None where
    it cannot tell."""
    step_s = predicted_step(space, levers)
    if not (step_s > 0 and math.isfinite(step_s)):
        return None
    return global_batch(space.recipe, levers) / step_s, step_s


def predicted_slower(space: LeverSpace, incumbent: dict[str, Scalar], levers: dict[str, Scalar]) -> str | None:
    """Why a run with ``levers`` would be slower than the incumbent by more than the model's error -- the two
    predictions and their ratio -- or None (it may pay, or the model cannot tell)."""
    try:
        if get_hardware(space.recipe.cluster.hardware).kind != "gpu":
            return None
    except KeyError:
        return None
    here, there = predicted_tps(space, incumbent), predicted_tps(space, levers)
    if here is None or there is None:
        return None
    loss = 1.0 - there[0] / here[0]
    if loss <= MIN_SAVING:
        return None
    return (
        f"predicted slower: the analytic cost model puts this layout at {there[1]:.2f} s a step against the "
        f"incumbent's {here[1]:.2f} s, {loss:.0%} fewer tokens/s -- more than its {MIN_SAVING:.0%} error on one layout"
    )
