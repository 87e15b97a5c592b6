"""bot/campaign/gate_calls.py: how a campaign calls the gate — the loss band it calibrates once, and the convergence stage with it."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot import campaign as cm
from bot.campaign.gate_calls import calibrate_loss_band, convergence_gate, make_calibrator
from bot.core.recipe import load_recipe
from bot.core.records import StepMetric
from bot.runner.sim import SimRunner

REPO = Path(__file__).resolve().parents[2]
GLM = REPO / "bot" / "bench" / "tasks" / "glm-4.5" / "h100x128.yaml"


def _sim_pair():
    recipe = load_recipe(GLM)
    runner = SimRunner(seed=3)
    return recipe, runner.run(recipe, out_dir=None), runner.run(recipe, out_dir=None)


def test_a_simulated_band_costs_nothing_and_is_labelled_simulated() -> None:
    recipe, base, _ = _sim_pair()
    event = calibrate_loss_band(GLM.read_text(), base, cache_dir=Path("/nonexistent"))
    assert isinstance(event, cm.Calibrated) and event.band is not None
    assert event.device_hours == 0.0 and event.note.startswith("SIMULATED")
    assert all(label.endswith("(simulated)") for label in event.band.calibrated_on)
    # the modelled drift is real drift: the band is wider than the print floor somewhere, and never below it
    loss = event.band.signals["loss"]
    assert max(loss.band) > loss.floor and min(loss.band) >= loss.floor


def test_tier_r_passes_within_the_band_and_fails_outside_it() -> None:
    _, base, cand = _sim_pair()
    band = calibrate_loss_band(GLM.read_text(), base, cache_dir=Path("/nonexistent")).band
    assert convergence_gate(base, cand, "R", band=band).ok  # same objective: same modelled curve
    worse = cand.model_copy(update={"steps": [s.model_copy(update={"loss": s.loss * 1.05}) for s in cand.steps]})
    verdict = convergence_gate(base, worse, "R", band=band)
    assert not verdict.ok and "max |delta|/band" in verdict.reasons[0]


def test_without_a_band_tier_r_fails_closed_and_tier_b_is_bitwise() -> None:
    _, base, cand = _sim_pair()
    verdict = convergence_gate(base, cand, "R", band=None)
    assert not verdict.ok and "fail closed" in verdict.reasons[0]
    assert convergence_gate(base, cand, "B", band=None).ok


def test_a_band_that_cannot_serve_is_a_closed_rejection_not_a_traceback() -> None:
    _, base, cand = _sim_pair()
    band = calibrate_loss_band(GLM.read_text(), base, cache_dir=Path("/nonexistent")).band
    other_stack = cand.model_copy(update={"stack": cand.stack.model_copy(update={"torch": "9.9"})})
    verdict = convergence_gate(base, other_stack, "R", band=band)  # calibrated on another stack: recalibrate
    assert not verdict.ok and "could not compare" in verdict.reasons[0] and "recalibrate" in verdict.reasons[0]
    short = [StepMetric(step=i + 1, loss=2.0) for i in range(3)]
    verdict = convergence_gate(
        base.model_copy(update={"outcome": "crash"}), cand, "R", band=band
    )  # the baseline cannot serve
    assert not verdict.ok and "fail closed" in verdict.reasons[0]
    assert not convergence_gate(base, cand.model_copy(update={"steps": short}), "R", band=band).ok  # a short candidate


def test_make_calibrator_fixes_the_cache_and_parallelism(tmp_path: Path) -> None:
    calibrate = make_calibrator(tmp_path, jobs=1)
    _, base, _ = _sim_pair()
    assert calibrate(GLM.read_text(), base).band is not None


def test_the_sim_runner_stops_at_the_budget_cap() -> None:
    recipe = load_recipe(GLM)
    full = SimRunner(seed=1).run(recipe, out_dir=None)
    cap = full.summary.wall_s / 2
    capped = SimRunner(seed=1).run(recipe, out_dir=None, max_wall_s=cap)
    assert full.outcome == "ok" and capped.outcome == "timeout"
    assert capped.reason.startswith(f"stopped at the wall-clock cap of {cap:,.0f} s (the run needed ")
    assert cap - 0.001 <= capped.summary.wall_s <= cap and capped.summary.device_hours <= full.summary.device_hours / 2
    assert SimRunner(seed=1).run(recipe, out_dir=None, max_wall_s=full.summary.wall_s + 1).outcome == "ok"


def test_the_sim_runner_stops_a_clearly_slower_trial_early() -> None:
    from bot.runner.base import EarlyStop

    recipe = load_recipe(GLM)
    full = SimRunner(seed=1).run(recipe, out_dir=None)
    tps = full.summary.tps_median
    assert tps is not None
    stopped = SimRunner(seed=1).run(recipe, out_dir=None, early_stop=EarlyStop(below_tps=2 * tps, after_steps=3))
    assert stopped.outcome == "stopped" and "stopped early" in stopped.reason
    assert len(stopped.steps) == recipe.bench.warmup_steps + 3  # the warm-up, then three measured steps
    assert stopped.summary.device_hours < full.summary.device_hours / 2
    assert stopped.summary.tps_median == pytest.approx(tps, rel=0.05)  # what it measured is kept: a real observation
    kept_on = SimRunner(seed=1).run(recipe, out_dir=None, early_stop=EarlyStop(below_tps=tps / 2))
    assert kept_on.outcome == "ok" and len(kept_on.steps) == len(full.steps)
    # a rule that could only fire on the last step: the run completed, so it is ok
    last = EarlyStop(below_tps=2 * tps, after_steps=recipe.bench.steps - recipe.bench.warmup_steps)
    assert SimRunner(seed=1).run(recipe, out_dir=None, early_stop=last).outcome == "ok"
