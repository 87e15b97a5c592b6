"""bot/campaign/machine.py: the campaign state machine, driven through the one executor (local ports) with a fake runner.

The runner is a table keyed by lever values (tokens/s per measurement, or an outcome); the forge is
the in-memory one (the git forge is covered in tests/test_drive.py and tests/forge/test_local_forge.py).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from campaign_fakes import (
    RECIPE_REL,
    FakeRunner,
    ScriptedPolicy,
    make_driver,
    make_gate_config,
    make_gate_convergence,
    new_state,
    recipe_text,
    table_rule,
)
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from bot import campaign as cm
from bot.campaign.report import render_campaign_summary, render_step_report
from bot.core.records import Change, Stop
from bot.forge.memory import MemoryForge

AC_NONE = (("activation_checkpoint", "none"),)
LBS2 = (("training.local_batch_size", 2),)


def run_campaign(
    tmp_path: Path,
    table: dict,
    *,
    script: list[dict],
    base: list[float] = (1000.0, 1010.0),
    budget: float = 1.0,
    text: str | None = None,
    state_kw: dict | None = None,
    **kw,
):
    """Run a whole campaign; returns (state, forge, runner, actions executed in order)."""
    text = text or recipe_text()
    forge = MemoryForge({RECIPE_REL: text})
    runner = FakeRunner(table_rule(table, list(base)))
    actions: list[cm.Action] = []
    driver = make_driver(
        forge,
        runner,
        ScriptedPolicy(script),
        tmp_path / "work",
        on_event=lambda state, action, event: actions.append(action),
        **kw,
    )
    state = driver.start(new_state(text, budget=budget, **(state_kw or {})))
    return state, forge, runner, actions


def statuses(forge: MemoryForge, n: int) -> list[str]:
    branch = forge.find_step("c1", n).branch
    return [state for sha, (state, _) in forge.statuses.items() if sha.startswith(branch + "@")]


def kinds(actions: list, n: int | None = None) -> list[str]:
    return [a.type for a in actions if n is None or getattr(a, "n", None) == n]


# ----------------------------------------------------------------------------- baseline and band
def test_two_baseline_runs_set_the_throughput_band_from_the_floor_when_the_spread_is_small(tmp_path: Path) -> None:
    state, _, runner, actions = run_campaign(tmp_path, {}, script=[])
    assert kinds(actions)[:3] == ["comment", "run_baseline", "run_baseline"]
    assert [r.tps for r in state.baseline] == [1000.0, 1010.0]
    band = state.band
    assert band.spread == pytest.approx(10 / 1005)
    assert band.band == pytest.approx(0.05) == band.floor  # 2 x 1.0% < 5% floor
    summary = render_campaign_summary(state)
    assert "throughput band 5.0% (baseline spread 1.0%)" in summary
    assert "paired A/B, 90% interval, minimum worthwhile gain 5%, at most 4 pairs a step" in summary


def test_band_is_k_times_the_spread_when_that_exceeds_the_floor(tmp_path: Path) -> None:
    state, *_ = run_campaign(tmp_path, {}, script=[], base=[1000.0, 1100.0])
    assert state.band.spread == pytest.approx(100 / 1050)
    assert state.band.band == pytest.approx(2 * 100 / 1050)
    assert "throughput band 19.0% (baseline spread 9.5%)" in render_campaign_summary(state)


def test_with_a_known_run_noise_one_baseline_run_is_the_baseline_and_the_first_trials_first_pair(
    tmp_path: Path,
) -> None:
    # the simulator's profile: its 1.4 % run noise is known, so one baseline run; the band takes the spread two runs
    # would be expected to have (2/sqrt(pi) x 1.4 % = 1.58 %; x2 < the 5 % floor) and that run is pair 1's incumbent side
    prior = {"noise_prior_sd": 0.014, "noise_prior_df": 8, "baseline_runs_wanted": 1}
    state, _, runner, actions = run_campaign(
        tmp_path,
        {AC_NONE: [1100.0, 1104.0, 1098.0]},
        base=[1000.0, 1003.0, 998.0],
        script=[{"lever": "activation_checkpoint", "to": "none"}],
        state_kw={**WITH_TRIAL, **prior},
    )
    assert kinds(actions)[:3] == ["comment", "run_baseline", "calibrate"]
    assert [r.tps for r in state.baseline] == [1000.0]
    assert state.band.spread == pytest.approx(2 / math.sqrt(math.pi) * 0.014) and state.band.band == pytest.approx(0.05)
    first = next(r for r in state.step(1).runs if r.kind == "pair")
    assert first.reused and first.reference_record == state.baseline[0].record
    assert state.step(1).kept and runner.calls[1]["levers"]["activation_checkpoint"] == "none"  # the trial ran second


def test_one_baseline_run_without_a_known_run_noise_is_refused_with_the_field_named() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="baseline_runs_wanted: one baseline run needs a known run noise"):
        new_state(recipe_text(), baseline_runs_wanted=1)
    with pytest.raises(ValidationError, match="baseline_runs_wanted"):
        new_state(recipe_text(), baseline_runs_wanted=1, noise_prior_sd=0.014)  # a prior worth no runs is no prior
    assert cm.ThroughputBand.from_runs([1000.0], k=2.0, floor=0.05).spread == 0.0  # one run, nothing known: the floor


# ----------------------------------------------------------------------------- keep / reject (paired measurement)
def test_a_gain_is_measured_in_pairs_before_it_is_merged(tmp_path: Path) -> None:
    state, forge, runner, actions = run_campaign(
        tmp_path, {AC_NONE: [1200.0, 1190.0]}, script=[{"lever": "activation_checkpoint", "to": "none"}]
    )
    step = state.step(1)
    assert kinds(actions, 1) == [
        "open_step",
        "check_config",
        "run_trial",
        "check_convergence",
        "measure_pair",
        "comment",
        "set_status",
        "merge",
    ]
    pair = next(a for a in actions if a.type == "measure_pair")
    assert (pair.k, pair.order, pair.with_trial) == (1, "AB", False)  # the incumbent first, then the candidate
    assert [c["levers"]["activation_checkpoint"] for c in runner.calls[2:]] == ["none", "full", "none"]  # trial, A, B
    assert [(r.kind, r.tps, r.reference_tps) for r in step.runs] == [("trial", 1200.0, None), ("pair", 1190.0, 1010.0)]
    m = step.measurement
    assert m.decision == "gain" and m.pairs == 1 and m.lo > 0.05 and m.lo < m.estimate < m.hi
    assert step.gain == pytest.approx(1190 / 1010 - 1)  # the paired estimate, not against the old baseline median
    assert step.state == "merged" and step.kept
    assert state.incumbent_step == 1 and state.incumbent_tps == 1190.0  # the low median of the candidate's runs
    assert state.incumbent_levers["activation_checkpoint"] == "none"
    assert "activation_checkpoint: none" in forge.read_file(RECIPE_REL)  # merged into the base branch
    assert forge.statuses[forge.find_step("c1", 1).head_sha][0] == "success"  # also on the merged head
    assert state.phase == "finished" and state.gain == pytest.approx(1190 / 1010 - 1)
    assert state.spent == pytest.approx(sum(c["cost"] for c in runner.calls))  # both runs of the pair are paid for


def test_a_lucky_single_run_not_borne_out_by_the_pairs_is_closed(tmp_path: Path) -> None:
    state, forge, _, actions = run_campaign(
        tmp_path, {AC_NONE: [1200.0, 1000.0]}, script=[{"lever": "activation_checkpoint", "to": "none"}]
    )
    step = state.step(1)
    assert "measure_pair" in kinds(actions, 1) and "merge" not in kinds(actions, 1)
    assert step.state == "closed" and not step.kept
    assert step.measurement.decision in ("no_gain", "undecided") and step.measurement.hi < 0.2
    assert step.close_reason.startswith(("no gain", "undecided"))
    assert forge.find_step("c1", 1).state == "closed"
    assert "activation_checkpoint: full" in forge.read_file(RECIPE_REL)
    assert state.incumbent_step == 0 and state.incumbent_tps == state.baseline_tps


def test_nothing_clears_the_minimum_gain_so_the_recipe_is_kept(tmp_path: Path) -> None:
    script = [{"lever": "activation_checkpoint", "to": "none"}, {"lever": "training.local_batch_size", "to": 2}]
    state, forge, runner, actions = run_campaign(tmp_path, {AC_NONE: [1030.0], LBS2: [990.0]}, script=script)
    one, two = state.steps
    assert [s.state for s in state.steps] == ["closed", "closed"]
    # +2.5% on the trial: could be a gain, so it is paired; the pair's interval lies below the 5% minimum
    assert one.measurement.decision == "no_gain" and one.measurement.pairs >= 1 and one.measurement.hi < 0.05
    # -1.5% on the trial: not clearly slower (inside the 5% throughput band), so it is paired too, and the pair says no
    assert two.measurement.decision == "no_gain" and not two.measurement.cut and two.measurement.pairs >= 1
    assert state.phase == "finished" and state.finish_reason.startswith("policy stopped")
    assert state.incumbent_step == 0 and state.incumbent_levers == state.baseline_levers and state.gain == 0.0
    assert forge.read_file(RECIPE_REL) == recipe_text()
    summary = render_campaign_summary(state)
    assert "the recipe is kept as it was" in summary
    assert "activation_checkpoint" in summary and "training.local_batch_size" in summary and "no gain (1)" in summary


def test_undecided_at_the_pair_cap_is_not_kept_and_says_so(tmp_path: Path) -> None:
    noisy = [1000.0, 1100.0, 980.0, 1120.0, 990.0, 1090.0]  # the candidate swings +-6% around +5%
    state, _, _, actions = run_campaign(
        tmp_path,
        {AC_NONE: noisy},
        script=[{"lever": "activation_checkpoint", "to": "none"}],
        base=[1000.0, 1010.0, 960.0, 1040.0],
        state_kw={"max_pairs": 2},
    )
    step = state.step(1)
    assert kinds(actions, 1).count("measure_pair") == 2
    m = step.measurement
    assert m.decision == "undecided" and m.pairs == 2 and m.lo < 0.05 < m.hi and not step.kept
    assert step.close_reason.startswith("undecided") and "the cap" in m.why
    report = render_step_report(state, step, None, None)
    assert "undecided" in report and "2 pairs" in report and "90% CI" in report


def test_a_futile_step_ends_at_the_allowance_its_policy_gave_it_and_the_campaign_goes_on(tmp_path: Path) -> None:
    # the candidate measures like the incumbent (~0%): each run costs 0.01, the policy allows the step 0.035 --
    # the trial and one pair (3 runs) fit, a second pair (2 more) does not
    flat = [1000.0, 1012.0, 995.0, 1008.0]
    script = [
        {"lever": "activation_checkpoint", "to": "none", "max_device_hours": 0.035},
        {"lever": "training.local_batch_size", "to": 2},
    ]
    state, _, runner, actions = run_campaign(
        tmp_path, {AC_NONE: flat, LBS2: [1200.0, 1190.0]}, script=script, base=[1000.0, 1010.0, 990.0, 1005.0]
    )
    step = state.step(1)
    assert kinds(actions, 1).count("measure_pair") == 1 and not step.kept
    assert sum(r.device_hours for r in step.runs) <= 0.035
    assert step.close_reason.startswith(
        "allowance: the 2 runs (~0.022 device-hours) do not fit the 0.005 left of the 0.035 device-hours"
    )
    assert step.measurement.decision == "undecided" and "allowance ends the pairs" in step.measurement.why
    assert state.step(2).kept  # the campaign went on to the next proposal, and its budget was not touched
    assert state.finish_reason == "policy stopped: script exhausted"


def test_a_step_on_its_way_to_a_gain_is_measured_past_its_allowance(tmp_path: Path) -> None:
    # +5% to +7% against a 5% minimum gain: one pair leaves it undecided but its estimate clears the minimum gain,
    # so the allowance (the trial's run) does not end it
    gainish = [1060.0, 1070.0, 1065.0, 1068.0, 1062.0]
    state, _, _, actions = run_campaign(
        tmp_path,
        {AC_NONE: gainish},
        script=[{"lever": "activation_checkpoint", "to": "none", "max_device_hours": 0.015}],
        base=[1000.0, 1010.0, 1002.0, 1006.0, 1004.0, 1001.0],
    )
    step = state.step(1)
    assert sum(r.device_hours for r in step.runs) > 0.015
    assert kinds(actions, 1).count("measure_pair") >= 2 and not step.close_reason.startswith("allowance")


def test_the_allowance_is_checked_on_the_state_alone_with_the_measured_run_cost() -> None:
    # pure: step_run_fits reads the step's runs, its estimate and the campaign's expected run cost (1.1 x the largest
    # run so far); a trial that looks +20% is on its way to a gain and may go on, one that looks -5% may not
    text = recipe_text()
    change = Change(lever="activation_checkpoint", before="full", after="none", why="t", max_device_hours=0.0275)
    trial = cm.RunRef(kind="trial", n=1, outcome="ok", tps=950.0, device_hours=0.0229)
    step = cm.Step(n=1, change=change, runs=[trial])
    state = new_state(text).model_copy(
        update={
            "baseline": [cm.RunRef(kind="baseline", attempt=1, outcome="ok", tps=1000.0, device_hours=0.0055)],
            "steps": [step],
            "incumbent_tps": 1000.0,
        }
    )
    assert state.expected_run_cost() == pytest.approx(0.0229 * 1.1)
    assert not state.step_run_fits(step, 1)  # 0.0046 left: not even one run
    roomy = step.model_copy(update={"change": change.model_copy(update={"max_device_hours": 0.05})})
    assert state.step_run_fits(roomy, 1) and not state.step_run_fits(roomy, 2)
    assert state.step_run_fits(
        step.model_copy(update={"change": change.model_copy(update={"max_device_hours": None})}), 2
    )
    gaining = step.model_copy(update={"runs": [trial.model_copy(update={"tps": 1200.0})]})
    assert state.step_run_fits(gaining, 2)  # on its way to a gain: measured to its decision


def test_a_pair_is_costed_per_arm_so_a_cold_compile_trial_does_not_price_its_pairs_out() -> None:
    # the trial (a cold compile) cost 4x the incumbent's run; the next pair is its candidate and one incumbent run,
    # not twice the largest run; once a pair of two runs is made, that pair is the estimate
    text = recipe_text()
    change = Change(lever="compile.enable", before=False, after=True, why="t")
    trial = cm.RunRef(kind="trial", n=1, outcome="ok", tps=1100.0, device_hours=0.016)
    one = cm.RunRef(kind="pair", n=1, attempt=1, outcome="ok", tps=1100.0, reference_tps=1000.0, device_hours=0.004)
    step = cm.Step(n=1, change=change, runs=[trial, one])
    base = [cm.RunRef(kind="baseline", attempt=1, outcome="ok", tps=1000.0, device_hours=0.004)]
    state = new_state(text, budget=0.03, pair_with_trial=True).model_copy(
        update={"baseline": base, "steps": [step], "spent": 0.024, "incumbent_tps": 1000.0}
    )
    assert state.pair_runs_cost(step, 1) == pytest.approx(1.1 * 0.004)
    assert state.pair_runs_cost(step, 2) == pytest.approx(1.1 * (0.016 + 0.004))
    assert not state.next_run_fits(2)  # the old estimate: twice the largest run, 0.0352
    assert not state.next_run_fits(2, state.pair_runs_cost(step, 2))  # 0.022 > the 0.006 left
    two = one.model_copy(update={"attempt": 2, "device_hours": 0.0045})
    warm = step.model_copy(update={"runs": [trial, one, two]})
    assert state.pair_runs_cost(warm, 2) == pytest.approx(1.1 * 0.0045)
    assert state.next_run_fits(2, state.pair_runs_cost(warm, 2))


def test_config_gate_reject_closes_the_step_without_a_run(tmp_path: Path) -> None:
    gate = make_gate_config(reject=lambda recipe: recipe.levers.get("activation_checkpoint") == "none")
    state, forge, runner, actions = run_campaign(
        tmp_path, {AC_NONE: [1500.0]}, script=[{"lever": "activation_checkpoint", "to": "none"}], gate_config=gate
    )
    step = state.step(1)
    assert "run_trial" not in kinds(actions) and len(runner.calls) == 2  # the two baseline runs only
    assert step.runs == [] and step.state == "closed"
    assert step.close_reason.startswith("gate (config)") and step.config_verdict.verdict == "reject"
    assert set(statuses(forge, 1)) == {"failure"}  # on the measured head and on the head with the report


def test_convergence_gate_reject_closes_the_step(tmp_path: Path) -> None:
    gate = make_gate_convergence(reject=lambda record: record.levers.get("activation_checkpoint") == "none")
    state, _, runner, actions = run_campaign(
        tmp_path, {AC_NONE: [1500.0]}, script=[{"lever": "activation_checkpoint", "to": "none"}], gate_convergence=gate
    )
    step = state.step(1)
    assert kinds(actions, 1)[:4] == ["open_step", "check_config", "run_trial", "check_convergence"]
    assert "measure_pair" not in kinds(actions) and "merge" not in kinds(actions)
    assert step.state == "closed" and step.close_reason.startswith("gate (convergence)")
    assert step.verdict.stage == "convergence" and not step.verdict.ok
    assert state.incumbent_step == 0


def test_a_failed_trial_closes_the_step(tmp_path: Path) -> None:
    state, *_ = run_campaign(tmp_path, {AC_NONE: "crash"}, script=[{"lever": "activation_checkpoint", "to": "none"}])
    step = state.step(1)
    assert step.state == "closed" and step.close_reason.startswith("trial crash")
    assert [r.kind for r in step.runs] == ["trial"]


@pytest.mark.parametrize("outcome", ["node_fail", "preempted", "pending_timeout", "timeout"])
def test_a_trial_that_slurm_ended_is_a_failed_trial(tmp_path: Path, outcome: str) -> None:
    """Slurm's outcomes (bot/runner/slurm.py) close the step like any failed run: no gate, no merge."""
    state, forge, _, actions = run_campaign(
        tmp_path, {AC_NONE: outcome}, script=[{"lever": "activation_checkpoint", "to": "none"}]
    )
    step = state.step(1)
    assert step.state == "closed" and step.close_reason.startswith(f"trial {outcome}") and not step.kept
    assert "check_convergence" not in kinds(actions, 1) and "merge" not in kinds(actions)
    assert statuses(forge, 1)[-1] == "failure"


def test_a_failing_baseline_finishes_the_campaign(tmp_path: Path) -> None:
    state, _, runner, _ = run_campaign(tmp_path, {(("activation_checkpoint", "full"),): "oom"}, script=[])
    assert state.phase == "finished" and "baseline run failed" in state.finish_reason
    assert len(runner.calls) == 1 and state.steps == []


def test_max_steps_finishes_the_campaign(tmp_path: Path) -> None:
    script = [{"lever": "activation_checkpoint", "to": "none"}, {"lever": "training.local_batch_size", "to": 2}]
    text = recipe_text()
    forge = MemoryForge({RECIPE_REL: text})
    driver = make_driver(forge, FakeRunner(table_rule({}, [1000.0])), ScriptedPolicy(script), tmp_path)
    state = driver.start(new_state(text, max_steps=1))
    assert len(state.steps) == 1 and state.finish_reason == "reached the 1-step limit"


# ----------------------------------------------------------------------------- invariants of the machine
def _after_baseline(tmp_path: Path) -> tuple[cm.Campaign, MemoryForge]:
    text = recipe_text()
    forge = MemoryForge({RECIPE_REL: text})
    driver = make_driver(forge, FakeRunner(table_rule({}, [1000.0, 1010.0])), ScriptedPolicy([]), tmp_path)
    state = new_state(text)
    state, _ = cm.advance(state, cm.CampaignRequested())
    while not isinstance(state.pending[0], cm.Propose):
        state, _ = cm.advance(state, driver.execute(state, state.pending[0]))
    return state, forge


def _change(lever: str = "activation_checkpoint", to="none", before="full") -> Change:
    return Change(lever=lever, before=before, after=to, why="test")


def test_never_two_open_steps(tmp_path: Path) -> None:
    state, _ = _after_baseline(tmp_path)
    state, actions = cm.advance(state, cm.Proposed(decision=_change()))
    assert [a.type for a in actions] == ["open_step"] and state.open_step.n == 1
    with pytest.raises(ValueError, match="still open"):
        cm.advance(state, cm.Proposed(decision=_change("training.local_batch_size", 2, 1)))
    with pytest.raises(ValueError, match="still open"):  # not even a stop may leave a step dangling
        cm.advance(state, cm.Proposed(decision=Stop(why="enough")))
    state, _ = cm.advance(state, cm.StepOpened(n=1, branch="b", head_sha="x"))
    with pytest.raises(ValueError, match="still open"):
        cm.advance(state, cm.Proposed(decision=_change("training.local_batch_size", 2, 1)))


def test_stop_requested_closes_the_open_step_and_finishes(tmp_path: Path) -> None:
    text = recipe_text()
    forge = MemoryForge({RECIPE_REL: text})
    runner = FakeRunner(table_rule({AC_NONE: [1500.0]}, [1000.0, 1010.0]))
    seen: list = []

    def crash_when_open(state, action, event):
        seen.append(action)
        if isinstance(event, cm.StepOpened):
            raise KeyboardInterrupt  # the person hits stop while step 1 is open

    driver = make_driver(
        forge,
        runner,
        ScriptedPolicy([{"lever": "activation_checkpoint", "to": "none"}]),
        tmp_path,
        on_event=crash_when_open,
    )
    with pytest.raises(KeyboardInterrupt):
        driver.start(new_state(text))
    driver2 = make_driver(forge, runner, ScriptedPolicy([]), tmp_path)
    assert driver2.states.load("c1").open_step.state == "open"
    state = driver2.stop("c1", "stop requested by @alice")
    assert state.phase == "finished" and state.finish_reason == "stop requested by @alice"
    assert state.step(1).state == "closed" and state.step(1).runs == [] and state.pending == []
    assert forge.find_step("c1", 1).state == "closed"
    assert len(runner.calls) == 2  # the trial was never started
    assert "finished" in forge.comments[("0", "attune:campaign")]
    # a stop after the end keeps the reason it finished for
    again, actions = cm.advance(state, cm.StopRequested(why="late"))
    assert actions == [] and again.finish_reason == "stop requested by @alice"


def test_stop_before_the_step_is_opened_closes_it_too(tmp_path: Path) -> None:
    state, _ = _after_baseline(tmp_path)
    state, _ = cm.advance(state, cm.Proposed(decision=_change()))
    state, actions = cm.advance(state, cm.StopRequested())
    assert [a.type for a in actions] == ["close", "comment", "finish"] and state.pending == actions
    assert state.phase == "finished"
    state, _ = cm.advance(state, cm.StepClosed(n=1))
    assert state.step(1).state == "closed" and state.open_step is None


def test_budget_added_resumes_a_campaign_that_ran_out(tmp_path: Path) -> None:
    text = recipe_text()
    forge = MemoryForge({RECIPE_REL: text})
    runner = FakeRunner(table_rule({AC_NONE: [1500.0, 1490.0]}, [1000.0, 1010.0]), cost=0.1)
    driver = make_driver(forge, runner, ScriptedPolicy([{"lever": "activation_checkpoint", "to": "none"}]), tmp_path)
    # after the first baseline run (0.1) the rest of the set-up and one trial (~0.11 a run) cannot fit the 0.25
    state = driver.start(new_state(text, budget=0.25))
    assert state.phase == "finished" and state.finish_reason.startswith("budget") and state.steps == []
    assert (
        state.spent == pytest.approx(0.1)
        and "smallest budget that holds them is 0.32 device-hours" in state.finish_reason
    )
    state, actions = cm.advance(state, cm.BudgetAdded(device_hours=0.45))
    # the baseline was not measured before the budget ran out: that comes first
    assert (
        state.budget == pytest.approx(0.7)
        and state.phase == "baseline"
        and [a.type for a in actions] == ["run_baseline"]
    )
    driver.states.save(state)
    state = driver.resume("c1")
    # the second baseline run, then the calibration is left out to fit; the trial (0.1) and one pair (0.2) fit
    assert state.setup_note.endswith("no gate calibration (4 calibration runs left out: tier-R/N steps fail closed)")
    assert state.loss_band is None and state.calibration_note.startswith("no loss band: the budget does not hold")
    assert state.step(1).state == "merged" and state.spent == pytest.approx(0.5) and state.spent <= state.budget
    # budget added to a campaign that finished for another reason changes nothing but the budget
    state2, actions = cm.advance(state, cm.BudgetAdded(device_hours=1.0))
    assert actions == [] and state2.phase == "finished" and state2.budget == pytest.approx(1.7)


def test_budget_added_during_the_baseline_measures_the_rest_of_the_baseline(tmp_path: Path) -> None:
    text = recipe_text()
    forge = MemoryForge({RECIPE_REL: text})
    driver = make_driver(forge, FakeRunner(table_rule({}, [1000.0, 1010.0]), cost=0.1), ScriptedPolicy([]), tmp_path)
    state = driver.start(new_state(text, budget=0.15))
    assert state.phase == "finished" and len(state.baseline) == 1 and state.band is None
    state, actions = cm.advance(state, cm.BudgetAdded(device_hours=0.2))
    assert state.phase == "baseline" and [a.type for a in actions] == ["run_baseline"] and actions[0].attempt == 2
    driver.states.save(state)
    state = driver.resume("c1")
    assert len(state.baseline) == 2 and state.band is not None and state.finish_reason.startswith("policy stopped")


def test_redelivered_campaign_requested_is_a_noop(tmp_path: Path) -> None:
    state = new_state(recipe_text())
    first, actions = cm.advance(state, cm.CampaignRequested())
    assert [a.type for a in actions] == ["comment", "run_baseline"]
    second, again = cm.advance(first, cm.CampaignRequested())
    assert again == [] and second == first
    done, _ = _after_baseline(tmp_path)  # also once the baseline ran (nothing pending but Propose)
    assert cm.advance(done, cm.CampaignRequested()) == (done, [])
    stopped, _ = cm.advance(new_state(recipe_text()), cm.StopRequested())
    assert stopped.phase == "finished"
    assert cm.advance(stopped, cm.CampaignRequested()) == (stopped, [])  # a finished campaign does not restart


def test_redelivered_run_result_is_counted_once(tmp_path: Path) -> None:
    state = new_state(recipe_text())
    state, _ = cm.advance(state, cm.CampaignRequested())
    state, _ = cm.advance(state, cm.Done())
    run = cm.RunRef(kind="baseline", attempt=1, outcome="ok", tps=1000.0, device_hours=0.1)
    state, actions = cm.advance(state, cm.RunFinished(run=run))
    assert [a.type for a in actions] == ["run_baseline"] and state.spent == pytest.approx(0.1)
    again, more = cm.advance(state, cm.RunFinished(run=run))
    assert more == [] and again == state


def test_advance_is_pure(tmp_path: Path) -> None:
    state, _ = _after_baseline(tmp_path)
    before = state.model_dump()
    cm.advance(state, cm.Proposed(decision=_change()))
    assert state.model_dump() == before


def test_budget_check_uses_the_estimate_before_any_run() -> None:
    state = new_state(recipe_text(), budget=0.05, run_cost_estimate=0.1)
    state, actions = cm.advance(state, cm.CampaignRequested())
    assert [a.type for a in actions] == ["comment", "comment", "finish"] and state.finish_reason.startswith("budget")
    zero = new_state(recipe_text(), budget=0.0)
    zero, actions = cm.advance(zero, cm.CampaignRequested())
    assert "run_baseline" not in [a.type for a in actions]  # nothing left: not even a first run


# ----------------------------------------------------------------------------- budget (property)
BUDGET_SCRIPT = [
    {"lever": "activation_checkpoint", "to": "none"},
    {"lever": "training.local_batch_size", "to": 2},
    {"lever": "loss.num_chunks", "to": 4},
    {"lever": "training.gc_freq", "to": 10},
    {"lever": "optimizer.implementation", "to": "foreach"},
    {"lever": "training.local_batch_size", "to": 4},
]
BUDGET_TABLE = {
    AC_NONE: [1300.0, 1290.0],
    LBS2: [1400.0, 1000.0],
    (("loss.num_chunks", 4),): "oom",
    (("training.local_batch_size", 4),): [1500.0, 1490.0],
}


class CheckedRunner(FakeRunner):
    """Before every run, checks the saved state: the run's expected cost fits what is left."""

    def __init__(self, driver_ref: list, costs: list[float]) -> None:
        super().__init__(table_rule(BUDGET_TABLE, [1000.0, 1010.0]), cost=lambda i: costs[i % len(costs)])
        self.driver_ref = driver_ref
        self.expected: list[float] = []

    def run(self, recipe, **kw):
        state = self.driver_ref[0].states.load("c1")
        expected = fits = state.expected_run_cost()
        pair = re.fullmatch(r"step-(\d+)-pair(\d+)-(incumbent|candidate)", Path(kw["out_dir"]).name)
        if pair:  # a pair is costed per arm, as a whole, before its first run: each arm at least 1.1 x a run so far
            n, k, arm = int(pair[1]), int(pair[2]), pair[3]
            other = "candidate" if arm == "incumbent" else "incumbent"
            expected = 1.1 * min(c["cost"] for c in self.calls)
            if self.calls and Path(self.calls[-1]["out_dir"]).name == f"step-{n}-pair{k}-{other}":
                fits = 0.0  # the pair's second run, started with its first under one check
            else:
                fits = (1 if state.pair_with_trial and k == 1 else 2) * expected
        assert state.spent + fits <= state.budget + 1e-12, "a run was started whose expected cost does not fit"
        assert expected > 0 or state.spent < state.budget
        self.expected.append(expected)
        return super().run(recipe, **kw)


def _budget_campaign(costs: list[float], budget: float, estimate: float = 0.0):
    import tempfile

    text = recipe_text()
    driver_ref: list = []
    runner = CheckedRunner(driver_ref, costs)
    with tempfile.TemporaryDirectory() as tmp:
        driver = make_driver(MemoryForge({RECIPE_REL: text}), runner, ScriptedPolicy(BUDGET_SCRIPT), Path(tmp))
        driver_ref.append(driver)
        state = driver.start(new_state(text, budget=budget, run_cost_estimate=estimate))
    return state, runner


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(costs=st.lists(st.floats(0.001, 0.2), min_size=1, max_size=12), budget=st.floats(0.0, 1.5))
@example(costs=[0.1875, 0.1875, 0.0625, 0.03125, 0.125, 0.125, 0.125, 0.0625, 0.0625], budget=1.125)
def test_budget_is_never_exceeded(costs: list[float], budget: float) -> None:
    state, runner = _budget_campaign(costs, budget)
    spent = [c["cost"] for c in runner.calls]
    assert state.spent == pytest.approx(sum(spent))
    assert state.phase == "finished" and state.pending == []
    if runner.calls:
        # every run started only when spent-so-far + its expected cost fitted, and a run that costs more than
        # expected is stopped at the cap (what is left): spending never passes the budget
        assert state.spent <= budget + 1e-9
        capped = [c for c in runner.calls if c["outcome"] == "timeout"]
        assert len(capped) <= 1 and (not capped or capped[-1] is runner.calls[-1])  # a capped run is the last one
    else:
        assert budget == 0.0


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cost=st.floats(0.001, 0.2), budget=st.floats(0.0, 1.5))
def test_budget_is_never_exceeded_when_runs_cost_what_was_expected(cost: float, budget: float) -> None:
    state, runner = _budget_campaign([cost], budget, estimate=cost)
    assert state.spent <= budget
    assert all(c["cost"] <= e for c, e in zip(runner.calls, runner.expected, strict=True))
    if budget >= 2 * 1.1 * cost + cost:  # room for the baseline and at least one trial
        assert state.steps


def _drifting_campaign(tmp_path: Path) -> tuple[cm.Campaign, FakeRunner]:
    """The machine gets 30% faster after the baseline; the candidate is really no faster than the incumbent."""
    text = recipe_text()

    def drift(eff, nth, calls=[0]):  # noqa: B006 - the call counter is the machine's clock
        calls[0] += 1
        return "ok", 1000.0 if calls[0] <= 2 else 1300.0

    runner = FakeRunner(drift)
    driver = make_driver(
        MemoryForge({RECIPE_REL: text}),
        runner,
        ScriptedPolicy([{"lever": "activation_checkpoint", "to": "none"}]),
        tmp_path,
    )
    return driver.start(new_state(text)), runner


def test_pairs_do_not_let_a_drifting_machine_fake_a_gain(tmp_path: Path) -> None:
    state, runner = _drifting_campaign(tmp_path)
    step = state.step(1)
    pair = next(r for r in step.runs if r.kind == "pair")
    assert pair.reference_tps == 1300.0 and pair.reference_record.endswith("step-1-pair1-incumbent/record.json")
    assert pair.record.endswith("step-1-pair1-candidate/record.json")
    assert not step.kept and step.gain == pytest.approx(0.0) and step.measurement.decision == "no_gain"
    assert runner.calls[3]["levers"] == state.baseline_levers  # baseline x2, trial, then the pair: incumbent first
    assert state.spent == pytest.approx(sum(c["cost"] for c in runner.calls))  # the pair is paid for


def test_a_warm_up_run_is_made_and_reported_but_not_counted(tmp_path: Path) -> None:
    text = recipe_text()
    runner = FakeRunner(table_rule({}, [600.0, 1000.0, 1010.0]))  # the first run after idle is slow
    driver = make_driver(MemoryForge({RECIPE_REL: text}), runner, ScriptedPolicy([]), tmp_path)
    state = driver.start(new_state(text, baseline_warmup_runs=1))
    assert [r.tps for r in state.baseline] == [600.0, 1000.0, 1010.0] and len(runner.calls) == 3
    assert state.baseline_tps == pytest.approx(1005.0) and state.band.spread == pytest.approx(10 / 1005)
    assert state.spent == pytest.approx(0.03)  # the warm-up run is paid for
    assert "warm-up run 600 not counted" in render_campaign_summary(state)


def test_the_campaign_gain_compounds_the_paired_step_gains(tmp_path: Path) -> None:
    # drift: the machine speeds up after the baseline; the pair keeps the step's gain honest, and so the headline
    text = recipe_text()

    def rule(eff, nth, calls=[0]):  # noqa: B006 - the machine's clock
        calls[0] += 1
        if calls[0] <= 2:
            return "ok", 1000.0  # the baseline, before the machine sped up
        return "ok", 1500.0 if eff["activation_checkpoint"] == "none" else 1250.0

    runner = FakeRunner(rule)
    driver = make_driver(
        MemoryForge({RECIPE_REL: text}),
        runner,
        ScriptedPolicy([{"lever": "activation_checkpoint", "to": "none"}]),
        tmp_path,
    )
    state = driver.start(new_state(text))
    assert state.step(1).kept and state.step(1).gain == pytest.approx(0.2)
    assert state.incumbent_tps == 1500.0 and state.gain == pytest.approx(0.2)  # not 1500 / 1000 - 1 = +50%


# ----------------------------------------------------------------------------- measurement economy (per machine)
WITH_TRIAL = {"pair_with_trial": True, "min_gain": 0.01, "max_pairs": 6}


def _calibration_with_runs(recipe_text, reference):
    return cm.Calibrated(note="test: calibration runs made", device_hours=0.001)


def test_with_the_trial_as_pair_one_only_the_incumbent_runs_and_pairs_alternate_abba(tmp_path: Path) -> None:
    # +4% +- 1%: pairs go on until the interval clears 1% (the sim's minimum gain); calibration runs ran between the
    # baseline and the trial, so the last baseline run is not the run right before the trial
    cand = [1040.0, 1052.0, 1045.0, 1038.0, 1050.0, 1043.0, 1047.0, 1041.0, 1049.0]
    state, _, runner, actions = run_campaign(
        tmp_path,
        {AC_NONE: cand},
        script=[{"lever": "activation_checkpoint", "to": "none"}],
        base=[1000.0, 1008.0, 995.0, 1004.0, 1001.0, 998.0, 1006.0],
        state_kw=WITH_TRIAL,
        calibrate=_calibration_with_runs,
    )
    pairs = [a for a in actions if a.type == "measure_pair"]
    assert len(pairs) >= 2
    assert [(p.k, p.order, p.with_trial) for p in pairs] == [
        (k, "BA" if k % 2 else "AB", k == 1) for k in range(1, len(pairs) + 1)
    ]
    levers = [c["levers"]["activation_checkpoint"] for c in runner.calls[2:]]
    # trial (B), pair 1's incumbent (A) | A B | B A ...: ABBA across pairs, one run saved on pair 1
    assert levers[:4] == ["none", "full", "full", "none"]
    step = state.step(1)
    first = next(r for r in step.runs if r.kind == "pair")
    assert (
        first.record == step.runs[0].record and first.device_hours == pytest.approx(0.01) and not first.reused
    )  # the trial is not paid twice
    assert step.kept and step.measurement.decision == "gain" and step.measurement.lo > 0.01
    assert len(runner.calls) == 2 + 1 + 1 + 2 * (step.measurement.pairs - 1)


def test_the_incumbent_run_right_before_a_trial_is_its_first_pair_and_the_pairs_go_on_abba(tmp_path: Path) -> None:
    # nothing ran between the last baseline run and the trial: they are pair 1 (AB); no incumbent run is made for it
    cand = [1040.0, 1052.0, 1045.0, 1038.0, 1050.0, 1043.0, 1047.0, 1041.0, 1049.0]
    state, _, runner, actions = run_campaign(
        tmp_path,
        {AC_NONE: cand},
        script=[{"lever": "activation_checkpoint", "to": "none"}],
        base=[1000.0, 1008.0, 995.0, 1004.0, 1001.0, 998.0, 1006.0],
        state_kw=WITH_TRIAL,
    )
    step = state.step(1)
    first = next(r for r in step.runs if r.kind == "pair")
    assert first.reused and first.order == "AB" and first.device_hours == 0.0
    assert first.record == step.runs[0].record and first.reference_record == state.baseline[-1].record
    assert (first.tps, first.reference_tps) == (1040.0, 1008.0)
    pairs = [a for a in actions if a.type == "measure_pair"]  # the pairs that made runs: 2, 3, ... in BA, AB, ... order
    assert [(p.k, p.order, p.with_trial) for p in pairs] == [
        (k, "BA" if k % 2 == 0 else "AB", False) for k in range(2, len(pairs) + 2)
    ]
    levers = [c["levers"]["activation_checkpoint"] for c in runner.calls]
    assert levers[:5] == ["full", "full", "none", "none", "full"]  # A A(last baseline) B(trial) | B A | ...
    assert step.kept and len(runner.calls) == 2 + 1 + 2 * (step.measurement.pairs - 1)
    assert state.spent == pytest.approx(sum(c["cost"] for c in runner.calls))  # only the runs made are paid for


def test_a_kept_steps_candidate_run_made_last_is_the_next_trials_first_pair(tmp_path: Path) -> None:
    # step 1 (+20%) is decided on its reused pair 1 (AB: its trial, the candidate, ran last) and kept: that trial is
    # a run of the new incumbent right before step 2's trial, so it is step 2's pair 1 incumbent side
    script = [{"lever": "activation_checkpoint", "to": "none"}, {"lever": "training.local_batch_size", "to": 2}]
    both = (("activation_checkpoint", "none"), ("training.local_batch_size", 2))
    state, _, runner, _ = run_campaign(
        tmp_path,
        {both: [1500.0, 1505.0, 1495.0], AC_NONE: [1200.0, 1205.0, 1195.0]},
        script=script,
        base=[1000.0, 1008.0, 995.0, 1004.0],
        state_kw={**WITH_TRIAL, "baseline_runs_wanted": 4},
    )
    s1, s2 = state.step(1), state.step(2)
    assert s1.kept and [(r.kind, r.order, r.reused) for r in s1.runs] == [("trial", "", False), ("pair", "AB", True)]
    assert s2.kept and [(r.kind, r.order, r.reused) for r in s2.runs] == [("trial", "", False), ("pair", "AB", True)]
    assert s2.runs[1].reference_record == s1.runs[0].record and s2.runs[1].reference_tps == 1200.0
    assert len(runner.calls) == 4 + 1 + 1  # the baseline and two trials: nothing was run twice
    assert state.gain == pytest.approx((1200 / 1004) * (1500 / 1200) - 1)


def test_a_closed_steps_incumbent_run_made_last_is_the_next_trials_first_pair(tmp_path: Path) -> None:
    # step 1 (~0%) ends after a fresh pair in BA order (its incumbent ran last) and is closed: that incumbent run is
    # right before step 2's trial
    script = [{"lever": "activation_checkpoint", "to": "none"}, {"lever": "training.local_batch_size", "to": 2}]
    # pair 1 (the reused baseline run, AB) leaves +0.5% undecided against 1%; pair 2 (BA) decides no gain
    state, _, _, _ = run_campaign(
        tmp_path,
        {AC_NONE: [1007.0, 1000.0, 1001.0, 1000.0], LBS2: [1300.0, 1305.0]},
        script=script,
        base=[1000.0, 1004.0, 998.0, 1002.0, 1003.0, 1001.0],
        state_kw={**WITH_TRIAL, "baseline_runs_wanted": 4},
    )
    s1, s2 = state.step(1), state.step(2)
    assert not s1.kept and s1.runs[-1].kind == "pair" and s1.runs[-1].order == "BA", s1.runs
    first2 = next(r for r in s2.runs if r.kind == "pair")
    assert first2.reused and first2.reference_record == s1.runs[-1].reference_record and s2.kept


def test_a_rejected_trial_right_before_is_never_an_incumbent_run(tmp_path: Path) -> None:
    # step 1's trial is cut (clearly slower): it ran last, so step 2's pair 1 runs the incumbent afresh
    script = [{"lever": "activation_checkpoint", "to": "none"}, {"lever": "training.local_batch_size", "to": 2}]
    state, _, _, _ = run_campaign(
        tmp_path,
        {AC_NONE: [500.0], LBS2: [1040.0, 1052.0, 1045.0, 1038.0, 1050.0]},
        script=script,
        base=[1000.0, 1008.0, 995.0, 1004.0, 1001.0, 998.0, 1006.0],
        state_kw=WITH_TRIAL,
    )
    assert state.step(1).measurement.cut and [r.kind for r in state.step(1).runs] == ["trial"]
    first2 = next(r for r in state.step(2).runs if r.kind == "pair")
    assert not first2.reused and first2.order == "BA" and first2.device_hours > 0


def test_a_clearly_slower_trial_is_stopped_early_and_closed_with_what_it_measured(tmp_path: Path) -> None:
    script = [{"lever": "activation_checkpoint", "to": "none"}, {"lever": "training.local_batch_size", "to": 2}]
    state, _, runner, _ = run_campaign(
        tmp_path, {AC_NONE: [900.0], LBS2: [990.0]}, script=script, state_kw={"early_stop": True}
    )
    trial_calls = [c for c in runner.calls if c["early_stop"] is not None]
    assert len(trial_calls) == 2  # trials only, never a baseline or pair run
    assert trial_calls[0]["early_stop"].below_tps == pytest.approx(1005 * (1 - 0.05))  # the incumbent less the band
    one, two = state.step(1), state.step(2)
    assert one.runs[0].outcome == "stopped" and one.state == "closed" and not one.kept
    assert one.gain == pytest.approx(900 / 1005 - 1) and one.close_reason.startswith("no gain: stopped early")
    assert one.measurement.decision == "no_gain" and one.measurement.cut
    assert one.runs[0].device_hours == pytest.approx(0.01 / 3)
    assert two.runs[0].outcome == "ok" and two.close_reason.startswith(
        "no gain"
    )  # -1.5%: not clearly slower, measured on
    # off by default: every trial runs to its end
    _, _, runner, _ = run_campaign(tmp_path / "b", {AC_NONE: [900.0]}, script=script[:1])
    assert all(c["early_stop"] is None for c in runner.calls)


def test_an_enabler_is_gated_but_not_run_and_the_change_it_enables_is_measured_on_it(tmp_path: Path) -> None:
    script = [
        {"lever": "training.local_batch_size", "to": 2, "enabler": True},
        {"lever": "activation_checkpoint", "to": "none", "stacked_on": 1},
    ]
    state, _, runner, actions = run_campaign(tmp_path, {AC_NONE + LBS2: [1300.0, 1290.0]}, script=script)
    one, two = state.step(1), state.step(2)
    assert kinds(actions, 1) == ["open_step", "check_config", "comment", "set_status", "close"]
    assert one.runs == [] and one.state == "closed" and one.close_reason.startswith("enabler: not run on its own")
    assert len(runner.calls) == 2 + 3  # two baseline runs, then the enabled change's trial and one pair only
    assert two.kept and two.levers["training.local_batch_size"] == 2 and two.levers["activation_checkpoint"] == "none"
    assert "not run: an enabler" in render_step_report(state, one, None, None)


def test_a_change_predicted_slower_closes_with_no_gain_and_costs_nothing(tmp_path: Path) -> None:
    """The policy's speed screen proposes a layout it predicts slower than the incumbent with that prediction: the
    step is gated, closed with no gain and no run (no device-hours, no trial record), and the next step runs."""
    why = "predicted slower: the analytic cost model puts this layout at 12.00 s a step against the incumbent's 10.00 s, 17% fewer tokens/s"
    script = [
        {"lever": "activation_checkpoint", "to": "none", "predicted_slower": why},
        {"lever": "training.local_batch_size", "to": 2},
    ]
    state, _, runner, actions = run_campaign(tmp_path, {LBS2: [1300.0, 1290.0]}, script=script)
    one, two = state.step(1), state.step(2)
    assert kinds(actions, 1) == ["open_step", "check_config", "comment", "set_status", "close"]
    assert one.runs == [] and one.state == "closed" and not one.kept and one.gain is None
    assert one.close_reason == f"no gain (predicted, not run): {why}"
    assert len(runner.calls) == 2 + 3  # two baseline runs, then step 2's trial and one pair: nothing for step 1
    assert two.kept and state.incumbent_step == 2
    assert state.spent == pytest.approx(sum(r.device_hours for r in [*state.baseline, *two.runs]))
    assert f"not run: {why}" in render_step_report(state, one, None, None)


def test_a_change_predicted_to_run_out_of_memory_is_an_oom_trial_that_costs_nothing(tmp_path: Path) -> None:
    """The policy's memory screen proposes a layout it predicts cannot fit with that prediction: the step is gated,
    recorded as an out-of-memory trial without a run (no device-hours), closed, and a retry stacked on it runs."""
    why = "predicted to run out of memory: 120 GiB (the measured 60 GiB x the memory model's 2.00) is over the device's 80 GiB by more than 25%"
    script = [
        {"lever": "activation_checkpoint", "to": "none", "predicted_oom": why},
        {"lever": "training.local_batch_size", "to": 2, "stacked_on": 1},
    ]
    state, _, runner, actions = run_campaign(tmp_path, {AC_NONE + LBS2: [1300.0, 1290.0]}, script=script)
    one, two = state.step(1), state.step(2)
    assert kinds(actions, 1) == ["open_step", "check_config", "comment", "set_status", "close"]
    assert [(r.kind, r.outcome, r.device_hours, r.record) for r in one.runs] == [("trial", "oom", 0.0, "")]
    assert one.state == "closed" and not one.kept and one.close_reason == f"trial oom (predicted, not run): {why}"
    assert len(runner.calls) == 2 + 3  # two baseline runs, then the retry's trial and one pair: nothing for step 1
    assert two.kept and two.levers["activation_checkpoint"] == "none"
    assert state.spent == pytest.approx(sum(r.device_hours for r in [*state.baseline, *two.runs]))
    assert "predicted" in render_step_report(state, one, None, None)


def test_measurement_options_are_validated_and_the_bound_is_never_negative() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        new_state(recipe_text(), confidence=0.3)  # an interval that covers less than half the time decides nothing
    with pytest.raises(ValidationError):
        new_state(recipe_text(), max_pairs=0)
    state = new_state(recipe_text(), early_stop=True)
    assert state.early_stop_bound() is None  # no incumbent measured yet
    wide = state.model_copy(
        update={"incumbent_tps": 1000.0, "band": cm.ThroughputBand.from_runs([1000.0, 1800.0], k=2.0, floor=0.05)}
    )
    assert wide.early_stop_bound() is None
    narrow = state.model_copy(
        update={"incumbent_tps": 1000.0, "band": cm.ThroughputBand.from_runs([1000.0, 1010.0], k=2.0, floor=0.05)}
    )
    assert narrow.early_stop_bound() == pytest.approx(950.0)
    assert narrow.model_copy(update={"early_stop_k": 2.0}).early_stop_bound() == pytest.approx(900.0)


@pytest.mark.parametrize("pair_with_trial", [True, False])
def test_the_expected_run_cost_counts_a_pair_per_run_made_for_it(pair_with_trial: bool) -> None:
    """Every run costs 1.0: a pair's record holds two runs (one where the trial was its candidate, none where it
    reused the run before), so the next run is still expected at 1.1, not at the 2.0 of a whole pair."""
    state = new_state(recipe_text(), pair_with_trial=pair_with_trial)
    first = 1.0 if pair_with_trial else 2.0
    runs = [
        cm.RunRef(kind="trial", n=1, outcome="ok", device_hours=1.0),
        cm.RunRef(kind="pair", n=1, attempt=1, outcome="ok", device_hours=first),
        cm.RunRef(kind="pair", n=1, attempt=2, outcome="ok", device_hours=2.0),
        cm.RunRef(kind="pair", n=1, attempt=1, outcome="ok", device_hours=0.0, reused=True),
    ]
    step = cm.Step(n=1, change=Change(lever="training.local_batch_size", before=1, after=2), runs=runs)
    state = state.model_copy(
        update={"baseline": [cm.RunRef(kind="baseline", outcome="ok", device_hours=1.0)], "steps": [step]}
    )
    assert state.expected_run_cost() == pytest.approx(1.1)
    assert [state.per_run(r) for r in runs] == pytest.approx([1.0, 1.0, 1.0, 0.0])
