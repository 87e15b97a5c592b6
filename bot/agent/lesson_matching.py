"""Which lessons hold for a campaign's context (``applies_to`` and ``when``, by priority), and how they are shown."""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from bot.agent.lesson_schema import Lesson
from bot.core.matcher import describe, matches, version_matches


def _glob_any(value: Any, patterns: Sequence[str]) -> bool:
    if "*" in patterns:
        return True
    return isinstance(value, str) and any(fnmatch.fnmatchcase(value, p) for p in patterns)


def applies(lesson: Lesson, ctx: Mapping[str, Any]) -> bool:
    """True when ``applies_to`` admits the context's model, hardware and (known) stack versions."""
    scope = lesson.applies_to
    if not _glob_any(ctx.get("recipe.model"), scope.models):
        return False
    if not _glob_any(ctx.get("recipe.hardware"), scope.hardware):
        return False
    for key, spec in (("stack.torch", scope.stack.torch), ("stack.torchtitan", scope.stack.torchtitan)):
        if spec and key in ctx and not version_matches(spec, ctx[key]):
            return False
    return True


def relevant(
    lessons: Iterable[Lesson],
    ctx: Mapping[str, Any],
    *,
    include_proposed: bool = False,
    include_manual: bool = True,
    include_rules: bool = True,
) -> list[Lesson]:
    """Lessons that apply to ``ctx`` and whose ``when`` matches, highest priority first (stable); ``include_rules``
    False leaves out the citations of rules in code (what an agent is offered as lessons)."""
    hits = [
        lesson
        for lesson in lessons
        if (include_proposed or lesson.status == "curated")
        and (include_manual or lesson.auto_propose)
        and (include_rules or lesson.kind != "rule")
        and applies(lesson, ctx)
        and (lesson.when is None or matches(lesson.when, ctx))
    ]
    return sorted(hits, key=lambda lesson: -lesson.priority)


def find_lesson(lessons: Iterable[Lesson], lesson_id: str) -> Lesson | None:
    """The lesson with ``lesson_id``, or None."""
    return next((lesson for lesson in lessons if lesson.id == lesson_id), None)


def lever_names(lessons: Iterable[Lesson]) -> set[str]:
    """Every lever a lesson may change (to cross-check against the lever catalog)."""
    return {change.lever for lesson in lessons for change in lesson.try_}


def render_lesson(lesson: Lesson) -> str:
    """A readable block for ``attune lessons show ID``."""
    scope = lesson.applies_to
    stack = ", ".join(f"{k} {v}" for k, v in scope.stack.model_dump().items() if v) or "any"
    lines = [
        f"{lesson.id}  (priority {lesson.priority}, {lesson.status}{'' if lesson.auto_propose else ', rule in code' if lesson.kind == 'rule' else ', manual'})"
    ]
    if lesson.title:
        lines.append(lesson.title)
    lines.append(f"when:       {describe(lesson.when) if lesson.when is not None else 'always'}")
    if lesson.try_:
        lines.append("try:        " + "\n            ".join(f"{i}. {c.render()}" for i, c in enumerate(lesson.try_, 1)))
    else:
        lines.append("try:        (nothing automatic)")
    lines.append(f"why:        {lesson.why}")
    lines.append(f"source:     {lesson.source}")
    if lesson.evidence:
        lines.append(f"evidence:   {lesson.evidence}")
    lines.append(f"applies to: models {', '.join(scope.models)}; hardware {', '.join(scope.hardware)}; stack {stack}")
    return "\n".join(lines)


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def render_table(lessons: Sequence[Lesson]) -> str:
    """A plain aligned table for ``attune lessons list``."""
    rows = [("ID", "PRI", "TRY", "SOURCE")]
    for lesson in lessons:
        first = lesson.try_[0].render() if lesson.try_ else "-"
        more = f" (+{len(lesson.try_) - 1})" if len(lesson.try_) > 1 else ""
        manual = "" if lesson.auto_propose else "(rule in code) " if lesson.kind == "rule" else "(manual) "
        rows.append((lesson.id, str(lesson.priority), _clip(manual + first + more, 48), _clip(lesson.source, 70)))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    out = []
    for row in rows:
        out.append("  ".join(cell.ljust(widths[i]) if i < 3 else cell for i, cell in enumerate(row)).rstrip())
    return "\n".join(out)
