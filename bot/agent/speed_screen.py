"""Will this extrapolated move be slower? The analytic cost model answers before a run, as the memory screen does
for memory.

Two of the heuristic policy's moves carry no knowledge of their own about speed: an out-of-memory layout retried
with more recomputation or smaller microbatches (the catalog's "retry with recomputation" keeps a layout alive; it
does not say the layout, so rescued, is still faster), and a line search one notch further along a lever that paid
or was undecided. Each costs a run, and an early-stopped run still pays the start-up and the warm-up (on the
simulated 64 H100s of llama3.1-70b, 6 of a full run's 9 device-hours). The first-principles model of
:mod:`bot.agent.costmodel` (not the calibrated simulator) predicts these moves' losses well where it models the
levers they move: on that task, 5 seeds, full recompute on a TP 2 retry predicted -8.7 % (measured -4 .. -10 %),
selective recompute on a PP microbatch 2 retry -14.9 % (-20 %), local batch 4 -> 2 after a kept 8 -> 4 -22.2 %
(-24 %).

So such a move is screened out when the model predicts the layout it leads to slower than the incumbent by more
than ``MIN_SAVING`` -- the model's error on one layout (perfmodel.md §4.6), the margin by which the layout jump
trusts it the other way -- in tokens per second (the global batch is pinned in the shipped recipes, so this is the
step time's ratio; where it is not, a smaller DP degree trains fewer tokens a step). Only the model's *ratio*
between two layouts is used, as the memory screen uses its memory ratio: the constant factors (kernels, compile,
precision) cancel. The screened change is still proposed, with its prediction (``Change.predicted_slower``): the
campaign records a step that gained nothing and cost nothing, so a reviewer sees what was skipped and why, and the
policy's patience counts it like the run it stands in for.

Nothing is screened where the model cannot tell: a model or accelerator it does not know, a layout it cannot
evaluate, two layouts it puts at the same speed (levers it has no term for) -- or a CPU host. The model's
efficiencies are GPU figures (a GEMM at half the tensor-core peak, NCCL's bus bandwidth), and its 10 % error was
measured on the simulated GPU zoo; a CPU run's time is set by what it does not see (per-step tokens/s ranging 5x
inside one run on a shared box, cpu-torchtitan.md), so on the embedded CPU recipe every retry and notch still runs.
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
    return (f"predicted slower: the analytic cost model puts this layout at {there[1]:.2f} s a step against the "
            f"incumbent's {here[1]:.2f} s, {loss:.0%} fewer tokens/s -- more than its {MIN_SAVING:.0%} error on one layout")
