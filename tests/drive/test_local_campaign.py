"""bot/drive/local.py: one short REAL campaign on the CPU — torchtitan under torchrun, the real gate, git branches.

A tmp clone of this repository, a copy of the CPU recipe with an 8-step benchmark, the heuristic
policy, two steps at most. Each run takes ~25 s on an idle 2-core machine (more when it is shared).
"""

from __future__ import annotations

import importlib.util
import subprocess
import time
from pathlib import Path

import pytest

from bot.campaign.new_campaign import new_state
from bot.campaign.report import summary_json
from bot.core.mdtext import md_inline
from bot.core.recipe import load_recipe
from bot.core.records import read_record
from bot.drive.local import build_executor

REPO = Path(__file__).resolve().parents[2]
RECIPE_REL = "recipes/llama3-tiny/cpu-e2e.yaml"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


def _gate_missing() -> str | None:
    for module in ("gate.config_check", "gate.convergence"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not written yet: the end-to-end campaign needs the real correctness gate"
    return None


@pytest.mark.torchtitan
@pytest.mark.skipif(_gate_missing() is not None, reason=str(_gate_missing()))
def test_a_short_real_cpu_campaign_end_to_end(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(REPO), str(repo)], check=True)
    git(repo, "config", "user.name", "attune test")
    git(repo, "config", "user.email", "test@localhost")
    text = (
        (REPO / "recipes/llama3-tiny/cpu.yaml")
        .read_text()
        .replace("  steps: 20\n", "  steps: 8\n")
        .replace("  warmup_steps: 5\n", "  warmup_steps: 3\n")
    )
    (repo / RECIPE_REL).write_text(text)
    git(repo, "add", RECIPE_REL)
    git(repo, "commit", "-q", "-m", "e2e: an 8-step copy of the CPU recipe")
    base = git(repo, "rev-parse", "--abbrev-ref", "HEAD").strip()
    landed = set((repo / "results").rglob("*.json"))  # results already on main (real campaigns landed there)
    start = git(repo, "rev-parse", "HEAD").strip()  # main's history holds landed campaigns' step commits too
    recipe = load_recipe(repo / RECIPE_REL)
    assert (recipe.bench.steps, recipe.bench.warmup_steps) == (8, 3)

    budget = 0.5  # device-hours: far more than 2 baseline runs + 2 steps need; max_steps=2 ends the campaign
    started = time.monotonic()
    driver = build_executor(repo, RECIPE_REL, policy="heuristic", forge="local")
    # at most 2 pairs a step (4 by default): what is checked here is the campaign's path through real runs, git and
    # the gate, not how many pairs a small gain needs on this machine (tests/campaign covers the measurement)
    state = driver.start(
        new_state(recipe, RECIPE_REL, budget=budget, policy="heuristic", campaign_id="e2e", max_steps=2, max_pairs=2)
    )
    wall = time.monotonic() - started

    facts = summary_json(state, repo)
    assert state.phase == "finished" and state.pending == [], facts
    assert [r.outcome for r in state.baseline] == ["ok", "ok"] and state.band is not None
    # the gate's loss band was calibrated on real runs against this campaign's baseline (tier-R steps can pass)
    assert state.calibrated and state.loss_band is not None, state.calibration_note
    assert state.loss_band.reference_run == read_record(state.baseline[0].record).run_id
    assert "loss band calibrated on" in state.calibration_note
    assert len(state.steps) == 2, facts
    # the limit ends it, or the policy's own patience stop when the second step already spent a baseline run's
    # device-hours on nothing (real CPU runs: how many pairs a step needs depends on the machine's noise that minute)
    assert state.finish_reason == "reached the 2-step limit" or (
        state.finish_reason.startswith(
            ("policy stopped: no diagnosis- or lesson-driven move is left", "policy stopped: no gain found")
        )  # steps cost more on a busy box
        and not state.steps[-1].kept
    ), facts
    assert state.spent <= state.budget == budget
    for step in state.steps:
        assert (
            step.state in ("merged", "closed")
            and step.branch
            == git(repo, "for-each-ref", "--format=%(refname:short)", f"refs/heads/attune/e2e/{step.n}-*").strip()
        )
        # the step's own commit changes exactly one line of the recipe, and nothing else
        (sha,) = git(repo, "log", "--format=%H", f"--grep=^attune step {step.n}:", f"{start}..{step.branch}").split()
        assert git(repo, "diff", "--numstat", f"{sha}~1", sha).split() == ["1", "1", RECIPE_REL]
        files = git(repo, "ls-tree", "-r", "--name-only", step.branch).split()
        assert f"campaigns/e2e/step-{step.n}/report.md" in files
        if step.runs:  # the config gate may have rejected the change for free
            assert f"campaigns/e2e/step-{step.n}/trial.json" in files
    on_base = git(repo, "ls-tree", "-r", "--name-only", base).split()
    assert "campaigns/e2e/summary.md" in on_base and "campaigns/e2e/baseline-1.json" in on_base
    assert (
        "leaderboard.md" in on_base and git(repo, "status", "--porcelain", "--", "leaderboard.md") == ""
    )  # refreshed and committed
    assert any(
        s.startswith("attune: campaign e2e finished") for s in git(repo, "log", "--format=%s", base).splitlines()
    )
    summary = (repo / "campaigns/e2e/summary.md").read_text()
    # the summary says why it finished -- the step limit or the patience stop above, whichever this run's noise gave
    assert (
        md_inline(state.finish_reason) in summary
    )  # runner-facing text is escaped in Markdown and all(s.change.lever in summary for s in state.steps)
    kept = [s for s in state.steps if s.kept]
    assert bool(set((repo / "results").rglob("*.json")) - landed) == bool(
        kept
    )  # this campaign's results: a kept step's only
    print(
        f"\nreal campaign: {len(state.baseline) + sum(len(s.runs) for s in state.steps)} runs, {wall:.0f} s wall, "
        f"{state.spent:.4f} device-hours; steps: {[(s.change.lever, s.change.after, s.state, s.close_reason) for s in state.steps]}"
    )
