"""Lessons catalog: cited tuning heuristics that guide which lever a policy tries next.

The public face of the lessons modules: the record (:mod:`.lesson_schema`), the load-time checks of a lesson's
``try`` (:mod:`.lesson_checks`), loading and merging the catalog (:mod:`.lesson_catalog`), matching a campaign's
context and showing lessons (:mod:`.lesson_matching`), and lessons proposed from measured steps
(:mod:`.lesson_proposals`). The file format and the context keys a ``when`` may read: docs/lessons.md.
"""

from __future__ import annotations

from bot.agent.lesson_catalog import (
    CATALOG,
    catalog_dir,
    load_lesson_folder,
    load_lessons,
    packaged_lessons,
    repo_lessons_dir,
)
from bot.agent.lesson_checks import ENV_OPS, OPS_BY_KIND, PINNED_KEYS, apply_op, change_problem, try_problem
from bot.agent.lesson_matching import applies, find_lesson, lever_names, relevant, render_lesson, render_table
from bot.agent.lesson_proposals import Measurement, propose_lessons, write_proposed
from bot.agent.lesson_schema import (
    AppliesTo,
    Lesson,
    LessonFileError,
    LessonId,
    LeverChange,
    LeverName,
    RelOp,
    StackRange,
    Text,
    lesson_to_data,
)

__all__ = [
    "CATALOG",
    "ENV_OPS",
    "OPS_BY_KIND",
    "PINNED_KEYS",
    "AppliesTo",
    "Lesson",
    "LessonFileError",
    "LessonId",
    "LeverChange",
    "LeverName",
    "Measurement",
    "RelOp",
    "StackRange",
    "Text",
    "applies",
    "apply_op",
    "catalog_dir",
    "change_problem",
    "find_lesson",
    "lesson_to_data",
    "lever_names",
    "load_lesson_folder",
    "load_lessons",
    "packaged_lessons",
    "propose_lessons",
    "relevant",
    "render_lesson",
    "render_table",
    "repo_lessons_dir",
    "try_problem",
    "write_proposed",
]
