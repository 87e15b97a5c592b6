"""The model-guided move: the cost model's best one-lever change, when it clears the model's error; never on a CPU."""

from __future__ import annotations

from pathlib import Path

from campaign_fakes import new_state, space_fn

from bot.agent.heuristic.explore import neighbours
from bot.agent.heuristic.model_guided import ModelGuided, reach
from bot.agent.heuristic.move import Context
from bot.agent.heuristic.scorer import model_saving
from bot.agent.layout_jump import MIN_SAVING
from bot.core import levers as catalog
from bot.core import state as cm
from bot.core.diagnosis import Diagnosis
from bot.core.recipe import load_recipe
from bot.core.records import Change, FileRecords

LBS = "training.local_batch_size"
ROOT = Path(__file__).resolve().parents[2]
GPU = ROOT / "bot/bench/tasks/llama3.1-70b/h100x64.yaml"
CPU = ROOT / "recipes/llama3-tiny/cpu.yaml"


def _context(path: Path) -> Context:
    recipe = load_recipe(path)
    return Context(new_state(path.read_text()), Diagnosis(outcome="ok"), [], space_fn(recipe), FileRecords(), None)


def test_it_scores_a_degree_or_batch_all_the_way_along_and_a_category_as_exploration_would() -> None:
    ctx = _context(GPU)
    here = catalog.effective(ctx.campaign.incumbent_levers)
    tp, sched = "parallelism.tensor_parallel_degree", "parallelism.pipeline_parallel_schedule"
    near = neighbours(ctx.campaign, ctx.space, tp, here[tp])
    assert sorted(near) == [4, 16]  # TP 8: one halving and one doubling away
    assert sorted(reach(ctx.campaign, ctx.space, tp, here[tp])) == [1, 2, 4, 16, 32, 64]
    assert reach(ctx.campaign, ctx.space, sched, here[sched]) == neighbours(ctx.campaign, ctx.space, sched, here[sched])


def test_it_never_reaches_a_batch_at_or_above_one_that_ran_out_of_memory() -> None:
    ctx = _context(GPU)
    levers = {**ctx.campaign.incumbent_levers, LBS: 32}
    oom = cm.Step(
        n=1,
        change=Change(lever=LBS, before=8, after=32, why="t"),
        state="closed",
        levers=levers,
        runs=[cm.RunRef(kind="trial", n=1, outcome="oom", reason="peak memory 90 GiB exceeds 80 GiB")],
    )
    campaign = ctx.campaign.model_copy(update={"steps": [oom]})
    assert sorted(reach(ctx.campaign, ctx.space, LBS, 8)) == [1, 2, 4, 16, 32, 64]
    assert sorted(reach(campaign, ctx.space, LBS, 8)) == [1, 2, 4, 16]


def test_it_proposes_the_change_the_cost_model_predicts_saves_the_most() -> None:
    ctx = _context(GPU)
    here = catalog.effective(ctx.campaign.incumbent_levers)
    savings = {
        (lever, value): s
        for lever in ctx.space.values
        if not catalog.inert(ctx.campaign.incumbent_levers, lever)
        for value in reach(ctx.campaign, ctx.space, lever, here.get(lever))
        if (s := model_saving(ctx.space, here, {**here, lever: value})) is not None
    }
    change = ModelGuided().propose(ctx)
    best = max(savings.values())
    assert best > MIN_SAVING  # this recipe recomputes everything with memory to spare: recompute off is predicted
    assert change is not None and not change.enabler
    assert savings[(change.lever, change.after)] == best
    assert "the cost model predicts" in change.why


def test_a_raised_bar_stops_it() -> None:
    ctx = _context(GPU)
    high = Context(ctx.campaign.model_copy(update={"min_gain": 0.99}), ctx.diagnosis, [], ctx.space, ctx.records, None)
    assert ModelGuided().propose(high) is None


def test_it_never_acts_on_a_cpu_host() -> None:
    assert ModelGuided().propose(_context(CPU)) is None
