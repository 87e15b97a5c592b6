"""A real ``attune campaign run`` on the CPU recipe (torchtitan under torchrun), signalled while a run is in flight:

- SIGTERM ends torchrun and every rank before ``attune`` exits (exit 143), and the campaign stays resumable with
  nothing recorded for the interrupted run;
- SIGKILL (no handler can run) still leaves no process behind — torchrun gets SIGTERM from the kernel when its parent
  dies and ends its ranks — and ``attune campaign resume`` makes the killed run again, once; ``attune campaign stop``
  then ends the resumed campaign while its next run is in flight (the running process is signalled, lets go of the
  campaign, and the stop closes and commits it).

Processes are found through ``/proc`` (descendants, and anything working inside the scratch repository).
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from crash_helpers import attune, campaign_trace, git, scratch_clone
from procs_helpers import ranks, start_attune, survivors, wait_for, working_in
from shared_run import shared_recipe_text

from bot.runner.logparse import parse_step_line
from bot.runner.procs import descendants

RECIPE = "recipes/llama3-tiny/signals.yaml"
TEARDOWN = '"log_type_name": "torch_distributed_teardown_end"'  # a rank's last structured-log event of a finished run


def cpu_repo(tmp_path: Path, steps: int) -> Path:
    repo = scratch_clone(tmp_path / "repo")
    text = shared_recipe_text().replace("  steps: 20\n", f"  steps: {steps}\n")
    assert f"  steps: {steps}\n" in text
    (repo / RECIPE).write_text(text)
    git(repo, "add", RECIPE)
    git(repo, "commit", "-q", "-m", f"test: a {steps}-step copy of the CPU recipe")
    return repo


@pytest.mark.torchtitan
def test_sigterm_during_the_first_real_run_ends_torchrun_and_every_rank_and_leaves_the_campaign_resumable(
    tmp_path: Path,
) -> None:
    repo = cpu_repo(tmp_path, steps=400)  # a run far longer than the test: only the signal can end it
    log = tmp_path / "run.log"
    proc = start_attune(repo, "campaign", "run", RECIPE, "--budget", "1", "--id", "term", out=log)
    first_log = repo / ".attune" / "campaigns" / "term" / "baseline-1" / "train.log"
    try:
        # the first baseline run's rank (the seed checkpoint's one-step run comes before it)
        wait_for("the first run's rank", lambda: first_log.exists() and ranks(proc.pid), 300, proc, log)
        tree = descendants(proc.pid)  # attune's whole tree: torchrun, its ranks
        os.kill(proc.pid, signal.SIGTERM)
        rc = proc.wait(timeout=120)
        left = survivors(tree) + survivors(working_in(repo))  # the moment attune has exited
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    out = log.read_text()
    assert rc == 143, out[-3000:]
    assert left == [], left
    assert "interrupted (SIGTERM)" in out and "attune campaign resume term" in out, out[-2000:]
    assert "Traceback" not in out, out[-3000:]
    folder = repo / ".attune" / "campaigns" / "term"
    state = json.loads((folder / "state.json").read_text())
    assert state["phase"] == "baseline" and state["pending"][0] == {"type": "run_baseline", "attempt": 1}
    assert state["abandoned"] > 0 and state["spent"] == state["abandoned"]  # the stopped run held its device: spent
    assert (folder / "baseline-1" / "train.log").exists() and not (folder / "baseline-1" / "record.json").exists()
    listed = json.loads(attune(repo, "campaign", "list", "--json").stdout.strip().splitlines()[-1])
    assert [(c["id"], c["status"]) for c in listed["campaigns"]] == [("term", "resumable")]


@pytest.mark.torchtitan
def test_a_campaign_sigkilled_inside_a_real_run_redoes_that_run_once_on_resume_and_stop_ends_it_mid_run(
    tmp_path: Path,
) -> None:
    repo = cpu_repo(tmp_path, steps=10)
    start = git(repo, "rev-parse", "HEAD").strip()
    folder = repo / ".attune" / "campaigns" / "kill"
    log = tmp_path / "run.log"
    first = start_attune(repo, "campaign", "run", RECIPE, "--budget", "1", "--id", "kill", out=log)
    resumed = None
    try:
        wait_for(
            "the first run's rank",
            lambda: (folder / "baseline-1" / "train.log").exists() and ranks(first.pid),
            300,
            first,
            log,
        )
        tree = descendants(first.pid)
        os.kill(first.pid, signal.SIGKILL)
        assert first.wait(timeout=60) == -signal.SIGKILL
        # torchrun got SIGTERM from the kernel (its parent died) and ended its ranks
        wait_for("torchrun and its ranks to end", lambda: not survivors(tree) and not working_in(repo), 120)
        assert (folder / "baseline-1" / "train.log").exists() and not (folder / "baseline-1" / "record.json").exists()
        # ended, not orphaned: an orphaned rank would have trained to its last step and torn down normally
        spans = "".join(p.read_text() for p in (folder / "baseline-1" / "titan").rglob("*.jsonl"))
        assert TEARDOWN not in spans and '"step": 10,' not in spans

        rlog = tmp_path / "resume.log"
        resumed = start_attune(repo, "campaign", "resume", "kill", out=rlog)
        wait_for("baseline-1's record", lambda: (folder / "baseline-1" / "record.json").exists(), 300, resumed, rlog)
        wait_for("the second run's rank", lambda: ranks(resumed.pid), 300, resumed, rlog)
        tree = descendants(resumed.pid)
        stop = attune(repo, "campaign", "stop", "kill", "--json")
        assert stop.returncode == 0, stop.stdout[-2000:] + stop.stderr[-2000:]
        assert resumed.wait(timeout=60) == 128 + signal.SIGTERM, rlog.read_text()[-3000:]
        left = survivors(tree) + survivors(working_in(repo))
    finally:
        for p in (first, resumed):
            if p is not None and p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
    assert left == [], left
    assert f"stopping process {resumed.pid}" in stop.stderr
    trace = campaign_trace(repo, "kill", start)
    assert (
        trace["phase"] == "finished"
        and trace["pending"] == []
        and trace["finish_reason"] == "stopped by `attune campaign stop`"
    )
    (baseline,) = trace["baseline"]  # the killed run was made again once, and recorded once
    assert baseline[:2] == (1, "ok")
    assert list(trace["records"]) == ["baseline-1"] and trace["records"]["baseline-1"][0] == "ok"
    # paid for: the recorded run, and the time the run `stop` interrupted held its device (not recorded; the run the
    # SIGKILL ended is not counted: the process that held it died without a word)
    abandoned = json.loads((folder / "state.json").read_text())["abandoned"]
    assert abandoned > 0 and trace["spent"] == pytest.approx(trace["records"]["baseline-1"][2] + abandoned)
    assert trace["steps"] == [] and trace["branches"] == []
    assert trace["base_commits"][0].count("attune: campaign kill finished (+0.0%)") == 1
    steps = [
        m.step
        for m in map(parse_step_line, (folder / "baseline-1" / "train.log").read_text().splitlines())
        for m in ([m[0]] if m else [])
    ]
    assert steps == list(range(1, 11))  # one run's log, not the killed run's and this one's


@pytest.mark.slow
@pytest.mark.torchtitan
def test_a_real_campaign_sigkilled_inside_its_first_trial_resumes_and_finishes_with_one_branch_and_one_record_per_run(
    tmp_path: Path,
) -> None:
    """The whole path on real runs (~5 min): warm-up, 2 baselines, 4 calibration runs, then SIGKILL inside the first
    trial (step 1's, or step 2's when step 1 is gated without a run); the resumed campaign makes that trial again,
    once, and finishes (``--max-steps 2`` ends it)."""
    repo = cpu_repo(tmp_path, steps=10)
    start = git(repo, "rev-parse", "HEAD").strip()
    folder = repo / ".attune" / "campaigns" / "real"
    log = tmp_path / "run.log"
    first = start_attune(repo, "campaign", "run", RECIPE, "--budget", "1", "--max-steps", "2", "--id", "real", out=log)
    try:
        trial_log = wait_for(
            "the first trial's log", lambda: next(folder.glob("step-*-trial/train.log"), None), 1200, first, log
        )
        wait_for("the first trial's rank", lambda: ranks(first.pid), 300, first, log)
        tree = descendants(first.pid)
        os.kill(first.pid, signal.SIGKILL)
        assert first.wait(timeout=60) == -signal.SIGKILL
        wait_for("torchrun and its ranks to end", lambda: not survivors(tree) and not working_in(repo), 120)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    killed_n = int(trial_log.parent.name.split("-")[1])
    assert not (trial_log.parent / "record.json").exists()
    resumed = attune(repo, "campaign", "resume", "real", "--json", timeout=900)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    trace = campaign_trace(repo, "real", start)
    assert (
        trace["phase"] == "finished" and trace["pending"] == [] and trace["finish_reason"] == "reached the 2-step limit"
    ), trace
    assert [b[0] for b in trace["baseline"]] == [1, 2, 3]
    assert [s[0] for s in trace["steps"]] == [1, 2]
    killed = trace["steps"][killed_n - 1]
    assert killed[7][0][:2] == ("trial", 1)  # the killed trial, made again once
    for *_, runs in trace["steps"]:
        assert len({(kind, attempt) for kind, attempt, *_ in runs}) == len(runs), runs
    assert len(trace["branches"]) == len(trace["steps"])  # one branch per step
    for branch, (_, subjects) in trace["branch_commits"].items():
        n = branch.split("/")[-1].split("-")[0]
        assert sum(s.startswith(f"attune step {n}:") for s in subjects) == 1, (branch, subjects)
    calibration = json.loads((folder / "calibration.json").read_text())
    recorded = sum(r[2] or 0.0 for r in trace["records"].values())
    assert trace["spent"] == pytest.approx(recorded + calibration.get("device_hours", 0.0))  # nothing paid twice
    assert (
        trace["base_commits"][0].count(
            next(s for s in trace["base_commits"][0] if s.startswith("attune: campaign real finished"))
        )
        == 1
    )
