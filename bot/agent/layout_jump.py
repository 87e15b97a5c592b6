"""The layout jump: once the diagnosis- and lesson-driven moves are spent, the analytic cost model's best layout.

A one-lever search settles in its starting layout's basin; this ranks every legal layout reached from the incumbent
(its other levers kept) with :mod:`bot.agent.costmodel` -- not the simulator -- memory anchored on a measured peak
(:mod:`bot.agent.memory_screen`), and proposes the best one predicted MIN_SAVING faster, legal, fitting and not yet
stepped, as a chain of one-lever enablers. Only where the model reproduced the campaign's measured speed-up. Pure;
the baseline's ranking is cached per recipe. Why, and the measurements: docs/agent-evidence.md.
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
MIN_SAVING = 0.10  # of the incumbent's estimated step: the model's error on one layout is of this order
# (docs/reference/performance-model.md#46-open-calculators-and-simulators-with-claimed-accuracy)
TIE = 0.01  # of the fastest estimate: layouts within it are a tie the model cannot break (it errs by MIN_SAVING)
# torch.compile's cited speed-up (lesson compile-on-gpu's evidence): what a layout that rules compile out forgoes while
# the campaign has yet to try it
COMPILE_SPEEDUP = 6667 / 5762
COMPILE = "compile.enable"
ASYNC_TP = "compile.enable_async_tensor_parallel"
HEAD = 64  # ranked layouts re-estimated with the incumbent's levers: the ranking's order moves little with them
# the order of a jump's links: prerequisites, then the parallel degrees, the batch split, the schedule, recompute last
# (a zero-bubble schedule is refused with recompute on, torchtitan#773, so recompute comes off before it)
LINK_ORDER = (
    "training.disable_cuda_graphs",
    "parallelism.pipeline_parallel_degree",
    "parallelism.tensor_parallel_degree",
    "parallelism.context_parallel_degree",
    "parallelism.expert_parallel_degree",
    "training.local_batch_size",
    "parallelism.pipeline_parallel_microbatch_size",
    "activation_checkpoint",
    "parallelism.pipeline_parallel_schedule",
)


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


def layout_jump(
    recipe: Recipe,
    baseline: dict[str, Scalar],
    incumbent: dict[str, Scalar],
    space: dict[str, list[Scalar]],
    stepped: list[dict[str, Scalar]],
    model: ModelFacts | None = None,
    moot: frozenset[str] = frozenset(),
    measured: MeasuredPeak | None = None,
    speedup: float | None = None,
    last: tuple[dict[str, Scalar], float] | None = None,
    compile_untried: bool = False,
    compile_gain: float | None = None,
) -> Jump | None:
    """The best layout (by the cost model) reached from ``incumbent`` by changing only modelled levers (and their
    prerequisites), predicted to fit and to save MIN_SAVING, legal, within ``space`` and not ``stepped``; None without
    one or for an unknown model or hardware. ``moot``: levers left alone unless a degree moves. ``measured``: the peak
    memory is anchored on. ``speedup`` (or ``last``: the levers before the latest kept modelled step and its measured
    speed-up): what the model must reproduce. ``compile_untried``: compare as compiled (COMPILE_SPEEDUP where the
    layout allows compile), except from an incumbent that cannot be compiled. ``compile_gain``: what a kept step
    turning compile on measured; a layout that rules compile out is then weighed without it, that gain forgone."""
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

    reproduced = (
        speedup is not None
        and consistent(start.step_s / here.step_s, speedup)
        or last is not None
        and before_last is not None
        and consistent(before_last.step_s / here.step_s, last[1])
    )
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
        return (
            f"; predicted peak {measured.peak_gib * est.memory_gib / anchor:.0f} GiB of {measured.capacity_gib:.0f} "
            f"(the measured {measured.peak_gib:.0f} GiB x the memory model's {est.memory_gib / anchor:.2f})"
        )

    if anchor is None and not here.fits:
        return None  # the model predicts the incumbent does not fit, and no measured peak corrects it
    current = catalog.effective(incumbent)
    seen = [catalog.effective(s) for s in stepped]
    here_s = attainable(incumbent, here)[0]

    forgone = f"; not compiled: the schedule rules compile out (pytorch#161904), its measured +{compile_gain or 0:.1%} forgone"
    schedule = "parallelism.pipeline_parallel_schedule"
    # a compile gain the model's own error could hide is traded; a larger one is surer than the model's ranking
    trade_compile = (
        compile_gain is not None and compile_gain < MIN_SAVING and current.get(COMPILE) and not current.get(ASYNC_TP)
    )

    def variants(items: tuple) -> list[tuple[dict[str, Scalar], bool]]:
        """A ranked layout with the incumbent's other levers and the prerequisites; and, where its schedule rules out
        the compile the incumbent kept for a measured gain under MIN_SAVING, the layout with compile off too (True)."""
        raw = {**incumbent, **{k: v for k, v in items if k in MODELLED}}
        out = [(catalog.with_prerequisites(raw, model, set(space)), False)]
        if trade_compile and out[0][0].get(schedule) != raw.get(schedule):  # the prerequisite fix gave up its schedule
            out.append((catalog.with_prerequisites({**raw, COMPILE: False}, model, set(space)), True))
        return out

    def best(ranked: tuple[Ranked, ...]) -> Jump | None:
        candidates = []
        fitting = (
            0  # ranked layouts predicted to fit, of which the first HEAD are re-estimated with the incumbent's levers
        )
        for _t, items, _summary in ranked:
            if fitting >= HEAD:
                break
            for levers, uncompiled in variants(items):
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
                if uncompiled:  # the compile gain this campaign measured is forgone
                    step_s, compiled = est.step_s * (1.0 + (compile_gain or 0.0)), forgone
                else:
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
    lever is a term the model may misjudge, and a tie gives no reason to move it."""
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


def _links(
    recipe: Recipe, incumbent: dict[str, Scalar], diff: dict[str, Scalar], seen: list[dict[str, Scalar]]
) -> list[tuple[str, Scalar]] | None:
    """``diff``'s levers in the order their links are proposed, each partial layout legal (torchtitan would refuse an
    enabler's configuration otherwise) and none of them a configuration already stepped (``seen``, effective values: a
    campaign refuses a step to a configuration it measured, so the chain would stop there): the first such order in
    LINK_ORDER's preference (a depth-first search); None where every order passes through an illegal or stepped layout."""
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
