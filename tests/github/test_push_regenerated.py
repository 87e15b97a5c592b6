"""``.github/scripts/push-regenerated.sh``: regenerate a file and push it, retrying through pull --rebase when
someone else pushed meanwhile. Real git, in temporary repositories only."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / ".github" / "scripts" / "push-regenerated.sh"
# Stands in for `attune leaderboard`: leaderboard.md lists the records under results/.
GENERATOR = (
    "import pathlib; names = sorted(p.stem for p in pathlib.Path('results').glob('*.json'));"
    "pathlib.Path('leaderboard.md').write_text('# Leaderboard\\n' + ''.join(f'- {n}\\n' for n in names))"
)

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def env() -> dict[str, str]:
    names = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com"}
    names |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    return (
        os.environ
        | names
        | {"PUSH_BRANCH": "main", "PUSH_BACKOFF_SECONDS": "0", "GIT_CONFIG_GLOBAL": "/dev/null"}
    )


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, env=env(), check=True, capture_output=True, text=True
    ).stdout


def commit(clone: Path, files: dict[str, str], message: str, *, push: bool = True) -> None:
    for name, text in files.items():
        (clone / name).parent.mkdir(parents=True, exist_ok=True)
        (clone / name).write_text(text)
    git(clone, "add", "-A")
    git(clone, "commit", "-q", "-m", message)
    if push:
        git(clone, "push", "-q", "origin", "HEAD:main")


@pytest.fixture
def repos(tmp_path: Path) -> tuple[Path, Path]:
    """(our clone, someone else's clone) of one bare origin with results/a.json and its leaderboard."""
    origin = tmp_path / "origin.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(origin))
    seed = tmp_path / "seed"
    git(tmp_path, "clone", "-q", str(origin), str(seed))
    git(seed, "checkout", "-q", "-b", "main")
    commit(seed, {"results/a.json": "{}", "leaderboard.md": "# Leaderboard\n- a\n"}, "seed")
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    git(tmp_path, "clone", "-q", str(origin), str(ours))
    git(tmp_path, "clone", "-q", str(origin), str(theirs))
    return ours, theirs


def push_regenerated(clone: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), "leaderboard.md", "--", sys.executable, "-c", GENERATOR],
        cwd=clone,
        env=env(),
        capture_output=True,
        text=True,
        timeout=60,
    )


def origin_leaderboard(clone: Path) -> str:
    git(clone, "fetch", "-q", "origin")
    return git(clone, "show", "origin/main:leaderboard.md")


def test_up_to_date_pushes_nothing(repos: tuple[Path, Path]) -> None:
    ours, _ = repos
    before = git(ours, "rev-parse", "origin/main")
    done = push_regenerated(ours)
    assert done.returncode == 0 and "up to date" in done.stdout
    git(ours, "fetch", "-q", "origin")
    assert git(ours, "rev-parse", "origin/main") == before


def test_a_plain_push(repos: tuple[Path, Path]) -> None:
    ours, _ = repos
    commit(ours, {"results/b.json": "{}"}, "record b", push=False)
    done = push_regenerated(ours)
    assert done.returncode == 0, done.stderr
    assert origin_leaderboard(ours) == "# Leaderboard\n- a\n- b\n"


def test_a_rejected_push_is_rebased_and_regenerated(repos: tuple[Path, Path]) -> None:
    ours, theirs = repos
    commit(ours, {"results/b.json": "{}"}, "record b", push=False)
    commit(theirs, {"results/c.json": "{}"}, "record c lands meanwhile (no leaderboard change)")

    done = push_regenerated(ours)

    assert done.returncode == 0, done.stdout + done.stderr
    assert "rejected" in done.stdout
    assert origin_leaderboard(ours) == "# Leaderboard\n- a\n- b\n- c\n"  # regenerated on the new tip


def test_a_conflicting_leaderboard_is_regenerated_from_scratch(repos: tuple[Path, Path]) -> None:
    ours, theirs = repos
    commit(ours, {"results/b.json": "{}"}, "record b (the merge that started this run)")
    git(theirs, "pull", "-q", "origin", "main")
    commit(theirs, {"results/c.json": "{}", "leaderboard.md": "# Leaderboard\n- c\n"}, "their regeneration")

    done = push_regenerated(ours)

    assert done.returncode == 0, done.stdout + done.stderr
    assert "rejected" in done.stdout
    assert origin_leaderboard(ours) == "# Leaderboard\n- a\n- b\n- c\n"
    log = git(ours, "log", "--format=%s", "origin/main")
    assert log.splitlines()[:2] == ["chore: regenerate leaderboard.md", "their regeneration"]


def test_gives_up_after_the_attempts(repos: tuple[Path, Path], tmp_path: Path) -> None:
    ours, _ = repos
    commit(ours, {"results/b.json": "{}"}, "record b", push=False)
    git(ours, "remote", "set-url", "--push", "origin", str(tmp_path / "nowhere.git"))
    done = subprocess.run(
        ["bash", str(SCRIPT), "leaderboard.md", "--", sys.executable, "-c", GENERATOR],
        cwd=ours,
        env=env() | {"PUSH_ATTEMPTS": "2"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1 and "after 2 attempts" in done.stderr
