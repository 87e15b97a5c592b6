"""bot/drive/executor.py: the one executor with local ports on a real git forge — crash at every transition, resume, same decisions.

A short campaign (fake runner, LocalForge on a tmp git repository, the real finish hook): step 1 wins
and is merged, step 2 runs out of memory, step 3 retries step 2's layout with recomputation and
brings no gain. For every transition index k the driver crashes (after saving the state, and — the
harder case — after carrying out the action but before saving), a fresh driver resumes, and the
outcome must equal the uninterrupted run: same decisions, one branch per step number, no run
repeated, no record lost, no duplicate commit.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from campaign_fakes import (
    RECIPE_REL,
    FakeRunner,
    ScriptedPolicy,
    decisions,
    git,
    make_driver,
    make_repo,
    new_state,
    recipe_text,
)

from bot import campaign as cm
from bot.drive.local import finish_local
from bot.drive.local_ports import FileStateStore
from bot.forge.local import LocalForge

SCRIPT = [
    {"lever": "activation_checkpoint", "to": "none"},
    {"lever": "training.local_batch_size", "to": 2},
    {"lever": "activation_checkpoint", "to": "selective", "stacked_on": 2},
]


def rule(eff, nth):
    if eff["training.local_batch_size"] == 2 and eff["activation_checkpoint"] == "none":
        return "oom", None
    if eff["training.local_batch_size"] == 2:
        return "ok", 1150.0
    if eff["activation_checkpoint"] == "none":
        return "ok", [1200.0, 1190.0][min(nth, 1)]
    return "ok", [1000.0, 1010.0][min(nth, 1)]


class Crash(Exception):
    pass


class CrashBeforeSave(FileStateStore):
    """A state store that crashes on the k-th save: the action was carried out, the state that records it was not saved."""

    def __init__(self, work_dir: Path, *, crash_at: int) -> None:
        super().__init__(work_dir)
        self.crash_at, self.saves = crash_at, 0

    def save(self, state) -> None:
        self.saves += 1
        if self.saves == self.crash_at:
            raise Crash(f"crash before save {self.saves}")
        super().save(state)


def crash_after(k: int):
    """An ``on_event`` hook that crashes after the k-th transition (its state saved)."""
    seen = [0]

    def on_event(state, action, event) -> None:
        seen[0] += 1
        if seen[0] >= k:
            raise RuntimeError(f"test crash after {seen[0]} transitions")

    return on_event


class Calibrations:
    """A fake loss-band calibration that costs device-hours and counts how often it is paid for."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, recipe_text: str, reference) -> cm.Calibrated:
        self.calls += 1
        return cm.Calibrated(device_hours=0.05, note=f"test band for {reference.run_id}")


def drivers(repo: Path, runner: FakeRunner, **kw):
    calibrate = getattr(runner, "calibrations", None) or Calibrations()
    runner.calibrations = calibrate
    return make_driver(
        LocalForge(repo),
        runner,
        ScriptedPolicy(SCRIPT),
        repo / ".attune" / "campaigns",
        finish_hook=finish_local,
        calibrate=calibrate,
        **kw,
    )


def forge_facts(repo: Path) -> dict:
    """What the forge holds: branch names, and the commit subjects of the base branch and of every step branch."""
    branches = git(repo, "for-each-ref", "--format=%(refname:short)", "refs/heads/attune/").split()
    return {
        "branches": sorted(branches),
        # commit subjects as multisets (commits made within one second have no stable log order)
        "main": sorted(git(repo, "log", "--format=%s", "main").splitlines()),
        **{b: sorted(git(repo, "log", "--format=%s", f"main..{b}").splitlines()) for b in branches},
        "results": sorted(p.parent.name for p in (repo / "results").rglob("*.json")),
    }


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_repo(tmp_path_factory.mktemp("template") / "repo", recipe_text())


@pytest.fixture(scope="module")
def reference(template: Path, tmp_path_factory: pytest.TempPathFactory):
    repo = tmp_path_factory.mktemp("reference") / "repo"
    shutil.copytree(template, repo)
    runner = FakeRunner(rule)
    driver = drivers(repo, runner)
    state = driver.start(new_state(recipe_text()))
    return state, driver.transitions, forge_facts(repo), runner


def test_the_uninterrupted_campaign(reference) -> None:
    state, transitions, facts, runner = reference
    assert [(s.n, s.state, s.kept) for s in state.steps] == [
        (1, "merged", True),
        (2, "closed", False),
        (3, "closed", False),
    ]
    assert state.step(2).runs[0].outcome == "oom" and state.step(3).stacked_on == 2
    assert (
        state.step(3).levers["training.local_batch_size"] == 2
        and state.step(3).levers["activation_checkpoint"] == "selective"
    )
    assert state.finish_reason == "policy stopped: script exhausted" and state.pending == []
    assert (
        len(runner.calls) == 9
    )  # 2 baseline + trial and one pair (2 runs) + trial (oom) + trial and one pair (-3.4%: inside the throughput band)
    assert facts["branches"] == [
        "attune/c1/1-activation_checkpoint",
        "attune/c1/2-training-local_batch_size",
        "attune/c1/3-activation_checkpoint",
    ]
    assert any(line.startswith("attune: campaign c1 finished") for line in facts["main"])
    assert runner.calibrations.calls == 1 and state.calibrated and state.calibration_note.startswith("test band")
    assert state.spent == pytest.approx(
        sum(r.device_hours for r in [*state.baseline, *(r for s in state.steps for r in s.runs)]) + 0.05
    )
    assert transitions == 32


def _check_same(repo: Path, state, reference, runner: FakeRunner) -> None:
    ref_state, _, ref_facts, _ = reference
    assert decisions(state) == decisions(ref_state)
    facts = forge_facts(repo)
    numbers = [b.rsplit("/", 1)[1].split("-", 1)[0] for b in facts["branches"]]
    assert sorted(numbers) == ["1", "2", "3"]  # one branch per step number: none opened twice
    assert facts == ref_facts  # the same commits, none duplicated by a re-executed action
    out_dirs = [c["out_dir"] for c in runner.calls]
    assert len(out_dirs) == len(set(out_dirs)) == 9  # a resumed driver never repeats a finished run
    for out in out_dirs:
        assert (Path(out) / "record.json").is_file()
    for run in [*state.baseline, *(r for s in state.steps for r in s.runs)]:
        assert Path(run.record).is_file()
    assert runner.calibrations.calls == 1  # the loss band is paid for once, whatever crashed around it


def _transition_indices() -> list[int]:
    return list(range(1, 33))


@pytest.mark.parametrize("k", _transition_indices())
def test_crash_after_transition_k_then_resume(k: int, template: Path, reference, tmp_path: Path) -> None:
    total = reference[1]
    if k > total:
        pytest.skip(f"the campaign has {total} transitions")
    repo = tmp_path / "repo"
    shutil.copytree(template, repo)
    runner = FakeRunner(rule)
    with pytest.raises(RuntimeError, match="test crash"):
        drivers(repo, runner, on_event=crash_after(k)).start(new_state(recipe_text()))
    state = drivers(repo, runner).resume("c1")
    _check_same(repo, state, reference, runner)


@pytest.mark.parametrize("k", _transition_indices())
def test_crash_after_the_action_before_saving_then_resume(k: int, template: Path, reference, tmp_path: Path) -> None:
    total = reference[1]
    if k > total:
        pytest.skip(f"the campaign has {total} transitions")
    repo = tmp_path / "repo"
    shutil.copytree(template, repo)
    runner = FakeRunner(rule)
    with pytest.raises(Crash):
        drivers(repo, runner, states=CrashBeforeSave(repo / ".attune" / "campaigns", crash_at=k + 1)).start(
            new_state(recipe_text())
        )  # save 1 is the request
    state = drivers(repo, runner).resume("c1")
    _check_same(repo, state, reference, runner)


def test_transition_indices_cover_the_campaign(reference) -> None:
    assert reference[1] <= len(_transition_indices()), "raise the range: every transition index must be crashed at"


def test_start_on_an_existing_campaign_resumes_it(template: Path, reference, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(template, repo)
    runner = FakeRunner(rule)
    with pytest.raises(RuntimeError):
        drivers(repo, runner, on_event=crash_after(10)).start(new_state(recipe_text()))
    state = drivers(repo, runner).start(new_state(recipe_text()))  # a re-run of the same command
    _check_same(repo, state, reference, runner)


def test_step_records_and_reports_are_on_the_branches(reference, template: Path, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(template, repo)
    forge = LocalForge(repo)
    state = drivers(repo, FakeRunner(rule)).start(new_state(recipe_text()))
    for s in state.steps:
        files = git(repo, "ls-tree", "-r", "--name-only", s.branch).split()
        assert f"campaigns/c1/step-{s.n}/trial.json" in files and f"campaigns/c1/step-{s.n}/report.md" in files
        diff = git(repo, "diff", "--numstat", f"{s.branch}~0", "main", "--", RECIPE_REL)
        assert diff or s.kept  # a closed step's recipe differs from the base
    merged = git(repo, "ls-tree", "-r", "--name-only", "main")
    assert "campaigns/c1/step-1/pair1-candidate.json" in merged and "campaigns/c1/step-1/pair1-incumbent.json" in merged
    assert "campaigns/c1/step-2/CLOSED.md" in git(repo, "ls-tree", "-r", "--name-only", state.step(2).branch)
    # results/ holds the kept step's confirmed (slower) measurement only
    results = list((repo / "results").rglob("*.json"))
    assert len(results) == 1 and '"tps_median": 1190.0' in results[0].read_text()
    assert forge.status_of(git(repo, "rev-parse", state.step(1).branch).strip())["state"] == "success"
    assert (repo / "leaderboard.md").read_text().count("1,190") == 1


def test_runs_that_are_only_measured_stop_after_the_measurement_window(tmp_path: Path) -> None:
    """A simulated campaign measures every run over the same window (``measure_steps`` after the warm-up): a pair's
    runs and a repeat baseline run stop there, the runs the gate reads (the first baseline run, trials) run the
    recipe's ``bench.steps``, and every run's tokens/s is the window's median, a trial's included. (The simulator's
    known run noise makes one baseline run enough there; a campaign that measures more stops its repeats early too.)"""
    from bot.bench.tuners import BUDGET_RUNS, run_campaign
    from bot.campaign.measure import measured_only_steps
    from bot.campaign.measurement_settings import SIM_MEASURE_STEPS
    from bot.core.recipe import load_recipe
    from bot.core.state import window_median
    from bot.drive.local_ports import FileRecordStore
    from bot.runner.sim import SimRunner

    # GLM-4.5's optimum has two steps of about +2.5 %: at the simulator's 1.4 % run noise each takes fresh pairs
    path = Path(__file__).resolve().parents[2] / "bot/bench/tasks/glm-4.5/h100x128.yaml"
    recipe = load_recipe(path)
    cost = SimRunner(seed=0).run(recipe).summary.device_hours
    state = run_campaign(path, "heuristic", 0, BUDGET_RUNS * cost, tmp_path)
    records = FileRecordStore(tmp_path)
    warm, full = recipe.bench.warmup_steps, recipe.bench.steps
    assert state.measure_steps == SIM_MEASURE_STEPS
    window = (warm, warm + SIM_MEASURE_STEPS)

    def check(ref_record: str, tps: float | None, steps: int) -> None:
        record = records.read(ref_record)
        assert record is not None and len(record.steps) == steps
        assert tps == window_median(record.steps, *window)
        if steps == full:  # a full run's tokens/s is the window's, not the median of all its steps
            assert tps != record.summary.tps_median

    check(state.baseline[0].record, state.baseline[0].tps, full)
    assert len(state.baseline) == state.baseline_runs_wanted == 1
    assert measured_only_steps(state, recipe, "baseline", 1) is None
    assert measured_only_steps(state, recipe, "baseline", 2) == warm + SIM_MEASURE_STEPS
    pairs = [r for st in state.steps for r in st.runs if r.kind == "pair" and r.outcome == "ok" and not r.reused]
    trials = [r for st in state.steps for r in st.runs if r.kind == "trial" and r.outcome == "ok"]
    assert pairs and trials
    for r in trials:
        check(r.record, r.tps, full)
    for r in pairs:
        check(r.reference_record, r.reference_tps, warm + SIM_MEASURE_STEPS)
        if r.record not in {t.record for t in trials}:
            check(r.record, r.tps, warm + SIM_MEASURE_STEPS)
    # a measured-only run costs less than a full one: the start-up and fewer steps
    full_cost = records.read(state.baseline[0].record).summary.device_hours
    assert all(records.read(r.reference_record).summary.device_hours < full_cost for r in pairs)


def test_a_run_stopped_by_a_signal_is_spent_and_made_again_on_resume(template: Path, reference, tmp_path: Path) -> None:
    """Ctrl-C in the middle of a real run leaves no record, but the devices were held: the time is saved as spent
    (``RunAbandoned``) before the signal goes on, the run stays pending, and ``resume`` makes it again. A campaign
    stopped 45 s into its baseline used to show 0.0000 device-hours spent."""
    import time

    from bot.drive.interrupt import Interrupted

    repo = tmp_path / "repo"
    shutil.copytree(template, repo)
    runner = FakeRunner(rule)
    real_run = runner.run

    def stopped_once(recipe, **kw):
        runner.run = real_run  # the next run is not interrupted
        time.sleep(0.3)
        raise Interrupted(2)

    runner.run = stopped_once
    driver = drivers(repo, runner)
    state = new_state(recipe_text())
    with pytest.raises(Interrupted):
        driver.start(state)
    saved = driver.states.load(state.id)
    devices = saved.devices
    assert saved.abandoned == saved.spent and 0.3 * devices / 3600 <= saved.spent < 5 * devices / 3600
    assert [type(a).__name__ for a in saved.pending] == ["RunBaseline"] and not saved.baseline
    done = drivers(repo, runner).resume(state.id)
    reference_state = reference[0]
    assert done.phase == "finished" and done.spent == pytest.approx(reference_state.spent + saved.abandoned)
    assert (
        decisions(done)["steps"] == decisions(reference_state)["steps"]
    )  # the same campaign, the lost run's time on top
