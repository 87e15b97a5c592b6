"""``attune leaderboard``: regenerate ``leaderboard.md`` (TrainingThroughputBench) from ``results/``.

``--repo`` names an existing ATTUNE repository (a folder holding ``recipes/`` or ``lessons/``); without it the
repository at or above the working directory (or ``$ATTUNE_REPO``). Nothing is created anywhere else. A results file
that is not a run record stops the command with one line naming the file and field, and the board stays as it was.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from bot.cli.common import EXIT_OK, UsageError


def repo_root(arg: str | None) -> Path:
    """The repository whose board to regenerate: ``--repo`` exactly (it must exist and be one), else the one found."""
    from bot.core.repo import MARKERS, find_repo

    if arg is None:
        return find_repo().root
    path = Path(arg)
    if not path.exists():
        raise UsageError(f"--repo {arg}: no such folder")
    if not path.is_dir():
        raise UsageError(f"--repo {arg}: not a folder; expected an ATTUNE repository")
    if not any((path / m).is_dir() for m in MARKERS):
        raise UsageError(
            f"--repo {arg}: not an ATTUNE repository (expected a folder holding "
            f"{' or '.join(m + '/' for m in MARKERS)})"
        )
    return path


def cmd_leaderboard(args: argparse.Namespace) -> int:
    from bot.campaign.leaderboard import regenerate

    _, text = regenerate(repo_root(args.repo))
    print(text)
    return EXIT_OK


def register(sub: Any) -> None:
    lb = sub.add_parser("leaderboard", help="regenerate leaderboard.md from results/")
    lb.add_argument(
        "--repo", default=None, help="the ATTUNE repository (default: the one at or above the working directory)"
    )
    lb.set_defaults(func=cmd_leaderboard)
