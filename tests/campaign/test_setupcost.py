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
