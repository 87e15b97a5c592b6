"""The layout jump: once the diagnosis- and lesson-driven moves are spent, the analytic cost model's best layout.

A rule-guided search changes one lever at a time from where it stands, so it settles in the basin of the layout it
started from: llama3.1-70b from torchtitan's TP 8 / full-recompute config ends at TP 4, CP 2, selective recompute,
while its optimum is four pipeline stages that free the memory for no recompute at all -- a point no single lever
reaches uphill (every one-lever move from the first is slower). A cost-model tuner (OptiCo, NeMo AutoConfigurator:
perfmodel.md section 1.1) ranks every legal layout analytically instead, but measures its picks with the recipe's
other levers untuned. This module joins the two: from the incumbent (its compile, async TP, resharding kept), the
first-principles model of :mod:`bot.agent.costmodel` -- not the calibrated simulator -- ranks the layouts, and the
best one predicted at least ``MIN_SAVING`` faster than the incumbent's own estimate, legal, predicted to fit and not
yet stepped, and reachable one lever at a time through legal layouts, is the jump. The policy proposes it as a chain of one-lever enablers (gated, not run) with its last
lever measured on them, so every step still changes one recipe line.

``layout_jump`` is a pure function of the recipe, the incumbent and the steps so far; the ranking of the baseline's
layouts is cached per recipe (:func:`bot.agent.costmodel_tuner.ranking`), and only its head is re-estimated with
the incumbent's levers.
"""

from __future__ import annotations

from pydantic import BaseModel

from bot.agent.costmodel import estimate_of
from bot.agent.costmodel_tuner import MODELLED, ranking
from bot.agent.space import layout_problem
from bot.core import levers as catalog
from bot.core.levers import ModelFacts
from bot.core.recipe import Recipe
from bot.core.records import Scalar

DEGREES = catalog.PARALLEL_DEGREES
MIN_SAVING = 0.10  # of the incumbent's estimated step: the model's error on one layout is of this order (perfmodel.md §4.6)
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
                stepped: list[dict[str, Scalar]], model: ModelFacts | None = None, moot: frozenset[str] = frozenset()) -> Jump | None:
    """The best layout (by the cost model) reached from ``incumbent`` by changing only modelled levers (and their
    prerequisites), predicted to fit and to save MIN_SAVING of the incumbent's estimated step, legal, every lever
    within ``space``, and not among the ``stepped`` configurations (effective values); None without one, or where
    the cost model does not know the model or hardware. ``model``: the facts the prerequisites read (MoE or not).
    ``moot``: levers whose whole addressable cost is inside the noise band (the schedule with no bubble to speak of,
    recompute with next to none): a jump that keeps the parallel degrees leaves them as they are -- it could not
    measure them -- while one that moves a degree may change them with it (the memory and bubble they trade change)."""
    try:
        ranked = ranking(recipe.model_copy(update={"levers": dict(baseline)}).model_dump_json())
        here = estimate_of(recipe, incumbent)
    except (KeyError, ValueError):
        return None
    if not here.fits or here.step_s <= 0:
        return None  # the model predicts the incumbent does not fit: its estimates say nothing here
    current = catalog.effective(incumbent)
    seen = [catalog.effective(s) for s in stepped]
    candidates = []
    for _t, items, _summary in ranked[:HEAD]:
        levers = catalog.with_prerequisites({**incumbent, **{k: v for k, v in items if k in MODELLED}}, model, set(space))
        diff = {k: v for k, v in catalog.effective(levers).items() if current.get(k) != v}
        if not diff or any(k not in space or v not in space[k] for k, v in diff.items()):
            continue
        if moot & set(diff) and not set(diff) & set(DEGREES):
            continue
        if catalog.effective(levers) in seen or layout_problem(recipe, levers) is not None:
            continue
        est = estimate_of(recipe, levers)
        if est.fits and est.step_s <= (1.0 - MIN_SAVING) * here.step_s:
            candidates.append((est.step_s, levers, diff, est.summary))
    for step_s, levers, diff, summary in sorted(candidates, key=lambda c: c[0]):
        links = _links(recipe, incumbent, diff)
        if links is not None:
            return Jump(links=links, levers=levers, step_s=step_s, incumbent_step_s=here.step_s, summary=summary)
    return None


def _links(recipe: Recipe, incumbent: dict[str, Scalar], diff: dict[str, Scalar]) -> list[tuple[str, Scalar]] | None:
    """``diff``'s levers in the order their links are proposed, each partial layout legal (torchtitan would refuse
    an enabler's configuration otherwise, and the gate with it): the first such order in LINK_ORDER's preference
    (a depth-first search over the orders); None where every order passes through an illegal layout."""
    rank = {k: i for i, k in enumerate(LINK_ORDER)}

    def search(at: dict[str, Scalar], left: list[str]) -> list[tuple[str, Scalar]] | None:
        if not left:
            return []
        for k in left:
            nxt = {**at, k: diff[k]}
            if layout_problem(recipe, nxt) is not None:
                continue
            rest = search(nxt, [x for x in left if x != k])
            if rest is not None:
                return [(k, diff[k]), *rest]
        return None

    return search(dict(incumbent), sorted(diff, key=lambda k: rank.get(k, len(LINK_ORDER))))
