"""``attune campaign list|resume|stop`` on simulated campaigns (real ``attune`` processes, real git): what ``list``
shows, ``stop`` closing the open step of a killed campaign and committing its summary once, and one-line errors
(exit 2, nothing written) for unknown or malformed ids, a taken id, and a campaign that cannot be resumed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from crash_helpers import attune, campaign_trace, git, scratch_clone

RECIPE = "recipes/glm-4.5/h100x128.yaml"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return scratch_clone(tmp_path / "repo")


def one_line_error(proc) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    lines = proc.stderr.strip("\n").splitlines()
    assert len(lines) == 1 and lines[0].startswith("attune: ") and "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    return lines[0]


def killed_with_an_open_step(repo: Path, cid: str, tmp_path: Path, forge: str = "local") -> None:
    """Campaign ``cid`` SIGKILLed right after its first step was opened on the forge."""
    probe = scratch_clone(tmp_path / f"probe-{cid}")
    trace = tmp_path / f"{cid}.trace"
    done = attune(probe, "campaign", "run", RECIPE, "--budget", "350", "--id", cid, "--json", env={"ATTUNE_CRASH_TRACE": str(trace)})
    assert done.returncode == 0, done.stderr[-2000:]
    k = 1 + [line.split()[1] for line in trace.read_text().splitlines()].index("forge.open_step")
    killed = attune(repo, "campaign", "run", RECIPE, "--budget", "350", "--id", cid, "--forge", forge, "--json",
                    env={"ATTUNE_CRASH_AFTER": str(k)})
    assert killed.returncode == -9, killed.stderr[-2000:]


def test_stop_closes_the_open_step_of_a_killed_campaign_and_list_shows_it_finished(repo: Path, tmp_path: Path) -> None:
    start = git(repo, "rev-parse", "HEAD").strip()
    killed_with_an_open_step(repo, "c1", tmp_path)
    listed = attune(repo, "campaign", "list")
    assert listed.returncode == 0
    header, row = listed.stdout.strip().splitlines()
    assert header.split() == ["id", "recipe", "phase", "steps", "gain", "spent/budget", "dh", "status"]
    assert row.split()[:4] == ["c1", RECIPE, "stepping", "1"] and row.endswith("resumable"), row

    stop = attune(repo, "campaign", "stop", "c1", "--json")
    assert stop.returncode == 0, stop.stderr[-2000:]
    assert json.loads(stop.stdout.strip().splitlines()[-1])["finish_reason"] == "stopped by `attune campaign stop`"
    trace = campaign_trace(repo, "c1", start)
    (step,) = trace["steps"]
    assert step[3] == "closed" and step[6] == "stopped by `attune campaign stop`" and step[7] == []  # never run
    (branch,) = trace["branches"]
    assert trace["branch_commits"][branch][1].count(f"attune: close step {step[0]}") == 1
    assert trace["base_commits"][0].count("attune: campaign c1 finished (+0.0%)") == 1
    rows = json.loads(attune(repo, "campaign", "list", "--json").stdout.strip().splitlines()[-1])["campaigns"]
    assert [(r["id"], r["phase"], r["status"], r["steps"]) for r in rows] == [("c1", "finished", "finished", 1)]

    again = attune(repo, "campaign", "stop", "c1")
    assert again.returncode == 0 and "already finished: stopped by" in again.stdout
    resumed = attune(repo, "campaign", "resume", "c1")
    assert resumed.returncode == 0 and "already finished" in resumed.stdout
    assert campaign_trace(repo, "c1", start) == trace  # nothing more was done


def test_unknown_or_malformed_ids_and_a_taken_id_are_one_line_errors_that_write_nothing(repo: Path) -> None:
    for cmd in ("resume", "stop", "show"):
        line = one_line_error(attune(repo, "campaign", cmd, "nope"))
        assert "nope: no such campaign under" in line and "attune campaign list" in line
    assert "not a campaign id" in one_line_error(attune(repo, "campaign", "resume", "../x"))
    assert "--id" in one_line_error(attune(repo, "campaign", "run", RECIPE, "--budget", "10", "--id", "a/b"))
    assert not (repo / ".attune").exists()
    assert attune(repo, "campaign", "list").stdout.startswith("no campaigns under")
    ok = attune(repo, "campaign", "run", RECIPE, "--budget", "10", "--id", "taken", "--json")
    assert ok.returncode == 0, ok.stderr[-2000:]
    state = (repo / ".attune" / "campaigns" / "taken" / "state.json").read_text()
    line = one_line_error(attune(repo, "campaign", "run", RECIPE, "--budget", "10", "--id", "taken"))
    assert "that campaign exists" in line and "attune campaign resume taken" in line
    assert (repo / ".attune" / "campaigns" / "taken" / "state.json").read_text() == state


def test_a_campaign_whose_steps_were_kept_in_memory_cannot_be_resumed(repo: Path, tmp_path: Path) -> None:
    killed_with_an_open_step(repo, "mem", tmp_path, forge="none")
    line = one_line_error(attune(repo, "campaign", "resume", "mem"))
    assert "--forge none" in line and "cannot be resumed" in line
