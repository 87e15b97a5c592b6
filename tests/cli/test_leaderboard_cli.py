"""``attune leaderboard`` (bot/cli/leaderboard.py) as the console script, against scratch clones: a results file that is
not a run record, or a ``--repo`` that is no ATTUNE repository, is one line on stderr, exit 2, no traceback, and
nothing on disk changes or appears. ``attune github publish-leaderboard`` refuses the same file before it talks to
GitHub."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from crash_helpers import attune, git, scratch_clone
from test_cli import assert_one_line_error

LANDED = Path("results") / "llama3-tiny" / "cpu"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return scratch_clone(tmp_path / "repo")


def disk(repo: Path) -> tuple[str, bytes]:
    """Everything a command could change in the clone: the tree's status (new, changed, ignored files) and the board."""
    status = git(repo, "status", "--porcelain", "--untracked-files=all", "--ignored")
    return status, (repo / "leaderboard.md").read_bytes()


def uploaded(repo: Path, content: bytes) -> Path:
    path = repo / LANDED / "uploaded.json"
    path.write_bytes(content)
    return path


def a_landed_record(repo: Path) -> dict:
    return json.loads(next((repo / LANDED).glob("*.json")).read_text())


def test_the_checkouts_results_make_its_board(repo: Path) -> None:
    proc = attune(repo, "leaderboard", "--repo", str(repo))
    assert proc.returncode == 0, proc.stderr
    assert "llama3-tiny" in proc.stdout and "moe-tiny (MoE)" in proc.stdout and proc.stderr == ""
    assert (repo / "leaderboard.md").read_text() in proc.stdout


@pytest.mark.parametrize(
    ("kind", "field"),
    [
        ("tokens/s as a word", ": summary.tps_median: expected a number; got 'fast'"),
        ("garbage JSON", ":3: not valid JSON"),
        ("non-UTF-8 text", ":1: not UTF-8 text (byte 0xe9"),
    ],
)
def test_a_bad_results_file_is_one_line_exit_2_and_the_board_stays(repo: Path, kind: str, field: str) -> None:
    record = a_landed_record(repo)
    if kind == "tokens/s as a word":
        record["summary"]["tps_median"] = "fast"
        bad = uploaded(repo, json.dumps(record, indent=1).encode())
    elif kind == "garbage JSON":
        bad = uploaded(repo, b'{\n "outcome": "ok",\n "summary": {tps_median: 1}\n}\n')
    else:
        bad = uploaded(repo, json.dumps({"model": "caf\u00e9"}, ensure_ascii=False).encode("latin-1"))
    before = disk(repo)
    line = assert_one_line_error(
        attune(repo, "leaderboard")
    )  # --repo left out: the repository of the working directory
    assert line.startswith(f"attune: {bad.resolve()}{field}") and line.endswith("leaderboard.md left as it was"), line
    assert disk(repo) == before


def test_publish_leaderboard_refuses_the_same_file_before_it_talks_to_github(repo: Path) -> None:
    record = a_landed_record(repo)
    record["usd_per_device_hour"] = -1.0
    bad = uploaded(repo, json.dumps(record).encode())
    before = disk(repo)
    env = {"ATTUNE_REPO": str(repo), "GITHUB_TOKEN": "", "GITHUB_REPOSITORY": "example/none"}
    proc = attune(repo, "github", "publish-leaderboard", "--run-id", "7-1", env=env)
    lines = proc.stderr.strip("\n").splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    assert lines[0].startswith(f"attune github: {bad.resolve()}: usd_per_device_hour: expected a number >= 0"), lines[0]
    assert disk(repo) == before


def test_repo_must_be_an_existing_attune_repository(repo: Path, tmp_path: Path) -> None:
    missing = tmp_path / "nonexist"
    line = assert_one_line_error(attune(repo, "leaderboard", "--repo", str(missing)))
    assert line == f"attune: --repo {missing}: no such folder"
    assert not missing.exists()
    plain = tmp_path / "plain"
    plain.mkdir()
    line = assert_one_line_error(attune(repo, "leaderboard", "--repo", str(plain)))
    assert line == f"attune: --repo {plain}: not an ATTUNE repository (expected a folder holding recipes/ or lessons/)"
    assert os.listdir(plain) == []
    a_file = repo / "README.md"
    line = assert_one_line_error(attune(repo, "leaderboard", "--repo", str(a_file)))
    assert line == f"attune: --repo {a_file}: not a folder; expected an ATTUNE repository"
    assert git(repo, "status", "--porcelain", "--untracked-files=all") == ""


def test_without_repo_outside_any_repository_nothing_is_written(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    line = assert_one_line_error(attune(elsewhere, "leaderboard", env={"ATTUNE_REPO": ""}))
    assert "no ATTUNE repository there or above" in line and str(elsewhere) in line
    assert os.listdir(elsewhere) == []
