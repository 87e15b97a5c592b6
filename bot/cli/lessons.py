"""``attune lessons list|show``: the lessons catalog of the repository at or above the working directory."""

from __future__ import annotations

import argparse
from typing import Any

from bot.cli.common import EXIT_OK, UsageError


def cmd_lessons(args: argparse.Namespace) -> int:
    from bot.agent.lessons import find_lesson, load_lessons, render_lesson, render_table

    lessons = load_lessons()
    if args.lessons_cmd == "list":
        print(render_table(lessons))
        return EXIT_OK
    lesson = find_lesson(lessons, args.id)
    if lesson is None:
        raise UsageError(f"no lesson {args.id!r}; `attune lessons list` shows them")
    print(render_lesson(lesson))
    return EXIT_OK


def register(sub: Any) -> None:
    ls = sub.add_parser("lessons", help="the lessons catalog").add_subparsers(dest="lessons_cmd", required=True)
    ls.add_parser("list").set_defaults(func=cmd_lessons)
    sh = ls.add_parser("show")
    sh.add_argument("id")
    sh.set_defaults(func=cmd_lessons)
