"""A small tuner comparison end to end: every policy through the same campaign loop, budget and oracle (simulated);
its report (bot/bench/tuners_report.py) on small synthetic results; ``attune bench tuners``' flag checks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bot.bench.tuners import baseline_problem, bench, oracle, render, true_tps
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
    result = bench(
        [small_recipe], seeds=1, policies=["heuristic", "random", "tpe", "gp", "cmaes", "greedy", "costmodel"]
    )
    assert result["simulated"] is True
    json.dumps(result)  # the CLI prints it as the last line
    (task,) = result["tasks"]
    pols = result["tasks"][task]
    assert set(pols) == {"heuristic", "random", "tpe", "gp", "cmaes", "greedy", "costmodel", "oracle"}
    budget = result["oracle"][task]["budget"]
    for name, m in pols.items():
        assert 0.0 <= m["oracle_fraction"] <= 1.0 + 1e-9
        assert m["false_gains"] == 0
        if name != "oracle":
            # a run is only started when its expected cost fits what is left, so at most one run over
            assert m["device_hours"] <= budget * 1.2
    o = result["oracle"][task]
    assert {"search_gain", "oracle_from_policy", "oracle_policy"} <= set(o)
    assert pols["oracle"]["mean_gain"] == pytest.approx(o["search_gain"])  # the oracle row is the search's own
    assert pols["oracle"]["oracle_fraction"] == (
        pytest.approx(1.0)
        if not o["oracle_from_policy"]
        else pytest.approx((1 + o["search_gain"]) / (1 + o["oracle_gain"]))
    )
    # the agent improves this recipe (more local batch / less recompute fits on 80 GB)
    assert pols["heuristic"]["mean_gain"] > 0.05
    text = render(result)
    assert "SIMULATED" in text and "heuristic" in text and "oracle" in text
    assert "The agent against the best alternative" in text
    # the samplers' versions: another optuna may draw other points from the same seed
    import optuna

    assert result["versions"]["optuna"] == optuna.__version__ and set(result["versions"]) == {
        "optuna",
        "cmaes",
        "scipy",
        "numpy",
    }
    assert f"optuna {optuna.__version__}, cmaes " in text


def test_targets_compare_the_agent_with_the_best_alternative_by_gain() -> None:
    from bot.bench.tuners import targets

    m = lambda gain, dh, frac=0.9: {"mean_gain": gain, "device_hours": dh, "oracle_fraction": frac, "false_gains": 0.0}  # noqa: E731
    result = {
        "tasks": {
            "t": {
                "heuristic": m(0.40, 50.0, 0.97),
                "random": m(0.0, 90.0),
                "tpe": m(0.08, 120.0),
                "gp": m(0.05, 200.0),
                "oracle": m(0.42, 1e6, 1.0),
            },
            "flat": {"heuristic": m(0.2, 10.0), "tpe": m(0.0, 30.0)},
        }
    }
    got = targets(result)
    assert got["t"]["best_alternative"] == "tpe" and got["t"]["gain_ratio"] == pytest.approx(5.0)
    assert got["t"]["device_hours_ratio"] == pytest.approx(50 / 120) and got["t"]["oracle_fraction"] == 0.97
    assert got["t"]["met"]["beats the best alternative"] and got["t"]["met"][">= 95% of oracle"]
    assert got["flat"]["gain_ratio"] is None  # the alternatives gained nothing: no ratio to quote
    assert got["flat"]["best_alternative"] == "none gained (tpe spent least)" and got["flat"][
        "device_hours_ratio"
    ] == pytest.approx(1 / 3)


@pytest.mark.parametrize(
    ("gain", "dh", "oracle", "says"),
    [
        (0.10, 50.0, 0.15, "gain < 2x (2x > oracle)"),
        (0.10, 50.0, 1.0, "gain < 2x"),
        (0.40, 80.0, 1.0, "device-hours > 0.6x"),
        (0.10, 80.0, 1.0, "gain < 2x, device-hours > 0.6x"),
    ],
)
def test_a_missed_target_says_what_it_is_short_of(gain: float, dh: float, oracle: float, says: str) -> None:
    """Against an alternative at +8 % and 100 device-hours the agent must gain 2x at 0.6x the device-hours; the
    missed target names the part it missed, and a gain ratio out of reach (2x the alternative's gain over the
    oracle's) says so."""
    from bot.bench.tuners import targets

    m = lambda g, d, frac=0.5: {"mean_gain": g, "device_hours": d, "oracle_fraction": frac, "false_gains": 0.0}  # noqa: E731
    result = {
        "tasks": {"t": {"heuristic": m(gain, dh, 0.97), "greedy": m(0.08, 100.0)}},
        "oracle": {"t": {"oracle_gain": oracle}},
    }
    met = targets(result)["t"]["met"]
    assert met == {
        ">= 95% of oracle": True,
        f"beats the best alternative ({says})": False,
        "no false gain": True,
        "payback < 24 h": False,
    }


def test_the_benchmark_reports_which_group_each_task_is_in_with_a_trace(small_recipe: Path) -> None:
    from bot.bench.tuners import DEV_TASKS, GROUP_LABEL, TASKS_DIR, task_group

    result = bench([small_recipe], seeds=1, policies=["heuristic", "greedy", "costmodel"], trace="llama3.1-8b")
    (task,) = result["tasks"]
    assert result["groups"] == {task: "report"}  # a task not in DEV_TASKS is report-only
    assert result["targets"][task]["group"] == "report"
    steps = result["traces"][task]["heuristic"]
    assert steps[-1]["change"] == "stop" and all(
        {"change", "why", "measured_gain", "decision"} <= set(s) for s in steps
    )
    text = render(result)
    assert GROUP_LABEL["report"] in text and f"### Trace: {task}, heuristic, seed 0" in text
    # the dev group (the four tasks shipped before issue 15, and deepseek-v3) are task recipes of the benchmark
    shipped = {load_recipe(p).name for p in TASKS_DIR.glob("*/*.yaml")}
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

    recipe = load_recipe(
        Path(__file__).resolve().parents[2] / "bot" / "bench" / "tasks" / "llama3.1-8b" / "h200x16.yaml"
    )  # the flat task
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


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--policies", "heuristic,bogus"], "--policies: unknown bogus"),
        (["--tasks", "no-such-task"], "--tasks: no task is called no-such-task"),
        (["--tasks", "glm-4.5", "--trace", "mixtral-8x22b"], "--trace: mixtral-8x22b is not one of the tasks run"),
        (["--seeds", "0"], "--seeds: expected at least 1"),
    ],
)
def test_bad_bench_options_are_one_clear_line_and_exit_2(
    args: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from bot.cli import main

    assert main(["bench", "tuners", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_the_oracle_evaluates_a_point_that_misses_a_prerequisite_with_it_set() -> None:
    """Expert parallel with CUDA graphs on is refused by torchtitan 0.3.0; a policy gets there through the CUDA-graphs
    prerequisite, so the oracle's grid sets it too rather than count the point illegal (qwen3-30b-a3b's EP and PP)."""
    from bot.agent.space import make_space
    from bot.bench.tuners import TASKS_DIR, with_prerequisites
    from bot.core import levers as catalog

    recipe = load_recipe(TASKS_DIR / "qwen3-30b-a3b" / "b200x16.yaml")
    space = make_space(recipe)
    ep = {**recipe.levers, "parallelism.expert_parallel_degree": 8}
    assert recipe.levers["training.disable_cuda_graphs"] is False and catalog.prerequisite_problems(ep, space.model)
    fixed = with_prerequisites(ep, space.model, set(space.values))
    assert fixed == {**ep, "training.disable_cuda_graphs": True} and not catalog.prerequisite_problems(
        fixed, space.model
    )
    assert (
        with_prerequisites(ep, space.model, set(space.values) - {"training.disable_cuda_graphs"}) == ep
    )  # not the tuner's to set
    assert with_prerequisites(dict(recipe.levers), space.model, set(space.values)) == dict(recipe.levers)


# --- the report read off small synthetic results (bot/bench/tuners_report.py) ---------------------------------------


def _rows(
    task: str, policy: str, gains: list[float], device_hours: float = 10.0, share: list[float] | None = None
) -> list[dict]:
    """One campaign row per seed, as bench() makes them before settling the oracle (``final_tps`` on a baseline of 100)."""
    share = share or [0.5] * len(gains)
    return [
        {
            "task": task,
            "policy": policy,
            "seed": i,
            "gain": g,
            "claimed_gain": g,
            "device_hours": device_hours,
            "final_tps": 100.0 * (1 + g),
            "false_gains": 0,
            "steps": 3,
            "budget_share": s,
        }
        for i, (g, s) in enumerate(zip(gains, share, strict=True))
    ]


def _result(
    rows: list[dict], search_gain: float = 0.2, task: str = "m/c", devices: int = 8, oracle_hours: float = 500.0
) -> dict:
    """A benchmark result for one task built as bench() builds it: the oracle settled, the rows aggregated."""
    from bot.bench.tuners import aggregate, settle_oracle, targets

    entry = {
        "baseline_tps": 100.0,
        "devices": devices,
        "budget": 20.0,
        "oracle_device_hours": oracle_hours,
        "grid": 50,
        "group": "report",
        "hardware": "h100-sxm-80gb",
    }
    rows = [*rows, settle_oracle(task, entry, rows, 100.0 * (1 + search_gain))]
    result = {
        "simulated": True,
        "seeds": 5,
        "budget_runs": 14,
        "tasks": aggregate(rows, {task: devices}),
        "oracle": {task: entry},
        "groups": {task: "report"},
        "traces": {},
    }
    return {**result, "targets": targets(result)}


def test_payback_is_the_mean_campaigns_device_hours_over_its_mean_gain_and_says_how_many_seeds_gained() -> None:
    """3 of 5 seeds gain +10 % at 10 device-hours each, on 8 devices: the mean campaign gains +6 % and pays back in
    10 / (0.06 x 8) = 20.8 h. The mean of the per-seed paybacks (12.5 h) would leave the two seeds that gained nothing out."""
    from bot.bench.tuners import render

    result = _result(_rows("m/c", "heuristic", [0.1, 0.1, 0.1, 0.0, 0.0]) + _rows("m/c", "tpe", [0.05] * 5))
    agent = result["tasks"]["m/c"]["heuristic"]
    assert agent["payback_hours"] == pytest.approx(10 / (0.06 * 8)) and (agent["seeds"], agent["seeds_gained"]) == (
        5,
        3,
    )
    assert result["targets"]["m/c"]["payback_hours"] == pytest.approx(
        20.83, abs=0.01
    )  # the target reads the same number
    text = render(result)
    assert "20.83 (3 of 5 seeds gained)" in text  # the policy table
    assert "20.8 (3 of 5 seeds gained)" in text  # the summary
    tpe = next(line for line in text.splitlines() if line.startswith("| tpe"))
    assert " 25.00 |" in tpe and "seeds gained" not in tpe  # 10 / (0.05 x 8), every seed gained: no note


def test_the_payback_target_reads_the_mean_campaign_not_the_mean_of_the_seeds_that_gained() -> None:
    # per seed that gained: 10 / (0.2 x 8) = 6.25 h; the mean campaign (+4 %): 10 / (0.04 x 8) = 31.25 h
    result = _result(_rows("m/c", "heuristic", [0.2, 0.0, 0.0, 0.0, 0.0]) + _rows("m/c", "greedy", [0.01] * 5))
    assert result["targets"]["m/c"]["payback_hours"] == pytest.approx(31.25)
    assert result["targets"]["m/c"]["met"]["payback < 24 h"] is False


def test_an_oracle_a_policy_set_is_credited_to_it_and_the_search_keeps_its_own_gain() -> None:
    from bot.bench.tuners import render

    result = _result(_rows("m/c", "heuristic", [0.1]) + _rows("m/c", "tpe", [0.25]), search_gain=0.2)
    o, pols = result["oracle"]["m/c"], result["tasks"]["m/c"]
    assert o["oracle_from_policy"] is True and o["oracle_policy"] == "tpe"
    assert o["oracle_gain"] == pytest.approx(0.25) and o["search_gain"] == pytest.approx(0.2)
    assert pols["oracle"]["mean_gain"] == pytest.approx(0.2) and pols["oracle"]["oracle_fraction"] == pytest.approx(
        120 / 125
    )
    assert pols["tpe"]["oracle_fraction"] == pytest.approx(1.0) and pols["heuristic"][
        "oracle_fraction"
    ] == pytest.approx(110 / 125)
    text = render(result)
    assert (
        "oracle: a better point tpe reached, +25.0% over the recipe (the structured search, 50 points evaluated, found +20.0%)"
        in text
    )
    assert "optimum +25.0%" not in text
    oracle_row = next(line for line in text.splitlines() if line.startswith("| oracle"))
    assert "+20.0%" in oracle_row and "96.0%" in oracle_row


def test_an_oracle_the_search_set_is_the_searchs() -> None:
    from bot.bench.tuners import render

    result = _result(_rows("m/c", "heuristic", [0.1]) + _rows("m/c", "tpe", [0.15]), search_gain=0.2)
    o = result["oracle"]["m/c"]
    assert (
        o["oracle_from_policy"] is False
        and o["oracle_policy"] is None
        and o["search_gain"] == o["oracle_gain"] == pytest.approx(0.2)
    )
    assert result["tasks"]["m/c"]["oracle"]["oracle_fraction"] == 1.0
    assert "oracle: structured search, 50 points evaluated, optimum +20.0% over the recipe" in render(result)


@pytest.mark.parametrize(
    ("policies", "says"),
    [
        (["heuristic", "cmaes"], "## The agent against the best alternative of cmaes — SIMULATED"),
        (["heuristic", "tpe", "greedy"], "## The agent against the best alternative of tpe, greedy — SIMULATED"),
        (
            ["cmaes"],
            "No summary of the agent against the alternatives: the agent heuristic did not run (policies run: cmaes).",
        ),
        (
            ["heuristic"],
            "No summary of the agent against the alternatives: no alternative policy ran (only heuristic).",
        ),
    ],
)
def test_the_summary_names_the_alternatives_or_says_why_there_is_none(policies: list[str], says: str) -> None:
    from bot.bench.tuners import render

    text = render(_result([r for p in policies for r in _rows("m/c", p, [0.1, 0.05])]))
    assert says in text
    assert "all baselines" not in text
    if len(policies) == 1:
        assert "| m/c" not in text and "The agent against the best alternative" not in text


def test_tables_print_numbers_as_formatted_and_right_aligned() -> None:
    """tabulate would re-read 1939540.1 as a float and print 1.93954e+06."""
    from bot.bench.tuners import render

    result = _result(
        _rows("m/c", "heuristic", [1e-6] * 2, device_hours=15.5) + _rows("m/c", "greedy", [0.1] * 2),
        oracle_hours=1939540.1,
    )
    text = render(result)
    assert "1939540.1" in text and "e+0" not in text
    assert (
        " 1937500.00 |" in text and " 1937500.0 |" in text
    )  # the heuristic policy's payback, 15.5 / (1e-6 x 8): its table and the summary
    oracle_row = next(line for line in text.splitlines() if line.startswith("| oracle"))
    assert (
        oracle_row.endswith(" 0 |") and "|             0 |" in oracle_row
    )  # false gains: right-aligned under its header


def test_a_flat_tasks_spend_shows_its_maximum_beside_the_mean() -> None:
    from bot.bench.tuners import render

    flat = _result(
        _rows("m/c", "heuristic", [0.0, 0.0], share=[0.2, 0.4]) + _rows("m/c", "greedy", [0.0, 0.0]), search_gain=0.0
    )
    line = next(line for line in render(flat).splitlines() if line.startswith("| m/c (flat)"))
    assert "30% (max 40%)" in line and flat["targets"]["m/c"]["met"]["<= 30% of the budget"] is False
    same = _result(
        _rows("m/c", "heuristic", [0.0, 0.0], share=[0.2, 0.2]) + _rows("m/c", "greedy", [0.0, 0.0]), search_gain=0.0
    )
    assert "(max" not in render(same)
    steep = _result(
        _rows("m/c", "heuristic", [0.1, 0.1], share=[0.2, 0.4]) + _rows("m/c", "greedy", [0.0, 0.0])
    )  # not flat
    assert "(max" not in render(steep)


def test_the_trace_stop_row_gives_the_final_measured_gain() -> None:
    from bot.bench.tuners import render_trace, trace_rows
    from bot.core.records import Change
    from bot.core.state import Campaign, RunRef, Step

    kept = Step(
        n=1,
        change=Change(lever="training.local_batch_size", after=2),
        levers={"training.local_batch_size": 2},
        kept=True,
        gain=0.123,
    )
    state = Campaign(
        id="c",
        recipe_path="r",
        recipe_id="m/c",
        budget=1.0,
        baseline_levers={},
        finish_reason="policy stopped",
        baseline=[RunRef(kind="baseline", outcome="ok", tps=100.0)],
        incumbent_tps=112.3,
        steps=[kept],
    )
    step, stop = trace_rows(state)
    assert step["decision"] == "kept" and step["measured_gain"] == pytest.approx(0.123)
    assert stop["change"] == "stop" and stop["decision"] == "final measured gain +12.3%"
    assert "final measured gain +12.3%" in render_trace("m/c", {"heuristic": [stop]})


# --- attune bench tuners: bad flags are one line, exit 2, and nothing runs -------------------------------------------


def _bench_tuners(*args: str, env: dict[str, str] | None = None):
    from crash_helpers import REPO, attune

    return attune(REPO, "bench", "tuners", *args, env={"ANTHROPIC_API_KEY": "", **(env or {})}, timeout=60)


def _refused(proc, needle: str) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr)
    lines = proc.stderr.strip("\n").splitlines()
    assert len(lines) == 1 and lines[0].startswith("attune: ") and "Traceback" not in proc.stderr, proc.stderr
    assert needle in lines[0], lines[0]
    assert proc.stdout == ""  # nothing ran: no campaign, no report
    return lines[0]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--policies", "claude"], "--policies: claude needs ANTHROPIC_API_KEY set"),
        (
            ["--policies", "heuristic,claude", "--tasks", "llama3.1-8b/h100x8"],
            "--policies: claude needs ANTHROPIC_API_KEY set",
        ),
        (["--tasks", ""], "--tasks: expected a comma list of names; got ''"),
        (["--tasks", ","], "--tasks: expected a comma list of names; got ','"),
        (["--policies", ""], "--policies: expected a comma list of names; got ''"),
        (["--policies", ","], "--policies: expected a comma list of names; got ','"),
        (["--seeds", "0"], "--seeds: expected at least 1; got 0"),
        (["--seeds", "-2"], "--seeds: expected at least 1; got -2"),
        (
            ["--recipe", "recipes/llama3-tiny/cpu.yaml"],
            "--recipe recipes/llama3-tiny/cpu.yaml: cluster.launcher is 'local'; bench tuners runs simulated",
        ),
        (
            [
                "--recipe",
                "bot/bench/tasks/llama3.1-8b/h100x8.yaml",
                "--recipe",
                "bot/bench/tasks/llama3.1-8b/h100x8.yaml",
            ],
            "--recipe bot/bench/tasks/llama3.1-8b/h100x8.yaml: given twice; give each recipe once",
        ),
        (
            [
                "--recipe",
                "bot/bench/tasks/llama3.1-8b/h100x8.yaml",
                "--recipe",
                "bot/bench/../bench/tasks/llama3.1-8b/h100x8.yaml",
            ],
            "--recipe bot/bench/../bench/tasks/llama3.1-8b/h100x8.yaml: given twice (also as bot/bench/tasks/llama3.1-8b/h100x8.yaml)",
        ),
        (["--recipe", "no/such.yaml"], "--recipe no/such.yaml: no such recipe"),
        (["--policies", "attune,heuristic"], "--policies: heuristic given twice (attune is its deprecated name)"),
    ],
)
def test_bad_bench_tuners_flags_are_refused_before_anything_runs(args: list[str], needle: str) -> None:
    _refused(_bench_tuners(*args), needle)


def test_an_unknown_task_among_known_ones_is_named_with_the_known_ones() -> None:
    line = _refused(
        _bench_tuners("--tasks", "glm-4.5,bogus", "--policies", "greedy"), "--tasks: no task is called bogus; expected"
    )
    assert "glm-4.5/h100x128" in line and "llama3.1-8b/h100x8" in line and "glm-4.5," not in line.split(";")[0]


def test_the_same_task_from_two_files_is_refused(small_recipe: Path, tmp_path: Path) -> None:
    twin = tmp_path / "twin.yaml"
    twin.write_text(small_recipe.read_text())
    _refused(
        _bench_tuners("--recipe", str(small_recipe), "--recipe", str(twin)),
        f"--recipe {twin}: the same task (llama3.1-8b/h100x8-test) as {small_recipe}",
    )


def test_a_recipe_on_hardware_the_simulator_does_not_know_is_refused_before_any_task_runs(
    small_recipe: Path, tmp_path: Path
) -> None:
    """``check_runnable`` (was a KeyError traceback from the first campaign's baseline)."""
    alien = tmp_path / "alien.yaml"
    alien.write_text(small_recipe.read_text().replace("hardware: h100-sxm-80gb", "hardware: tpu9"))
    assert "tpu9" in alien.read_text()
    _refused(_bench_tuners("--recipe", str(small_recipe), "--recipe", str(alien), "--policies", "greedy"), f"{alien}:")
    line = _refused(
        _bench_tuners("--recipe", str(alien), "--policies", "greedy"),
        "cluster.hardware: 'tpu9' is unknown to the simulator",
    )
    assert "h100-sxm-80gb" in line


def test_a_recipe_whose_baseline_does_not_run_is_refused_before_any_task_runs(
    small_recipe: Path, tmp_path: Path
) -> None:
    """Its campaigns would all stop at the failed baseline and its oracle gain be 0: scored, it read as a flat task
    every policy met ("all met"), a benchmark task with nothing to measure."""
    broken = tmp_path / "broken.yaml"  # 32 sequences of 4096 tokens a rank without recompute: far over 80 GiB
    broken.write_text(
        small_recipe.read_text()
        .replace("id: llama3.1-8b/h100x8-test", "id: llama3.1-8b/h100x8-broken")
        .replace("training.local_batch_size: 1", "training.local_batch_size: 32")
        .replace("activation_checkpoint: full", "activation_checkpoint: none")
        .replace("training.global_batch_size: 32", "training.global_batch_size: 256")
    )
    problem = baseline_problem(load_recipe(broken))
    assert problem is not None and problem.startswith("oom: peak memory"), problem
    assert baseline_problem(load_recipe(small_recipe)) is None
    line = _refused(
        _bench_tuners("--recipe", str(small_recipe), "--recipe", str(broken), "--policies", "greedy"),
        f"--recipe {broken}: the recipe as written does not run in the simulator (oom: peak memory",
    )
    assert "a task starts from a working recipe" in line
    with pytest.raises(ValueError, match="llama3.1-8b/h100x8-broken \\(oom: peak memory"):
        bench([small_recipe, broken], seeds=1, policies=["greedy"])


def test_claude_runs_only_with_its_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the key set the flag check passes (the run itself is stopped at --trace, before any campaign)."""
    proc = _bench_tuners(
        "--policies", "claude", "--tasks", "glm-4.5", "--trace", "mixtral-8x22b", env={"ANTHROPIC_API_KEY": "sk-test"}
    )
    _refused(proc, "--trace: mixtral-8x22b is not one of the tasks run")


def test_bench_tuners_loads_each_recipe_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from collections import Counter

    import bot.bench.tuners as tuners
    import bot.core.recipe as recipe_module
    from bot.cli import main

    loads: Counter[Path] = Counter()
    real = recipe_module.load_recipe

    def counting(path):
        loads[Path(path).resolve()] += 1
        return real(path)

    monkeypatch.setattr(recipe_module, "load_recipe", counting)
    monkeypatch.setattr(tuners, "load_recipe", counting)
    assert main(["bench", "tuners", "--tasks", "llama3.1-8b/h100x8", "--policies", "greedy", "--seeds", "1"]) == 0
    assert "| greedy" in capsys.readouterr().out
    assert loads and set(loads.values()) == {1}, loads  # every recipe of the repository once, the one run too


def test_attune_is_a_deprecated_name_of_the_heuristic_policy(capsys: pytest.CaptureFixture[str]) -> None:
    """The agent was labelled ``attune`` in the benchmark's reports; ``--policies attune`` still runs it, under its
    one name ``heuristic`` (the name ``campaign run --policy`` and stored campaigns use), with a warning."""
    from bot.cli import main

    assert main(["bench", "tuners", "--tasks", "llama3.1-8b/h100x8", "--policies", "attune", "--seeds", "1"]) == 0
    out, err = capsys.readouterr()
    assert "| heuristic" in out and "| attune" not in out
    assert "--policies: attune is a deprecated name of heuristic; use heuristic" in err
