"""``attune leaderboard``: regenerate ``leaderboard.md`` (TrainingThroughputBench) from ``results/``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from bot.cli.common import EXIT_OK


def cmd_leaderboard(args: argparse.Namespace) -> int:
    from bot.campaign.leaderboard import regenerate

    path, text = regenerate(Path(args.repo))
    print(text)
    return EXIT_OK


def register(sub: Any) -> None:
    lb = sub.add_parser("leaderboard", help="regenerate leaderboard.md from results/")
    lb.add_argument("--repo", default=".")
    lb.set_defaults(func=cmd_leaderboard)
