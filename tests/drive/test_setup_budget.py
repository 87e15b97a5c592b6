"""The budget is a hard cap on the set-up too (baseline and gate-calibration runs), on every driver.

Each driver meets a budget the full set-up does not fit: the local one with the git forge (fake runs, a calibration
that charges what its runs cost), GitHub's against the OpenAPI-validated fake (fake runs answering trial.yml), and the
simulator through ``attune campaign run`` (refused before anything is written, naming the smallest budget; that budget
then runs). On the old code the local campaign spent 0.1035 of 0.08 device-hours and tried nothing, and GitHub's
dispatched a calibration its budget could not hold.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from campaign_fakes import (
    RECIPE_REL,
    FakeRunner,
    ScriptedPolicy,
    make_driver,
    make_repo,
    recipe_text,
    table_rule,
)

from bot import campaign as cm
from bot.campaign.measurement_settings import measurement_options
from bot.campaign.new_campaign import new_state
from bot.campaign.setupcost import sim_run_cost
from bot.core.recipe import load_recipe, parse_recipe_text
from bot.core.records import content_hash
from bot.drive.local import build_executor
from bot.forge.local import LocalForge

ROOT = Path(__file__).resolve().parents[2]
ATTUNE = ROOT / ".venv" / "bin" / "attune"
RUN_COST = 0.0123  # device-hours of one run of the CPU recipe, as the red-team campaign measured them
SCRIPT = [{"lever": "activation_checkpoint", "to": "none"}, {"lever": "training.gc_freq", "to": 10}]


class CappedCalibration:
    """A calibration of ``runs`` runs of ``cost`` each that, like the real one, stops its runs at the cap it is given."""

    def __init__(self, runs: int = 4, cost: float = 0.0137) -> None:
        self.runs, self.cost, self.caps = runs, cost, []

    def __call__(self, recipe_text: str, reference, max_wall_s: float | None = None) -> cm.Calibrated:
        self.caps.append(max_wall_s)
        spent = self.runs * self.cost if max_wall_s is None else min(self.runs * self.cost, max_wall_s / 3600.0)
        return cm.Calibrated(device_hours=spent, note="test band")


class FileRunner(FakeRunner):
    """The fake runner, its records naming the recipe file's own hash (as the report job checks on GitHub)."""

    def run(self, recipe, **kw):
        record = super().run(recipe, **kw)
        return record.model_copy(update={"recipe_hash": content_hash(Path(kw["recipe_path"]).read_text())})


def _local(tmp_path: Path, budget: float, calibration: CappedCalibration) -> tuple[cm.Campaign, FakeRunner]:
    repo = make_repo(tmp_path / "repo")
    runner = FakeRunner(table_rule({}, [1000.0, 1010.0, 1005.0, 995.0]), cost=RUN_COST)
    driver = make_driver(
        LocalForge(repo), runner, ScriptedPolicy(SCRIPT), repo / ".attune" / "campaigns", calibrate=calibration
    )
    state = cm.Campaign(
        **{
            **new_state(
                parse_recipe_text(recipe_text(), RECIPE_REL),
                RECIPE_REL,
                budget=budget,
                policy="scripted",
                campaign_id="c1",
            ).model_dump(),
            **measurement_options("local"),
            "calibration_runs_planned": 4,
        }
    )
    return driver.start(state), runner


def test_local_git_forge_the_issues_budget_is_scaled_to_fit_and_a_step_is_tried(tmp_path: Path) -> None:
    calibration = CappedCalibration()
    state, runner = _local(tmp_path, 0.08, calibration)
    assert state.spent <= state.budget == 0.08
    assert state.spent == pytest.approx(sum(c["cost"] for c in runner.calls))
    # after the warm-up run: 3 measured runs and 4 calibration runs and a trial do not fit; 2 measured runs do, uncalibrated
    assert state.setup_note == (
        "set-up scaled to fit the budget: 2 measured baseline runs, not 3; "
        "no gate calibration (4 calibration runs left out: tier-R/N steps fail closed)"
    )
    assert len(state.baseline) == 3 and calibration.caps == [] and state.loss_band is None
    assert state.steps and any(r.kind == "trial" for r in state.steps[0].runs)  # the budget bought a step


def test_local_git_forge_a_calibration_that_fits_runs_capped_at_what_is_left(tmp_path: Path) -> None:
    calibration = CappedCalibration()
    state, runner = _local(tmp_path, 0.2, calibration)
    assert state.setup_note == "" and state.calibrated
    assert calibration.caps == [pytest.approx((0.2 - 4 * RUN_COST) * 3600.0)]  # the budget left after 4 baseline runs
    assert state.spent <= state.budget


def test_sim_a_budget_that_cannot_hold_the_set_up_is_refused_naming_the_smallest(tmp_path: Path) -> None:
    rel = "bot/bench/tasks/mixtral-8x22b/h100x64.yaml"
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    (repo / rel).parent.mkdir(parents=True)
    (repo / rel).write_text((ROOT / rel).read_text())
    cost = 1.1 * sim_run_cost(load_recipe(repo / rel))  # the simulator's first run, plus the margin every estimate has
    out = subprocess.run(
        [str(ATTUNE), "campaign", "run", str(repo / rel), "--budget", "1", "--forge", "none"],
        capture_output=True,
        text=True,
        cwd=repo,
    )
    assert out.returncode == 2, out.stderr
    (line,) = out.stderr.strip().splitlines()
    smallest = float(line.split("the smallest budget that holds them is ")[1].split()[0])
    assert line.startswith("attune: --budget 1: the set-up left (1 baseline run) and one trial")
    assert smallest == pytest.approx(2 * cost, rel=1e-3) and smallest >= 2 * cost
    assert not (repo / ".attune" / "campaigns").exists() or not any((repo / ".attune" / "campaigns").iterdir())
    # the smallest budget named holds the baseline and a trial, and is never passed
    executor = build_executor(repo, rel, policy="heuristic", forge="none", cache_dir=tmp_path / "cache", lessons=[])
    state = new_state(
        load_recipe(repo / rel),
        rel,
        budget=smallest,
        policy="heuristic",
        campaign_id="sim1",
        run_cost_estimate=cost / 1.1,
        **measurement_options("sim"),
    )
    state = executor.start(state)
    assert state.spent <= smallest and len(state.baseline) == 1 and state.steps and state.steps[0].runs, (
        state.finish_reason
    )


def test_github_fake_calibration_is_left_out_when_the_budget_cannot_hold_it(tmp_path: Path) -> None:
    from forge_helpers import require

    require("responses", "openapi_core")
    from fake_github import FakeGitHub
    from github_harness import GitHubCampaign
    from openapi_contract import Contract, spec_missing_reason

    if spec_missing_reason():
        pytest.skip(spec_missing_reason())
    gh = FakeGitHub(Contract()).start()
    runner = FileRunner(table_rule({}, [1000.0, 1010.0, 1005.0, 995.0]), cost=RUN_COST)
    try:
        flow = GitHubCampaign(
            gh,
            RECIPE_REL,
            recipe_text(),
            0.08,
            tmp_path / "github",
            answerer={"runner": runner},
            driver_kw={"policy": ScriptedPolicy(SCRIPT), "lessons": []},
        )
        assert flow.start().endswith("started")
        while flow.answerer.unanswered():
            inputs = flow.answerer.unanswered()[0]
            assert inputs["kind"] != "calibrate", "a calibration the budget cannot hold was dispatched"
            state = flow.state()
            limit = json.loads(inputs["limits"]).get("max_wall_s", 0.0)
            assert limit <= (state.budget - state.spent) * 3600.0 + 1e-6  # every run capped at what is left
            flow.answerer.answer(inputs)
        state = flow.state()
    finally:
        gh.stop()
    gh.assert_contract_kept()
    assert state.phase == "finished" and state.spent <= state.budget == 0.08
    assert "no gate calibration" in state.setup_note and state.steps


@pytest.mark.slow  # about 100 s here: a clone, the seed checkpoint and one real run
@pytest.mark.torchtitan
def test_real_cpu_campaign_a_budget_that_cannot_hold_the_set_up_ends_after_its_first_run(tmp_path: Path) -> None:
    """`attune campaign run` on a 4-step copy of the CPU recipe (local launcher, real torchtitan): the first run (the
    warm-up, ~0.004-0.008 device-hours here) is the estimate; the rest of the set-up and a trial cannot fit 0.012, so
    the campaign ends there, naming the smallest budget, never past its budget. The old code went on measuring."""
    repo = tmp_path / "repo"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(ROOT), str(repo)], check=True)
    for key, val in (("user.name", "attune test"), ("user.email", "test@localhost")):
        subprocess.run(["git", "-C", str(repo), "config", key, val], check=True)
    rel = "recipes/llama3-tiny/cpu-budget.yaml"
    text = (
        (ROOT / "recipes/llama3-tiny/cpu.yaml")
        .read_text()
        .replace("  steps: 20\n", "  steps: 4\n")
        .replace("  warmup_steps: 5\n", "  warmup_steps: 2\n")
        .replace("id: llama3-tiny/cpu\n", "id: llama3-tiny/cpu-budget\n")
    )
    (repo / rel).write_text(text)
    subprocess.run(["git", "-C", str(repo), "add", rel], check=True)
    subprocess.run(["git", "-C", str(repo), "commit", "-q", "-m", "a 4-step copy of the CPU recipe"], check=True)
    out = subprocess.run(
        [
            str(ATTUNE),
            "campaign",
            "run",
            str(repo / rel),
            "--budget",
            "0.012",
            "--forge",
            "none",
            "--json",
            "--id",
            "tiny",
        ],
        capture_output=True,
        text=True,
        cwd=repo,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    state = cm.read_campaign(repo / ".attune" / "campaigns" / "tiny" / "state.json")
    assert state.phase == "finished" and state.steps == [] and 0 < state.spent <= state.budget == 0.012
    first = state.baseline[0]
    if first.outcome == "ok":  # the refusal after the first run: the runs so far are the estimate
        assert len(state.baseline) == 1 and "smallest budget that holds them is" in state.finish_reason, (
            state.finish_reason
        )
        smallest = float(state.finish_reason.split("holds them is ")[1].split()[0])
        assert smallest >= first.device_hours + 3 * 1.1 * first.device_hours - 1e-4 and smallest > state.budget
    else:  # a machine so loaded that one run passes the whole budget: it is stopped at the cap
        assert first.outcome == "timeout", first.reason
