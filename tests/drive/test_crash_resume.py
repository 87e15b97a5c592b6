"""A campaign SIGKILLed at any side effect and resumed ends exactly as one that ran through: a real ``attune campaign
run`` subprocess on a simulated recipe (2 steps: one closed, one merged) kills itself (``kill -9``, no cleanup) right after its k-th side effect
(``bot.drive.crashpoints``: a state save, a stored record, a finished run, a branch, commit, comment, status or
merge), then ``attune campaign resume`` finishes it. The resumed campaign's trace — state, runs and records, every
branch and every commit on it and on the base branch, comments, statuses — must equal the uninterrupted one's:
no step, branch, commit or record is duplicated or lost, and no device-hour is counted twice.

The default suite kills at the first side effect of each kind and at the last (13 points); the ``slow`` test at
every one of them (46).
"""

from __future__ import annotations

import json
import shutil

import pytest
from crash_helpers import attune, campaign_trace, git, scratch_clone

# a 32-device recipe: its campaign ranks 12,010 layouts for the layout jump (0.6 s), a 128-device MoE recipe 148,941
# (11 s), which every killed and every resumed process would rank again
RECIPE = "bot/bench/tasks/llama3.1-70b/b200x32.yaml"
# device-hours: 2 steps (an OOM closed, a gain merged after its trial and one pair), then the budget ends it
BUDGET = "8"
CID = "crash"


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The uninterrupted campaign: its trace and its numbered side effects, and a clean clone to copy."""
    tmp = tmp_path_factory.mktemp("crash")
    template = scratch_clone(tmp / "template")
    repo = tmp / "reference"
    shutil.copytree(template, repo, symlinks=True)
    trace_file = tmp / "reference.trace"
    proc = attune(
        repo,
        "campaign",
        "run",
        RECIPE,
        "--budget",
        BUDGET,
        "--id",
        CID,
        "--json",
        env={"ATTUNE_CRASH_TRACE": str(trace_file)},
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    start = git(template, "rev-parse", "HEAD").strip()
    points = [line.split(" ", 1)[1] for line in trace_file.read_text().splitlines()]
    trace = campaign_trace(repo, CID, start)
    assert trace["phase"] == "finished" and trace["pending"] == []
    kinds = {s[3] for s in trace["steps"]}
    assert {"merged", "closed"} <= kinds, trace["steps"]  # the campaign exercises both ends of a step
    assert {"forge.merge", "forge.close", "runs.calibrate", "forge.commit_on_base"} <= set(points)
    return {"tmp": tmp, "template": template, "start": start, "points": points, "trace": trace}


def kill_and_resume(reference: dict, k: int) -> None:
    repo = reference["tmp"] / f"kill-{k}"
    shutil.copytree(reference["template"], repo, symlinks=True)
    trace_file = reference["tmp"] / f"kill-{k}.trace"
    killed = attune(
        repo,
        "campaign",
        "run",
        RECIPE,
        "--budget",
        BUDGET,
        "--id",
        CID,
        "--json",
        env={"ATTUNE_CRASH_AFTER": str(k), "ATTUNE_CRASH_TRACE": str(trace_file)},
    )
    assert killed.returncode == -9, (k, killed.returncode, killed.stderr[-2000:])
    done = [line.split(" ", 1)[1] for line in trace_file.read_text().splitlines()]
    assert done == reference["points"][:k]  # it died right after side effect k, having done the same ones before
    if k == 1:
        listed = json.loads(attune(repo, "campaign", "list", "--json").stdout.strip().splitlines()[-1])
        (row,) = listed["campaigns"]
        assert (row["id"], row["status"]) == (CID, "resumable"), row  # the kernel dropped the dead process's lock
    resumed = attune(repo, "campaign", "resume", CID, "--json")
    assert resumed.returncode == 0, (k, resumed.stdout[-2000:], resumed.stderr[-2000:])
    trace = campaign_trace(repo, CID, reference["start"])
    for key, want in reference["trace"].items():
        assert trace[key] == want, (
            f"killed after side effect {k} ({reference['points'][k - 1]}): {key} differs",
            trace[key],
            want,
        )
    for branch, (_, subjects) in trace["branch_commits"].items():
        n = branch.split("/")[-1].split("-")[0]
        assert sum(s.startswith(f"attune step {n}:") for s in subjects) == 1, (branch, subjects)
    shutil.rmtree(repo)


def spread(points: list[str]) -> list[int]:
    """Kill points (1-based): the first side effect of each kind, and the last one."""
    first: dict[str, int] = {}
    for i, what in enumerate(points, 1):
        first.setdefault(what, i)
    return sorted({*first.values(), len(points)})


def test_a_sim_campaign_killed_at_each_kind_of_side_effect_resumes_to_the_uninterrupted_result(reference: dict) -> None:
    points = spread(reference["points"])
    assert len(points) >= 12
    for k in points:
        kill_and_resume(reference, k)


@pytest.mark.slow
def test_a_sim_campaign_killed_at_every_side_effect_resumes_to_the_uninterrupted_result(reference: dict) -> None:
    for k in range(1, len(reference["points"]) + 1):
        kill_and_resume(reference, k)
