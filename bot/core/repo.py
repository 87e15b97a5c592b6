"""Where a repository keeps its data: ``recipes/``, ``lessons/`` (its own lessons, added to ATTUNE's packaged catalog),
``results/``, ``leaderboard.md``.

They are always read from the checkout being tuned — the recipe's repository, or the working directory for commands
without a recipe (``attune lessons``, ``attune github ...`` in a workflow's checkout) — never next to the installed
package, so a non-editable ``pip install .`` (as the workflows do it) finds them.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

MARKERS = ("recipes", "lessons")  # a folder holding either is an ATTUNE repository


class RepoError(ValueError):
    """No ATTUNE repository where one was expected (one line, for the user)."""


@dataclass(frozen=True)
class Repo:
    root: Path

    @property
    def recipes(self) -> Path:
        return self.root / "recipes"

    @property
    def lessons(self) -> Path:
        return self.root / "lessons"

    @property
    def results(self) -> Path:
        return self.root / "results"

    @property
    def leaderboard(self) -> Path:
        return self.root / "leaderboard.md"

    @property
    def work(self) -> Path:
        """The engine's own files in this checkout (campaign state, calibration caches): ``.attune/``."""
        return self.root / ".attune"


def git_toplevel(path: Path) -> Path | None:
    """The git work tree holding ``path`` (a file or folder), or None."""
    folder = path if path.is_dir() else path.parent
    try:
        out = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=folder, capture_output=True, text=True)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return Path(out.stdout.strip()) if out.returncode == 0 and out.stdout.strip() else None


def uncommitted(repo: Path, path: Path) -> str | None:
    """Why the file ``path`` of the git work tree ``repo`` is not as committed, or None when it is.

    "is not tracked by git" (never added, or ignored), or "has uncommitted changes" (staged or not): what the local
    forge, which reads and merges the committed file, cannot tune (``attune campaign run`` refuses it).
    """

    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["git", *args, "--", str(Path(path).resolve())], cwd=Path(repo).resolve(), capture_output=True, text=True
        )

    if git("ls-files", "--error-unmatch").returncode != 0:  # also a file outside ``repo``
        return "is not tracked by git"
    status = git("status", "--porcelain")
    if status.returncode != 0:
        return f"cannot be checked with git ({status.stderr.strip().splitlines()[-1] if status.stderr.strip() else 'git status failed'})"
    return "has uncommitted changes" if status.stdout.strip() else None


def current_branch(repo: Path) -> str | None:
    """The branch checked out in the git work tree ``repo`` (``HEAD`` when it is detached; None when ``repo`` is not
    a git repository or has no commit yet): the base a local-forge campaign merges into."""
    out = subprocess.run(
        ["git", "rev-parse", "--abbrev-ref", "HEAD"], cwd=Path(repo).resolve(), capture_output=True, text=True
    )
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None


def staged(repo: Path) -> list[str]:
    """The paths whose staged content differs from HEAD (what ``git commit`` would take along; ``git merge`` refuses
    to merge into an index that holds them)."""
    out = subprocess.run(
        ["git", "diff", "--cached", "--name-only"], cwd=Path(repo).resolve(), capture_output=True, text=True
    )
    return out.stdout.split() if out.returncode == 0 else []


def step_branches(repo: Path, cid: str) -> list[str]:
    """The branches a campaign of id ``cid`` made in ``repo`` (``attune/<cid>/<n>-<lever>``, named by
    :func:`bot.forge.base.step_branch`); none when ``repo`` is not a git repository."""
    out = subprocess.run(
        ["git", "for-each-ref", "--format=%(refname:short)", f"refs/heads/attune/{cid}/"],
        cwd=Path(repo).resolve(),
        capture_output=True,
        text=True,
    )
    return out.stdout.split() if out.returncode == 0 else []


def repo_of_recipe(recipe: Path) -> Repo:
    """The git repository holding ``recipe`` (the local forge makes its step branches there)."""
    recipe = Path(recipe).resolve()
    top = git_toplevel(recipe)
    if top is None:
        raise RepoError(
            f"{recipe}: not inside a git repository (a campaign makes its step branches there; "
            "`git init` the folder or tune a recipe of a clone)"
        )
    return Repo(top)


def find_repo(start: Path | None = None) -> Repo:
    """The ATTUNE repository at or above ``start`` (default: ``$ATTUNE_REPO``, else the working directory)."""
    env = os.environ.get("ATTUNE_REPO")
    here = Path(start or env or os.getcwd()).resolve()
    for folder in (here, *here.parents):
        if any((folder / m).is_dir() for m in MARKERS):
            return Repo(folder)
    named = f"$ATTUNE_REPO={env}" if start is None and env else str(here)
    raise RepoError(
        f"{named}: no ATTUNE repository there or above (a folder with recipes/ or lessons/); "
        "run from a checkout of your tuning repository"
    )
