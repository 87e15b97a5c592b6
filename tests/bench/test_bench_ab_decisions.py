"""bot/bench/ab_decisions.py and ``attune bench measure``: the protocol's decisions benchmarked (the simulated part here;
the real part makes real CPU runs for minutes and is run as the benchmark, not in the default suite)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bot.bench.ab_decisions import (
    SIM_STEPS,
    SIM_WARMUP,
    decide,
    estimator_spread,
    simulated,
    summarise,
    window_study,
)

ROOT = Path(__file__).resolve().parents[2]


def test_simulated_comparisons_detect_large_gains_and_rarely_claim_a_false_one() -> None:
    sim = simulated(300, seed=1)["by_gain"]
    assert sim["+10%"]["gain_share"] > 0.95 and sim["+0%"]["gain_share"] < 0.08
    assert sim["+0%"]["runs_mean"] > sim["+10%"]["runs_mean"]  # a null result costs more pairs than a clear win


def test_decide_follows_the_protocol_run_by_run() -> None:
    sides: list[str] = []

    def run(side: str) -> float:
        sides.append(side)
        return 1500.0 if side == "B" else 1000.0 + len(sides)  # a clear +50%

    res = decide({"min_gain": 0.05, "max_pairs": 4, "pair_with_trial": True}, [1000.0, 1003.0, 998.0], run)
    assert res["decision"] == "gain" and res["pairs"] == 1 and res["runs"] == 2 and sides == ["B", "A"]


def test_estimator_spread_ranks_a_statistic_that_ignores_outliers_first() -> None:
    from campaign_fakes import make_record

    from bot.core.recipe import parse_recipe_text

    recipe = parse_recipe_text((ROOT / "recipes/llama3-tiny/cpu.yaml").read_text())
    records = []
    for i in range(6):
        rec = make_record(recipe, "ok", 1000.0, 0.01, n_steps=10)
        spikes = i % 4  # 0-3 steps on a fast path in each run: the mean moves with them, the median does not
        steps = [
            s.model_copy(update={"tps": 1000.0 + (5000.0 if j < spikes else 0.0)}) for j, s in enumerate(rec.steps)
        ]
        records.append(rec.model_copy(update={"steps": steps}))
    spread = estimator_spread(records, warmup=0)
    assert spread["median"] < spread["mean"] and spread["max"] > spread["median"]


def test_summarise_counts_every_decision() -> None:
    s = summarise(
        [
            {"decision": "gain", "estimate": 0.1, "lo": 0.05, "hi": 0.15, "runs": 2},
            {"decision": "undecided", "estimate": 0.0, "lo": -0.1, "hi": 0.1, "runs": 9},
        ]
    )
    assert (s["gain_share"], s["undecided_share"], s["runs_max"]) == (0.5, 0.5, 9)


def test_a_shorter_measurement_window_costs_fewer_steps_per_decision() -> None:
    """Every run after the trial makes the warm-up and the window only; the trial makes all the recipe's steps."""
    short, full = window_study(200, 1, [2, SIM_STEPS - SIM_WARMUP])
    assert short["window"] == 2 and full["window"] == SIM_STEPS - SIM_WARMUP
    assert short["steps_3pct"] < full["steps_3pct"] and short["steps_0pct"] < full["steps_0pct"]
    assert full["steps_3pct"] == pytest.approx(SIM_STEPS * full["runs_3pct"])  # a full window: every run is a whole run
    assert 0.0 <= short["false_gain"] <= 1.0 and full["detected_3pct"] > 0.5


def test_the_cli_prints_the_simulated_table_and_json_and_refuses_bad_options() -> None:
    attune = [sys.executable, "-m", "bot.cli"]
    done = subprocess.run(
        [*attune, "bench", "measure", "--sim-only", "--sim-trials", "50", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "SIMULATED" in done.stdout and "| +3%" in done.stdout
    payload = json.loads(done.stdout[done.stdout.index("\n{") + 1 :])
    assert payload["simulated"]["trials"] == 50
    bad = subprocess.run(
        [*attune, "bench", "measure", "--warmup", "20"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert bad.returncode == 2 and "--warmup" in bad.stderr and "Traceback" not in bad.stderr
    windows = subprocess.run(
        [*attune, "bench", "measure", "--sim-only", "--sim-trials", "20", "--sim-windows", "2,15"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert windows.returncode == 0 and "measurement windows" in windows.stdout, windows.stderr
    bad = subprocess.run(
        [*attune, "bench", "measure", "--sim-only", "--sim-windows", "0,x"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "--sim-windows" in bad.stderr and "Traceback" not in bad.stderr


def test_remeasure_measures_each_kept_step_against_its_own_incumbent(tmp_path: Path) -> None:
    from bot.bench.ab_decisions import remeasure
    from bot.core.recipe import load_recipe
    from bot.core.records import Change
    from bot.core.state import Campaign, Step

    recipe = load_recipe(ROOT / "bot/bench/tasks/llama3.1-405b/h200x128.yaml")  # simulated: instant runs
    state = Campaign(id="c", recipe_path="r", recipe_id=recipe.name, budget=1.0, baseline_levers=dict(recipe.levers))
    kept = {**recipe.levers, "parallelism.context_parallel_degree": 2}
    state.steps = [
        Step(
            n=1, change=Change(lever="parallelism.context_parallel_degree", after=2), levers=kept, kept=True, gain=0.1
        ),
        Step(n=2, change=Change(lever="training.gc_freq", after=7), levers={**kept, "training.gc_freq": 7}, kept=False),
    ]
    seen: list[str] = []
    results = remeasure(state, recipe, tmp_path, steps=10, warmup=2, progress=seen.append)
    assert [r["step"] for r in results] == [1]  # kept steps only
    assert (
        results[0]["decision"] in ("gain", "no_gain", "undecided")
        and results[0]["runs"] >= 1
        and "above_zero" in results[0]
    )
    assert sum(s.startswith("step 1 baseline") for s in seen) == 3  # the incumbent measured first, as a campaign does


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--steps", "1"], "--steps: expected at least 2 (a warm-up step and a measured one); got 1"),
        (["--steps", "-4"], "--steps: expected at least 2"),
        (["--steps", "3"], "--steps: expected more than the 3 warm-up steps (--warmup 3, its default); got 3"),
        (["--steps", "1", "--remeasure", "c1"], "--steps: expected at least 2"),
        (["--warmup", "0"], "--warmup: expected 1 to 11 (fewer than --steps 12); got 0"),
        (["--warmup", "5", "--steps", "5"], "--warmup: expected 1 to 4 (fewer than --steps 5); got 5"),
        (["--repeats", "0"], "--repeats: expected at least 1; got 0"),
        (["--sim-trials", "-3"], "--sim-trials: expected at least 1; got -3"),
        (["--sim-seed", "-1"], "--sim-seed: expected 0 or more; got -1"),
    ],
)
def test_each_bad_number_is_refused_naming_its_own_flag(args: list[str], needle: str) -> None:
    from crash_helpers import REPO, attune

    proc = attune(REPO, "bench", "measure", "--sim-only", *args, timeout=60)
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr)
    lines = proc.stderr.strip("\n").splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr and needle in lines[0], proc.stderr
    assert proc.stdout == ""  # nothing ran


def test_steps_just_above_the_default_warmup_are_accepted() -> None:
    from crash_helpers import REPO, attune

    proc = attune(REPO, "bench", "measure", "--sim-only", "--sim-trials", "20", "--steps", "4", timeout=120)
    assert proc.returncode == 0 and "SIMULATED" in proc.stdout, proc.stderr
