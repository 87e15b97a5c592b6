"""The layout jump: once the diagnosis- and lesson-driven moves are spent, the analytic cost model's best layout.

A rule-guided search changes one lever at a time from where it stands, so it settles in the basin of the layout it
started from: llama3.1-70b from torchtitan's TP 8 / full-recompute config ends at TP 4, CP 2, selective recompute,
while its optimum is four pipeline stages that free the memory for no recompute at all -- a point no single lever
reaches uphill (every one-lever move from the first is slower). A cost-model tuner (OptiCo, NeMo AutoConfigurator:
perfmodel.md section 1.1) ranks every legal layout analytically instead, but measures its picks with the recipe's
other levers untuned. This module joins the two: from the incumbent (its compile, async TP, resharding kept), the
first-principles model of :mod:`bot.agent.costmodel` -- not the calibrated simulator -- ranks the layouts, and the
best one (of those within ``TIE`` of the best, the one that changes the fewest levers: :func:`tie_broken`)
predicted at least ``MIN_SAVING`` faster than the incumbent's own estimate, legal, predicted to fit and not
yet stepped, and reachable one lever at a time through legal layouts, is the jump. The policy proposes it as a chain of one-lever enablers (gated, not run) with its last
lever measured on them, so every step still changes one recipe line.

Whether a layout fits is judged the way the memory screen judges it (:mod:`bot.agent.memory_screen`): a formula's
absolute figure is off by what it does not see (allocator, workspaces, fragmentation -- and llama3.1-70b's
TP 4 / CP 2 / selective incumbent, measured at 144 GiB on 180 GiB devices, is estimated at 258 GiB), so where the
campaign has measured a peak the prediction is that peak times the model's ratio between the candidate and the
measured layout, and the candidate must fit the device's memory with it (no margin: the jump's run is a gamble
already). Without a measured peak (a CPU run reports none) the model's own figure decides. The layouts both figures
say fit are ranked first; only where none of them is a jump are those the formula alone rejects (up to
``MEMORY_SLACK`` over the device, :mod:`bot.agent.costmodel_tuner`) ranked too -- llama3.1-70b on 64 H100s, whose
formula puts every layout without recompute over 80 GiB while its measured TP 4 / CP 2 / selective peak of 75 GiB
anchors four pipeline stages without recompute at 64 GiB (measured 79 GiB, 6 % faster than that incumbent). Ranked
among all of them at once, the model's picks measured slower: the more candidates, the more the best-ranked one is
the one the model overrates most (llama3.1-70b on 32 B200s, 5 seeds: 93.6 -> 87.8 % of the oracle).

The model must also have reproduced what the campaign measured before its ranking is trusted: the speed-up it
predicts from the baseline to the incumbent must match the measured one within its error on one layout
(``MIN_SAVING``: a ratio of the two within [0.9, 1/0.9]). Where it does not, it is wrong about the very terms that
changed (qwen3-235b-a22b on 32 B200s: an incumbent with EP 8 x TP 4 estimated at 21 s a step, measured at 4.8 s,
against a baseline estimated within 1 % -- the model then put an EP group with TP on the NIC and sent every token
TP times; it now places EP on consecutive ranks, as torchtitan does, and estimates that incumbent at 6.0 s). Over
the 47 simulated tasks (3 seeds; the check measured before it was added), the jumps proposed outside the window
were faster than their incumbent in 11 of 66 cases, those inside it in 16 of 29. The model may instead reproduce the latest kept step that changed a lever it models (from the
layout before it to the incumbent): a term it misjudged on the way -- the baseline's pipeline bubble, whose schedule
a first step replaced (deepseek-v3 on 512 H100s: Interleaved1F1B -> ZBVZeroBubble measured x3.03, predicted x1.73)
-- says little about the incumbent's neighbourhood, while a recent step it did reproduce says it models that
neighbourhood. A kept step on a lever it has no term for (compile) is no such evidence: predicted x1.0, it would
"match" any small measured gain (checked that way, the jump went ahead on two probe tasks on that ground alone).
Of the 26 simulated tasks (the 14 shipped, 5 seeds, and 12 scratch probes, 3 seeds) this second check changed one:
glm-4.5 on 128 H100s jumps earlier, 98.4 -> 97.3 % of the oracle at 57 -> 45 % of the budget.

``layout_jump`` is a pure function of the recipe, the incumbent, the steps so far and the measured figures; the ranking
of the baseline's layouts is cached per recipe (:func:`bot.agent.costmodel_tuner.ranking`), and only its head is
re-estimated with the incumbent's levers.
"""

from __future__ import annotations

import math

from pydantic import BaseModel

from bot.agent.costmodel import Estimate, estimate_of
from bot.agent.costmodel_tuner import MODELLED, Ranked, ranking
from bot.agent.memory_screen import MeasuredPeak
from bot.agent.space import layout_problem
from bot.core import levers as catalog
from bot.core.levers import ModelFacts
from bot.core.recipe import Recipe
from bot.core.records import Scalar

DEGREES = catalog.PARALLEL_DEGREES
MIN_SAVING = 0.10  # of the incumbent's estimated step: the model's error on one layout is of this order (perfmodel.md §4.6)
TIE = 0.01  # of the fastest estimate: layouts within it are a tie the model cannot break (it errs by MIN_SAVING)
# torch.compile's cited speed-up (torchtitan benchmarks/llama3_h100_202412: Llama 3.1 8B FSDP on 8 H100, 5,762 -> 6,667
# tokens/s/GPU; lesson compile-on-gpu): what a layout that rules compile out forgoes while the campaign has yet to try it
COMPILE_SPEEDUP = 6667 / 5762
COMPILE = "compile.enable"
HEAD = 64  # ranked layouts re-estimated with the incumbent's levers: the ranking's order moves little with them
# the order of a jump's links: prerequisites, then the parallel degrees, the batch split, the schedule, recompute last
# (a zero-bubble schedule is refused with recompute on, torchtitan#773, so recompute comes off before it)
LINK_ORDER = ("training.disable_cuda_graphs", "parallelism.pipeline_parallel_degree", "parallelism.tensor_parallel_degree",
              "parallelism.context_parallel_degree", "parallelism.expert_parallel_degree", "training.local_batch_size",
              "parallelism.pipeline_parallel_microbatch_size", "activation_checkpoint", "parallelism.pipeline_parallel_schedule")


class Jump(BaseModel):
    """A layout the cost model predicts faster than the incumbent's, as the ordered one-lever links that reach it."""

    links: list[tuple[str, Scalar]]
    levers: dict[str, Scalar]
    step_s: float
    incumbent_step_s: float
    summary: str

    @property
    def saving(self) -> float:
        return 1.0 - self.step_s / self.incumbent_step_s


def layout_jump(recipe: Recipe, baseline: dict[str, Scalar], incumbent: dict[str, Scalar], space: dict[str, list[Scalar]],
                stepped: list[dict[str, Scalar]], model: ModelFacts | None = None, moot: frozenset[str] = frozenset(),
                measured: MeasuredPeak | None = None, speedup: float | None = None,
                last: tuple[dict[str, Scalar], float] | None = None, compile_untried: bool = False) -> Jump | None:
    """The best layout (by the cost model) reached from ``incumbent`` by changing only modelled levers (and their
    prerequisites), predicted to fit and to save MIN_SAVING of the incumbent's estimated step, legal, every lever
    within ``space``, and not among the ``stepped`` configurations (effective values); None without one, or where
    the cost model does not know the model or hardware. ``model``: the facts the prerequisites read (MoE or not).
    ``moot``: levers whose whole addressable cost is inside the noise band (the schedule with no bubble to speak of,
    recompute with next to none): a jump that keeps the parallel degrees leaves them as they are -- it could not
    measure them -- while one that moves a degree may change them with it (the memory and bubble they trade change).
    ``measured``: a peak the campaign measured, which the memory predictions are anchored on; ``speedup``: the
    incumbent's measured throughput over the baseline's, which the model must reproduce (module docstring), or else
    ``last``: the levers before the latest kept step that changed a modelled lever, and that step's measured
    speed-up (the incumbent's neighbourhood, where the jump starts). ``compile_untried``: torch.compile is off and
    the campaign has yet to measure it (the lessons will): where the incumbent could be compiled, it and every
    candidate are compared as they would run once compiled -- COMPILE_SPEEDUP faster where the layout allows
    compile, as estimated where it does not (the V-shaped schedules, pytorch#161904) -- so a jump to DualPipeV is
    not taken for its all-to-all overlap alone when it gives up more than that (qwen3-30b-a3b on 16 B200s, 5 seeds:
    DualPipeV kept, then compile ruled out, 92.5 % of the oracle; compared as compiled, the compiled
    InterleavedZeroBubble optimum: 100 %). From an incumbent that cannot be compiled (a V-shaped schedule the
    campaign measured and kept) nothing is adjusted: compile's gain, measured on no layout of this campaign, does not
    pull the jump away from what was measured (with it, qwen3-235b-a22b on 256 H100s, an unseen probe, left its
    kept DualPipeV: 95.6 -> 89.5 % of the oracle, 3 seeds)."""
    try:
        ranked_json = recipe.model_copy(update={"levers": dict(baseline)}).model_dump_json()
        both_fit = ranking(ranked_json)
        here = estimate_of(recipe, incumbent)
        start = estimate_of(recipe, baseline)
        before_last = estimate_of(recipe, last[0]) if last is not None else None
        anchor = estimate_of(recipe, measured.levers).memory_gib if measured is not None else None
    except (KeyError, ValueError):
        return None
    if here.step_s <= 0 or anchor is not None and not anchor > 0:
        return None

    compiles_here = compile_untried and layout_problem(recipe, {**incumbent, COMPILE: True}) is None

    def attainable(levers: dict[str, Scalar], est: Estimate) -> tuple[float, str]:
        """``est``'s step as the layout would run once compiled, where compile is yet to be tried and the incumbent
        could have it, and what was done."""
        if not compiles_here:
            return est.step_s, ""
        if layout_problem(recipe, {**levers, COMPILE: True}) is None:
            return est.step_s / COMPILE_SPEEDUP, f"; {est.step_s / COMPILE_SPEEDUP:.2f} s once compiled"
        return est.step_s, "; not compiled: the schedule rules compile out (pytorch#161904)"

    reproduced = (speedup is not None and consistent(start.step_s / here.step_s, speedup)
                  or last is not None and before_last is not None and consistent(before_last.step_s / here.step_s, last[1]))
    if speedup is not None and speedup > 0 and not reproduced:
        return None

    def fits(est: Estimate) -> bool:
        if measured is None or anchor is None:  # no measured peak: the formula's own figure
            return est.fits
        return math.isfinite(est.step_s) and measured.peak_gib * est.memory_gib / anchor <= measured.capacity_gib

    def anchored(est: Estimate) -> str:
        """The memory the fit was judged on, where it is a measured peak's (the formula's own figure is in the summary)."""
        if measured is None or anchor is None:
            return ""
        return (f"; predicted peak {measured.peak_gib * est.memory_gib / anchor:.0f} GiB of {measured.capacity_gib:.0f} "
                f"(the measured {measured.peak_gib:.0f} GiB x the memory model's {est.memory_gib / anchor:.2f})")

    if anchor is None and not here.fits:
        return None  # the model predicts the incumbent does not fit, and no measured peak corrects it
    current = catalog.effective(incumbent)
    seen = [catalog.effective(s) for s in stepped]
    here_s = attainable(incumbent, here)[0]

    def best(ranked: tuple[Ranked, ...]) -> Jump | None:
        candidates = []
        fitting = 0  # ranked layouts predicted to fit, of which the first HEAD are re-estimated with the incumbent's levers
        for _t, items, _summary in ranked:
            if fitting >= HEAD:
                break
            levers = catalog.with_prerequisites({**incumbent, **{k: v for k, v in items if k in MODELLED}}, model, set(space))
            est = estimate_of(recipe, levers)
            if not fits(est):
                continue
            fitting += 1
            diff = {k: v for k, v in catalog.effective(levers).items() if current.get(k) != v}
            if not diff or any(k not in space or v not in space[k] for k, v in diff.items()):
                continue
            if moot & set(diff) and not set(diff) & set(DEGREES):
                continue
            if catalog.effective(levers) in seen or layout_problem(recipe, levers) is not None:
                continue
            step_s, compiled = attainable(levers, est)
            if step_s <= (1.0 - MIN_SAVING) * here_s:
                candidates.append((step_s, levers, diff, est.summary + anchored(est) + compiled))
        for step_s, levers, diff, summary in tie_broken(candidates):
            links = _links(recipe, incumbent, diff, seen)
            if links is not None:
                return Jump(links=links, levers=levers, step_s=step_s, incumbent_step_s=here_s, summary=summary)
        return None

    # the layouts both the formula and the measured peak say fit first; then, with a peak, those only it says fit
    jump = best(both_fit)
    if jump is None and measured is not None and anchor is not None:
        jump = best(ranking(ranked_json, fitting_only=False))
    return jump


def tie_broken(candidates: list[tuple]) -> list[tuple]:
    """Candidate layouts (estimated step first, the changed levers third) fastest first, except that those within
    TIE of the fastest -- a tie the model cannot break -- come in order of how few levers they change: each changed
    lever is a term the model may misjudge, and a tie gives no reason to move it (qwen3-235b-a22b on 128 H100s, a
    probe task: DualPipeV kept, InterleavedZeroBubble and ZBVZeroBubble all estimated at 1.763 s -- the model gives
    every zero-bubble schedule the same third of the bubble -- and the jump that swapped DualPipeV away ran out of
    memory and was abandoned, 84.9 % of the oracle; the one that keeps it measured +15 %: 100 %)."""
    fastest = min((c[0] for c in candidates), default=0.0)

    def order(c: tuple) -> tuple:
        tied = c[0] <= fastest * (1.0 + TIE)
        return (not tied, len(c[2]) if tied else 0, c[0])

    return sorted(candidates, key=order)


def consistent(predicted: float, measured: float) -> bool:
    """Whether the model's predicted speed-up between two layouts matches the measured one within its error on one
    layout (MIN_SAVING): their ratio within [1 - MIN_SAVING, 1 / (1 - MIN_SAVING)]."""
    if not (predicted > 0 and measured > 0 and math.isfinite(predicted)):
        return False
    return 1.0 - MIN_SAVING <= predicted / measured <= 1.0 / (1.0 - MIN_SAVING)


def _links(recipe: Recipe, incumbent: dict[str, Scalar], diff: dict[str, Scalar],
           seen: list[dict[str, Scalar]]) -> list[tuple[str, Scalar]] | None:
    """``diff``'s levers in the order their links are proposed, each partial layout legal (torchtitan would refuse
    an enabler's configuration otherwise, and the gate with it) and none of them a configuration already stepped
    (``seen``, effective values: a campaign refuses a step to a configuration it measured, so a chain through one
    would stop there -- llama3.1-70b on 16 H200s, whose CP 2 -> 1 had run out of memory, never made its jump to CP 1
    with local batch 1 and no recompute, the chain's first link CP 1 being that measured configuration): the first
    such order in LINK_ORDER's preference (a depth-first search over the orders); None where every order passes
    through an illegal or stepped layout."""
    rank = {k: i for i, k in enumerate(LINK_ORDER)}

    def search(at: dict[str, Scalar], left: list[str]) -> list[tuple[str, Scalar]] | None:
        if not left:
            return []
        for k in left:
            nxt = {**at, k: diff[k]}
            if layout_problem(recipe, nxt) is not None or catalog.effective(nxt) in seen:
                continue
            rest = search(nxt, [x for x in left if x != k])
            if rest is not None:
                return [(k, diff[k]), *rest]
        return None

    return search(dict(incumbent), sorted(diff, key=lambda k: rank.get(k, len(LINK_ORDER))))
