"""The strong baselines (greedy, cmaes, costmodel): legal proposals only, infeasible runs told, the budget kept,
through the same campaign loop as the agent (simulated recipe: Llama 3.1 8B on one 8 x H100 node)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from campaign_fakes import new_state, play, table_rule

from bot.agent import get_policy
from bot.agent.cma import INFEASIBLE, POPSIZE, CmaEsPolicy
from bot.agent.costmodel import Shape, estimate
from bot.agent.costmodel_tuner import ranking
from bot.agent.greedy import GreedyPolicy, lever_order, value_order
from bot.agent.policy import validate_change
from bot.agent.space import layout_problem, make_space
from bot.core import levers as catalog
from bot.core.diagnosis import Diagnosis
from bot.core.recipe import parse_recipe_text
from bot.core.records import Change, FileRecords, Stop
from bot.sim.hardware import get_hardware
from bot.sim.zoo import get_model

RECORDS = FileRecords()
OK = Diagnosis(outcome="ok", tps=1000.0)
TEXT = """\
id: llama3.1-8b/h100x8-test
source: https://github.com/pytorch/torchtitan/blob/main/benchmarks/llama3_h100_202412_torchtitan.md
workload:
  module: torchtitan.models.llama3
  config: llama3_8b
  model: llama3.1-8b
cluster:
  hardware: h100-sxm-80gb
  nodes: 1
  devices_per_node: 8
  launcher: sim
  usd_per_device_hour: 2.5
levers:
  parallelism.data_parallel_shard_degree: -1
  parallelism.tensor_parallel_degree: 1
  parallelism.pipeline_parallel_degree: 1
  training.local_batch_size: 1
  activation_checkpoint: full
  compile.enable: false
  training.disable_cuda_graphs: true
pinned:
  training.global_batch_size: 32
  training.seq_len: 4096
  optimizer.lr: 3.0e-4
  lr_scheduler.warmup_steps: 200
  lr_scheduler.total_steps: 10000
  debug.seed: 42
env: {}
bench:
  steps: 20
  warmup_steps: 5
"""
RECIPE = parse_recipe_text(TEXT, "recipes/llama3.1-8b/h100x8.yaml")
SPACE = make_space(RECIPE)
# no recompute runs out of memory; a bigger local batch is faster; everything else measures like the baseline
RULE = table_rule(
    {(("activation_checkpoint", "none"),): "oom", (("training.local_batch_size", 4),): [1300.0, 1290.0]},
    [1000.0, 1010.0],
)


def campaign(policy, steps: int = 12, budget: float = 10.0):
    state = new_state(TEXT, policy=policy.name, max_steps=steps, budget=budget)
    state = state.model_copy(update={"recipe_path": "recipes/llama3.1-8b/h100x8.yaml"})
    return play(state, lambda s: policy.propose(s, OK, [], SPACE, RECORDS), RULE, cost=0.5)


def assert_legal_and_new(state) -> None:
    tried = [catalog.effective(state.baseline_levers)]
    for st in state.steps:
        eff = catalog.effective(st.levers)
        assert layout_problem(RECIPE, st.levers) is None, st.change  # the free legality pre-check passed
        for lever, values in SPACE.values.items():
            assert eff[lever] in values  # from the shared space, the same values as the agent's
        assert eff not in tried  # never the same configuration twice (an OOM is not retried as it was)
        tried.append(eff)


@pytest.mark.parametrize("name", ["greedy", "cmaes", "costmodel"])
def test_each_baseline_proposes_only_legal_untried_configurations_and_respects_the_budget(name: str) -> None:
    state = campaign(get_policy(name, **({"seed": 1} if name == "cmaes" else {})))
    assert state.phase == "finished" and state.steps
    assert_legal_and_new(state)
    assert state.spent <= state.budget  # every run was started only when its expected cost fitted what was left
    assert all(st.change.policy == name for st in state.steps)


def test_greedy_walks_the_levers_in_the_documented_order_and_keeps_the_best() -> None:
    order = lever_order(SPACE)
    assert order[:2] == ["parallelism.tensor_parallel_degree", "parallelism.pipeline_parallel_degree"]
    assert (
        order.index("training.local_batch_size") < order.index("activation_checkpoint") < order.index("compile.enable")
    )
    assert value_order([1, 2, 4, 8, 16], 4) == [8, 2, 16, 1]  # nearest first, larger before smaller
    state = campaign(GreedyPolicy(), steps=80, budget=100.0)
    levers = [st.change.lever for st in state.steps]
    firsts = [levers.index(k) for k in order if k in levers]
    assert firsts == sorted(firsts)  # each lever is first touched in the fixed order
    assert catalog.effective(state.incumbent_levers)["training.local_batch_size"] == 4  # the faster value was kept
    # it stops by itself once a whole pass finds nothing, every one-lever move from the incumbent measured
    assert state.finish_reason.startswith("policy stopped: coordinate descent")


def test_greedy_makes_a_degree_change_legal_by_moving_the_local_batch() -> None:
    text = (
        TEXT.replace("training.global_batch_size: 32", "training.global_batch_size: 8")
        .replace("parallelism.tensor_parallel_degree: 1", "parallelism.tensor_parallel_degree: 2")
        .replace("training.local_batch_size: 1", "training.local_batch_size: 2")
    )
    recipe = parse_recipe_text(text, "recipes/llama3.1-8b/h100x8.yaml")
    space = make_space(recipe)
    st = new_state(text, policy="greedy", budget=10.0)
    st = play(
        st.model_copy(update={"max_steps": 3}),
        lambda s: GreedyPolicy().propose(s, OK, [], space, RECORDS),
        table_rule({}, [1000.0]),
    )
    for step in st.steps:
        assert layout_problem(recipe, step.levers) is None
    # TP 2 -> 1 doubles the DP degree to 8: the pinned global batch 8 then needs local batch 1, proposed in the same
    # step (TP first); TP 4 needed no such fix
    assert layout_problem(recipe, {**recipe.levers, "parallelism.tensor_parallel_degree": 1}) is not None
    tp1 = next(s for s in st.steps if s.levers.get("parallelism.tensor_parallel_degree") == 1)
    assert tp1.change.lever == "parallelism.tensor_parallel_degree" and tp1.change.extra == {
        "training.local_batch_size": 1
    }
    tp4 = next(s for s in st.steps if s.levers.get("parallelism.tensor_parallel_degree") == 4)
    assert tp4.change.extra == {}


def test_cmaes_tells_out_of_memory_runs_as_infeasible_and_replays_statelessly() -> None:
    # the first seed whose first 10 samples include an AC-none (OOM) configuration (which seed does depends on what
    # the measurements told it: the layout rules and the paired protocol each moved it)
    for seed in range(12):
        policy = CmaEsPolicy(seed=seed)
        state = campaign(policy, steps=10)
        ooms = [st for st in state.steps[:-1] if any(r.outcome == "oom" for r in st.runs)]
        if ooms:
            break
    study, _ = policy.replay(state.model_copy(update={"steps": state.steps[:-1]}), SPACE)
    completed = [t for t in study.trials if t.value is not None]
    assert ooms, "the rule makes some configurations run out of memory"
    assert sum(t.value == INFEASIBLE for t in completed) >= len(ooms)
    # categorical levers are CMA-ES dimensions (ordered indices), not optuna's random fallback
    assert {k: type(d).__name__ for k, d in study.trials[-1].distributions.items()}[
        "activation_checkpoint"
    ] == "IntDistribution"
    assert (
        max(t.system_attrs.get("cmawm:generation", 0) for t in study.trials) >= 1
    )  # more than one generation of POPSIZE
    assert POPSIZE == 4
    # stateless: the same campaign gives the same next proposal
    again = state.model_copy(update={"phase": "stepping", "finish_reason": ""})
    assert policy.propose(again, OK, [], SPACE, RECORDS) == policy.propose(again, OK, [], SPACE, RECORDS)


def test_costmodel_measures_best_first_and_never_proposes_a_layout_it_predicts_to_oom() -> None:
    ranked = ranking(RECIPE.model_dump_json())
    times = [t for t, _, _ in ranked]
    assert times == sorted(times) and len(ranked) > 5
    state = campaign(get_policy("costmodel"), steps=4)
    ranks = [int(st.change.why.split("rank ")[1].split(" ")[0]) for st in state.steps]
    assert ranks == sorted(ranks)  # measured best-first
    change = get_policy("costmodel").propose(state.model_copy(update={"phase": "stepping"}), OK, [], SPACE, RECORDS)
    assert isinstance(change, Change | Stop)
    if isinstance(change, Change):
        assert validate_change(state, change, SPACE, allow_multi=True, check_prerequisites=False) is None


def test_the_cost_model_follows_its_textbook_terms() -> None:
    m, hw = get_model("llama3.1-8b"), get_hardware("h100-sxm-80gb")
    base = Shape(tp=1, pp=1, cp=1, ep=1, local_batch=2, microbatch=1, schedule="1F1B", ac="none")
    full = estimate(m, hw, 8, 32, 4096, Shape(**{**base.__dict__, "ac": "full"}))
    none = estimate(m, hw, 8, 32, 4096, base)
    assert full.compute_s == pytest.approx(none.compute_s * (1 + 1 / 3) / 1.0)  # +1 forward under full recompute
    assert full.memory_gib < none.memory_gib
    pp = Shape(tp=1, pp=4, cp=1, ep=1, local_batch=4, microbatch=1, schedule="1F1B", ac="full")
    few = estimate(m, hw, 8, 32, 4096, pp)
    many = estimate(m, hw, 8, 32, 4096, Shape(**{**pp.__dict__, "local_batch": 16}))
    assert many.bubble_s / many.compute_s < few.bubble_s / few.compute_s  # (p-1)/m shrinks with more microbatches
    zb = estimate(m, hw, 8, 32, 4096, Shape(**{**pp.__dict__, "schedule": "ZBVZeroBubble"}))
    assert zb.bubble_s < few.bubble_s
    huge = estimate(get_model("llama3.1-405b"), hw, 8, 32, 4096, base)
    assert not huge.fits  # 405B of model state on 8 x 80 GB: predicted out of memory
    # activations in flight: 1F1B holds min(m, p) microbatches, GPipe and LoopedBFS (all forwards first) all m of them
    acts = {}
    for schedule in ("1F1B", "GPipe", "LoopedBFS", "Interleaved1F1B"):
        shape = Shape(**{**pp.__dict__, "local_batch": 16, "ac": "none", "schedule": schedule})
        no_acts = estimate(m, hw, 8, 32, 4096, Shape(**{**shape.__dict__, "local_batch": 1, "microbatch": 1}))
        acts[schedule] = estimate(m, hw, 8, 32, 4096, shape).memory_gib - no_acts.memory_gib
    assert acts["GPipe"] > 3 * acts["1F1B"] and acts["LoopedBFS"] > 3 * acts["1F1B"]  # m = 16 against p = 4
    assert acts["1F1B"] < acts["Interleaved1F1B"] < acts["GPipe"]


def test_under_dualpipev_the_expert_all_to_all_hides_under_the_paired_chunks_computation_except_the_unpaired_ones() -> (
    None
):
    """DeepSeek-V3 report §3.2.1: a forward and a backward chunk run together, each one's all-to-all under the other's
    computation; the warm-up forwards and cool-down backwards (about p of the m microbatches) run unpaired."""
    from bot.agent.costmodel import dualpipe_exposed

    assert dualpipe_exposed(1.0, 10.0, 4, 16) == pytest.approx(0.25)  # a quarter unpaired; the rest hidden
    assert dualpipe_exposed(1.0, 10.0, 4, 4) == pytest.approx(1.0)  # no pairs at all: all exposed
    assert dualpipe_exposed(2.0, 1.0, 2, 8) == pytest.approx(2.0 * 0.25 + (2.0 - 1.0) * 0.75)  # more than the compute
    hw = get_hardware("h100-sxm-80gb")
    pp = Shape(tp=1, pp=4, cp=1, ep=8, local_batch=16, microbatch=1, schedule="ZBVZeroBubble", ac="full")
    moe = get_model("deepseek-v3")
    zbv, dual = (
        estimate(moe, hw, 256, 256, 4096, Shape(**{**pp.__dict__, "schedule": s}))
        for s in ("ZBVZeroBubble", "DualPipeV")
    )
    assert dual.comm_s < zbv.comm_s and dual.compute_s == zbv.compute_s
    dense = get_model("llama3.1-70b")  # no all-to-all to hide: the two V schedules estimate alike
    zbv, dual = (
        estimate(dense, hw, 256, 256, 4096, Shape(**{**pp.__dict__, "ep": 1, "schedule": s}))
        for s in ("ZBVZeroBubble", "DualPipeV")
    )
    assert dual == zbv


def test_the_cost_models_expert_parallel_groups_borrow_tensor_parallel_ranks_as_torchtitans_do() -> None:
    """torchtitan 0.3 has no expert-TP: EP borrows its ranks from FSDP and TP (dp_shard*cp*tp = efsdp*ep, TP
    innermost), so EP 8 with TP 2 is one node's 8 consecutive ranks, and each TP rank dispatches its own 1/tp of the
    tokens (ReordererSequenceParallel). The all-to-all of EP 8 x TP 2 is the NVLink one carrying half the bytes of
    EP 8 x TP 1; EP 16 crosses the NIC whatever the TP degree; a dense model or EP 1 has none."""
    from bot.agent.costmodel import _coll, ep_layer_comm

    m, hw = get_model("qwen3-235b-a22b"), get_hardware("h200")
    shape = Shape(tp=1, pp=1, cp=1, ep=8, local_batch=2, microbatch=1, schedule="1F1B", ac="none")
    tokens, message = 8192.0, 8192.0 * m.top_k * m.hidden * 2
    assert ep_layer_comm(m, hw, shape, tokens) == pytest.approx(4 * _coll(message, 8, hw.nvlink_gbs))
    tp2 = Shape(**{**shape.__dict__, "tp": 2})
    assert ep_layer_comm(m, hw, tp2, tokens) == pytest.approx(4 * _coll(message / 2, 8, hw.nvlink_gbs))
    assert ep_layer_comm(m, hw, Shape(**{**tp2.__dict__, "ep": 16}), tokens) == pytest.approx(
        4 * _coll(message / 2, 16, hw.internode_gbs)
    )
    assert ep_layer_comm(m, hw, Shape(**{**shape.__dict__, "ep": 1}), tokens) == 0.0
    assert ep_layer_comm(get_model("llama3.1-8b"), hw, shape, tokens) == 0.0


def test_the_cost_model_imports_only_the_model_and_hardware_facts_of_the_simulator() -> None:
    src = Path(__file__).resolve().parents[2] / "bot" / "agent" / "costmodel.py"
    mods = {n.module for n in ast.walk(ast.parse(src.read_text())) if isinstance(n, ast.ImportFrom) and n.module}
    mods |= {a.name for n in ast.walk(ast.parse(src.read_text())) if isinstance(n, ast.Import) for a in n.names}
    # the model facts (bot.sim.models: the built model, else the zoo), the hardware, and ModelSpec's home (the zoo)
    assert {m for m in mods if m.startswith("bot.sim")} == {"bot.sim.zoo", "bot.sim.hardware", "bot.sim.models"}


def test_costmodel_sets_the_prerequisites_a_ranked_layout_needs_instead_of_skipping_it() -> None:
    # torchtitan's llama3_70b config keeps CUDA graphs on; every pipelined layout needs them off. The cost model ranks
    # pipelined layouts first on 32 B200: its first proposal is one, with CUDA graphs off, legal as proposed
    path = Path(__file__).resolve().parents[2] / "bot" / "bench" / "tasks" / "llama3.1-70b" / "b200x32.yaml"
    recipe = parse_recipe_text(path.read_text(), str(path))
    space = make_space(recipe)
    assert recipe.levers["training.disable_cuda_graphs"] is False
    state = new_state(path.read_text(), policy="costmodel", budget=100.0).model_copy(update={"phase": "stepping"})
    change = get_policy("costmodel").propose(state, OK, [], space, RECORDS)
    assert isinstance(change, Change) and "rank 1 of" in change.why
    config = {**state.incumbent_levers, **change.extra, change.lever: change.after}
    assert int(config["parallelism.pipeline_parallel_degree"]) > 1 and config["training.disable_cuda_graphs"] is True
    assert layout_problem(recipe, config) is None
