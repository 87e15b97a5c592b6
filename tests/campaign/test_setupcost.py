"""bot/campaign/setupcost.py: the set-up (baseline and calibration runs) fitted to the budget, and its runs capped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from campaign_fakes import new_state, recipe_text

from bot import campaign as cm
from bot.campaign import gate_calls
from bot.campaign.setupcost import CALIBRATION_RUNS_MAX, fit_setup


def _after_first_run(budget: float, *, simulated: bool = False, warmup: int = 1) -> cm.Campaign:
    state = new_state(recipe_text(), budget=budget, baseline_warmup_runs=warmup, baseline_runs_wanted=3)
    run = cm.RunRef(kind="baseline", attempt=1, outcome="ok", tps=1000.0, device_hours=0.01, simulated=simulated)
    return state.model_copy(update={"baseline": [run], "spent": 0.01})


def test_a_set_up_that_fits_is_left_as_planned() -> None:
    assert fit_setup(_after_first_run(1.0)).updates == {}


def test_the_extra_baseline_run_goes_first_then_the_calibration() -> None:
    # 0.011 a run: 3 measured + 4 calibration + a trial = 0.098 more; 2 measured + 4 + 1 = 0.077
    fit = fit_setup(_after_first_run(0.01 + 0.08))
    assert fit.updates == {
        "baseline_runs_wanted": 2,
        "setup_note": "set-up scaled to fit the budget: 2 measured baseline runs, not 3",
    }
    fit = fit_setup(_after_first_run(0.05))
    assert fit.updates["calibrated"] is True and fit.updates["calibration_runs_planned"] == 0 and not fit.refusal
    assert fit.updates["calibration_note"].startswith(
        "no loss band: the budget does not hold the gate's 4 calibration runs"
    )


def test_a_set_up_that_cannot_fit_names_the_smallest_budget_which_then_fits() -> None:
    fit = fit_setup(_after_first_run(0.03))
    assert fit.updates == {} and fit.refusal.startswith("budget: the set-up left (3 baseline runs, 4 calibration runs)")
    assert (
        fit.smallest_budget == pytest.approx(0.01 + 3 * 0.011)
        and f"is {fit.smallest_budget:g} device-hours" in fit.refusal
    )
    assert not fit_setup(_after_first_run(fit.smallest_budget)).refusal


def test_a_state_stored_before_the_plan_loads_and_counts_the_most_calibration_runs() -> None:
    stored = json.loads(_after_first_run(1.0).model_dump_json())
    for field in ("calibration_runs_planned", "setup_note"):
        stored.pop(field)
    state = cm.Campaign.model_validate(stored)
    assert state.calibration_runs_planned is None and state.setup_note == ""
    fit = fit_setup(state.model_copy(update={"budget": 0.01 + 0.011 * (3 + CALIBRATION_RUNS_MAX) + 0.005}))
    assert fit.updates["baseline_runs_wanted"] == 2  # 4 calibration runs counted: with none, all of it would fit
    assert fit_setup(_after_first_run(0.01 + 0.011 * 4, simulated=True, warmup=0)).updates == {}  # modelled: free


def test_calibration_runs_share_the_budget_cap(monkeypatch, tmp_path: Path) -> None:
    from gate import runs as gate_runs

    seen: dict = {}

    def fake_run_many(specs, cache_dir, **kw):
        seen.update(specs)
        raise RuntimeError("stop here")

    monkeypatch.setattr(gate_runs, "run_many", fake_run_many)
    text = recipe_text()
    from campaign_fakes import make_record

    from bot.core.recipe import parse_recipe_text

    reference = make_record(parse_recipe_text(text, "r.yaml"), "ok", 1000.0, 0.01)
    event = gate_calls.calibrate_loss_band(text, reference, cache_dir=tmp_path, max_wall_s=400.0)
    assert event.band is None and "stop here" in event.note
    assert len(seen) >= 2 and all(spec.max_wall_s == pytest.approx(400.0 / len(seen)) for spec in seen.values())


@pytest.mark.parametrize(
    ("change", "reused"),
    [
        ({}, True),
        ({"outcome": "crash"}, False),
        ({"hook": "init_perturb:1"}, False),
        ({"recipe_hash": "another recipe"}, False),
        ({"seed_checkpoint": "another seed"}, False),
        ({"run_id": "r0"}, False),  # the reference itself
        ({"steps": []}, False),  # shorter than the gate's window
    ],
    ids=["a-repeat", "failed", "hooked", "another-recipe", "another-seed", "the-reference", "too-short"],
)
def test_the_calibrations_repeat_is_a_baseline_run_already_made(
    monkeypatch, tmp_path: Path, change: dict, reused: bool
) -> None:
    from campaign_fakes import make_record

    from bot.core.recipe import parse_recipe_text
    from gate import runs as gate_runs

    text = recipe_text()
    recipe = parse_recipe_text(text, "r.yaml")
    seen: dict = {}

    def fake_run_many(specs, cache_dir, **kw):
        seen.update(specs)

        def losses(sid: str) -> list[float]:
            return [4.0 - 0.1 * i + (0.001 * i if sid == "cal:init_perturb" else 0.0) for i in range(10)]

        return {sid: make_record(recipe, "ok", 1000.0, 0.01, run_id=sid, losses=losses(sid)) for sid in specs}

    monkeypatch.setattr(gate_runs, "run_many", fake_run_many)
    reference = make_record(recipe, "ok", 1000.0, 0.01, run_id="r0")
    other = make_record(recipe, "ok", 1000.0, 0.01, run_id="r1").model_copy(update=change)
    event = gate_calls.calibrate_loss_band(text, reference, cache_dir=tmp_path, repeats=[other], max_wall_s=300.0)
    assert ("cal:repeat" not in seen) is reused
    assert event.band is not None, event.note
    assert ("the repeat is a baseline run" in event.note) is reused
    assert all(spec.max_wall_s == pytest.approx(300.0 / len(seen)) for spec in seen.values())  # the fresh runs' share
    planned = gate_calls.fresh_calibration_runs(text, recipe, tmp_path, baseline_repeats=1)
    assert planned == gate_calls.fresh_calibration_runs(text, recipe, tmp_path) - 1
