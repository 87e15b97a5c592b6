"""Shared by the crash-resume tests: a scratch clone to tune, ``attune`` as a subprocess, and a campaign's trace —
everything a campaign leaves behind that a kill and a resume could duplicate or lose."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
ATTUNE = Path(sys.executable).with_name("attune")


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


def scratch_clone(dest: Path) -> Path:
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(REPO), str(dest)], check=True)
    git(dest, "config", "user.name", "attune test")
    git(dest, "config", "user.email", "test@localhost")
    return dest


def attune(
    repo: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ATTUNE), *args],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def _subjects(repo: Path, since: str, ref: str) -> tuple[list[str], list[str]]:
    first_parent = git(repo, "log", "--reverse", "--first-parent", "--format=%s", f"{since}..{ref}").splitlines()
    return first_parent, sorted(git(repo, "log", "--format=%s", f"{since}..{ref}").splitlines())


def campaign_trace(repo: Path, cid: str, base_start: str) -> dict[str, Any]:
    """What campaign ``cid`` left in ``repo`` (the base branch started at ``base_start``), free of what differs
    between two faithful runs (run ids, commit hashes, times, the repository's path)."""
    from bot import campaign as cm

    folder = repo / ".attune" / "campaigns" / cid
    state = cm.Campaign.model_validate_json((folder / "state.json").read_text())
    base = git(repo, "rev-parse", "--abbrev-ref", "HEAD").strip()
    branches = git(repo, "for-each-ref", "--format=%(refname:short)", f"refs/heads/attune/{cid}/").split()
    records = {}
    for path in sorted(folder.glob("*/record.json")):
        rec = json.loads(path.read_text())
        records[path.parent.name] = (
            rec["outcome"],
            rec["summary"].get("tps_median"),
            rec["summary"].get("device_hours"),
        )
    return {
        "phase": state.phase,
        "pending": [a.model_dump() for a in state.pending],
        "finish_reason": state.finish_reason,
        "spent": state.spent,
        "gain": state.gain,
        "baseline": [(r.attempt, r.outcome, r.tps) for r in state.baseline],
        "steps": [
            (
                s.n,
                s.change.lever,
                repr(s.change.after),
                s.state,
                s.kept,
                s.gain,
                s.close_reason,
                [(r.kind, r.attempt, r.outcome, r.tps) for r in s.runs],
            )
            for s in state.steps
        ],
        "branches": branches,
        # every commit, by subject, on each step branch and on the base branch (a repeated side effect shows here):
        # the first-parent line in order, and all of them (merged histories interleave by commit time)
        "branch_commits": {b: _subjects(repo, base_start, b) for b in branches},
        "base_commits": _subjects(repo, base_start, base),
        "records": records,
        "run_dirs": sorted(p.name for p in folder.iterdir() if p.is_dir()),
        "comments": sorted(p.name for p in (repo / ".attune" / "comments").glob("*.md")),
        "statuses": sorted(
            json.dumps(v, sort_keys=True)
            for v in json.loads((repo / ".attune" / "forge" / "status.json").read_text()).values()
        )
        if (repo / ".attune" / "forge" / "status.json").exists()
        else [],
    }
