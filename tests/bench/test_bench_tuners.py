"""A small tuner comparison end to end: every policy through the same campaign loop, budget and oracle (simulated)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bot.bench.tuners import bench, oracle, render, true_tps
from bot.core.recipe import load_recipe

# Llama 3.1 8B on one simulated 8 x H100 node: a start that recomputes everything at a small local batch,
# with a handful of levers, so the oracle's search and four campaigns take seconds.
SMALL = """\
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
  training.local_batch_size: 1
  activation_checkpoint: full
  compile.enable: false
  loss.num_chunks: 8
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


@pytest.fixture()
def small_recipe(tmp_path: Path) -> Path:
    path = tmp_path / "recipes" / "llama3.1-8b" / "h100x8.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(SMALL)
    return path


def test_the_oracle_is_at_least_every_legal_single_lever_neighbour(small_recipe: Path) -> None:
    recipe = load_recipe(small_recipe)
    best, levers, cost, points = oracle(recipe, run_cost=1.0)
    assert best >= true_tps(recipe, dict(recipe.levers)) > 0
    assert true_tps(recipe, levers) == pytest.approx(best)
    for lbs in (2, 4):
        assert best >= true_tps(recipe, {**recipe.levers, "training.local_batch_size": lbs})
    assert points > 0 and 0 < cost <= points


def test_a_small_tuner_comparison_runs_end_to_end(small_recipe: Path) -> None:
    result = bench([small_recipe], seeds=1, policies=["attune", "random", "tpe", "gp", "cmaes", "greedy", "costmodel"])
    assert result["simulated"] is True
    json.dumps(result)  # the CLI prints it as the last line
    (task,) = result["tasks"]
    pols = result["tasks"][task]
    assert set(pols) == {"attune", "random", "tpe", "gp", "cmaes", "greedy", "costmodel", "oracle"}
    budget = result["oracle"][task]["budget"]
    for name, m in pols.items():
        assert 0.0 <= m["oracle_fraction"] <= 1.0 + 1e-9
        assert m["false_gains"] == 0
        if name != "oracle":
            # a run is only started when its expected cost fits what is left, so at most one run over
            assert m["device_hours"] <= budget * 1.2
    assert pols["oracle"]["oracle_fraction"] == 1.0
    # the agent improves this recipe (more local batch / less recompute fits on 80 GB)
    assert pols["attune"]["mean_gain"] > 0.05
    text = render(result)
    assert "SIMULATED" in text and "attune" in text and "oracle" in text
    assert "The agent against the best alternative" in text


def test_targets_compare_the_agent_with_the_best_alternative_by_gain() -> None:
    from bot.bench.tuners import targets

    m = lambda gain, dh, frac=0.9: {"mean_gain": gain, "device_hours": dh, "oracle_fraction": frac, "false_gains": 0.0}  # noqa: E731
    result = {"tasks": {"t": {"attune": m(0.40, 50.0, 0.97), "random": m(0.0, 90.0), "tpe": m(0.08, 120.0), "gp": m(0.05, 200.0),
                              "oracle": m(0.42, 1e6, 1.0)},
                        "flat": {"attune": m(0.2, 10.0), "tpe": m(0.0, 30.0)}}}
    got = targets(result)
    assert got["t"]["best_alternative"] == "tpe" and got["t"]["gain_ratio"] == pytest.approx(5.0)
    assert got["t"]["device_hours_ratio"] == pytest.approx(50 / 120) and got["t"]["oracle_fraction"] == 0.97
    assert got["t"]["met"]["beats the best alternative"] and got["t"]["met"][">= 95% of oracle"]
    assert got["flat"]["gain_ratio"] is None  # the alternatives gained nothing: no ratio to quote
    assert got["flat"]["best_alternative"] == "none gained (tpe spent least)" and got["flat"]["device_hours_ratio"] == pytest.approx(1 / 3)


@pytest.mark.parametrize(("gain", "dh", "oracle", "says"), [(0.10, 50.0, 0.15, "gain < 2x (2x > oracle)"), (0.10, 50.0, 1.0, "gain < 2x"),
                                                            (0.40, 80.0, 1.0, "device-hours > 0.6x"),
                                                            (0.10, 80.0, 1.0, "gain < 2x, device-hours > 0.6x")])
def test_a_missed_target_says_what_it_is_short_of(gain: float, dh: float, oracle: float, says: str) -> None:
    """Against an alternative at +8 % and 100 device-hours the agent must gain 2x at 0.6x the device-hours; the
    missed target names the part it missed, and a gain ratio out of reach (2x the alternative's gain over the
    oracle's) says so."""
    from bot.bench.tuners import targets

    m = lambda g, d, frac=0.5: {"mean_gain": g, "device_hours": d, "oracle_fraction": frac, "false_gains": 0.0}  # noqa: E731
    result = {"tasks": {"t": {"attune": m(gain, dh, 0.97), "greedy": m(0.08, 100.0)}}, "oracle": {"t": {"oracle_gain": oracle}}}
    met = targets(result)["t"]["met"]
    assert met == {">= 95% of oracle": True, f"beats the best alternative ({says})": False, "no false gain": True, "payback < 24 h": False}


def test_the_benchmark_reports_which_group_each_task_is_in_with_a_trace(small_recipe: Path) -> None:
    from bot.bench.tuners import DEV_TASKS, GROUP_LABEL, task_group
    from bot.core.repo import find_repo

    result = bench([small_recipe], seeds=1, policies=["attune", "greedy", "costmodel"], trace="llama3.1-8b")
    (task,) = result["tasks"]
    assert result["groups"] == {task: "report"}  # a task not in DEV_TASKS is report-only
    assert result["targets"][task]["group"] == "report"
    steps = result["traces"][task]["attune"]
    assert steps[-1]["change"] == "stop" and all({"change", "why", "measured_gain", "decision"} <= set(s) for s in steps)
    text = render(result)
    assert GROUP_LABEL["report"] in text and f"### Trace: {task}, attune, seed 0" in text
    # the dev group (the four tasks shipped before issue 15, and deepseek-v3) are recipes of the repository
    shipped = {load_recipe(p).name for p in find_repo().recipes.glob("*/*.yaml")}
    assert set(DEV_TASKS) <= shipped and all(task_group(t) == "dev" for t in DEV_TASKS)
    assert {task_group(t) for t in shipped - set(DEV_TASKS)} <= {"report"} and len(shipped - set(DEV_TASKS)) >= 4


def test_tasks_are_chosen_by_recipe_id_or_model_id(small_recipe: Path) -> None:
    from bot.bench.tuners import default_tasks, select_tasks

    tasks = default_tasks()
    assert [load_recipe(p).name for p in select_tasks(tasks, ["glm-4.5"])] == ["glm-4.5/h100x128"]
    assert [load_recipe(p).name for p in select_tasks(tasks, ["llama3.1-8b/h200x16"])] == ["llama3.1-8b/h200x16"]
    assert select_tasks(tasks, []) == tasks and select_tasks(tasks, ["no-such-model"]) == []


def test_the_agent_claims_nothing_and_stops_early_on_a_recipe_already_at_its_optimum(tmp_path: Path) -> None:
    import yaml

    from bot.bench.tuners import BUDGET_RUNS, run_campaign
    from bot.runner.sim import SimRunner

    recipe = load_recipe(Path(__file__).resolve().parents[2] / "recipes" / "llama3.1-8b" / "h200x16.yaml")  # the flat task
    assert oracle(recipe, 1.0)[0] == pytest.approx(true_tps(recipe, dict(recipe.levers)))  # it is at the optimum
    small = yaml.safe_load(SMALL)
    path = tmp_path / "recipes" / "llama3.1-8b" / "h100x8.yaml"
    path.parent.mkdir(parents=True)
    best_levers = oracle(load_recipe(_write(tmp_path / "s.yaml", SMALL)), 1.0)[1]
    small["levers"] = dict(best_levers)  # every lever of the optimum (its prerequisites too: CUDA graphs off for PP)
    path.write_text(yaml.safe_dump(small, sort_keys=False))
    flat = load_recipe(path)
    run_cost = SimRunner(seed=0).run(flat, out_dir=None).summary.device_hours
    for seed in (0, 1):
        state = run_campaign(path, "heuristic", seed, BUDGET_RUNS * run_cost, tmp_path / f"w{seed}")
        assert state.gain == 0.0 and state.incumbent_step == 0  # no gain claimed
        # issue 15's flat-task target was 30% of the budget; with paired measurement (issue 14) a neutral probe costs
        # its pairs before it is undecided, and the flat task now spends about 45-62% (issue 14 note): bounded here so
        # a regression shows, the target is not met
        assert state.spent <= 0.75 * BUDGET_RUNS * run_cost
        assert state.finish_reason.startswith("policy stopped")


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.parametrize(("args", "needle"), [(["--policies", "attune,bogus"], "--policies: unknown bogus"),
                                              (["--tasks", "no-such-task"], "--tasks: no task is called no-such-task"),
                                              (["--tasks", "glm-4.5", "--trace", "mixtral-8x22b"], "--trace: mixtral-8x22b is not one of the tasks run"),
                                              (["--seeds", "0"], "--seeds: expected at least 1")])
def test_bad_bench_options_are_one_clear_line_and_exit_2(args: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    from bot.cli import main

    assert main(["bench", "tuners", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_the_oracle_evaluates_a_point_that_misses_a_prerequisite_with_it_set() -> None:
    """Expert parallel with CUDA graphs on is refused by torchtitan 0.3.0; a policy gets there through the CUDA-graphs
    prerequisite, so the oracle's grid sets it too rather than count the point illegal (qwen3-30b-a3b's EP and PP)."""
    from bot.agent.space import make_space
    from bot.bench.tuners import with_prerequisites
    from bot.core import levers as catalog
    from bot.core.repo import find_repo

    recipe = load_recipe(find_repo().recipes / "qwen3-30b-a3b" / "b200x16.yaml")
    space = make_space(recipe)
    ep = {**recipe.levers, "parallelism.expert_parallel_degree": 8}
    assert recipe.levers["training.disable_cuda_graphs"] is False and catalog.prerequisite_problems(ep, space.model)
    fixed = with_prerequisites(ep, space.model, set(space.values))
    assert fixed == {**ep, "training.disable_cuda_graphs": True} and not catalog.prerequisite_problems(fixed, space.model)
    assert with_prerequisites(ep, space.model, set(space.values) - {"training.disable_cuda_graphs"}) == ep  # not the tuner's to set
    assert with_prerequisites(dict(recipe.levers), space.model, set(space.values)) == dict(recipe.levers)
