"""Loading the lessons catalog: ATTUNE's packaged lessons merged with a tuning repository's own ``lessons/``."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from bot.agent.lesson_checks import lesson_problem
from bot.agent.lesson_schema import Lesson, LessonFileError
from bot.core.datafile import load_entries
from bot.core.repo import RepoError, find_repo

CATALOG = "lessons_catalog"  # the packaged catalog: a folder of this package (pyproject.toml's package-data)


def catalog_dir() -> Path:
    """The folder of ATTUNE's own lessons, wherever the package is installed (editable or not)."""
    return Path(str(resources.files(__package__ or "bot.agent").joinpath(CATALOG)))


def load_lesson_folder(folder: Path | str) -> list[Lesson]:
    """Every ``*.yaml`` directly in ``folder`` alone (no packaged catalog), sorted by file name; ids unique across
    its files. Raises ``LessonFileError`` on the first problem, a missing folder included."""
    folder = Path(folder)
    if not folder.is_dir():
        raise LessonFileError(f"{folder}: lessons folder not found")
    lessons: list[Lesson] = []
    origin: dict[str, str] = {}
    for path in sorted(folder.glob("*.yaml")):
        for lesson in load_entries(path, "lessons", Lesson, LessonFileError, kind="lesson", check=lesson_problem):
            if lesson.id in origin:
                raise LessonFileError(
                    f"{path}: lesson {lesson.id!r}: field 'id': duplicate id, also in {origin[lesson.id]}"
                )
            origin[lesson.id] = str(path)
            lessons.append(lesson)
    return lessons


def repo_lessons_dir() -> Path | None:
    """``lessons/`` of the repository at or above the working directory (``$ATTUNE_REPO`` overrides), or None."""
    try:
        return find_repo().lessons
    except RepoError:
        return None


def packaged_lessons() -> list[Lesson]:
    """ATTUNE's own catalog, as shipped with the package (no repository's lessons)."""
    shipped = catalog_dir()
    if not shipped.is_dir():
        raise LessonFileError(
            f"{shipped}: ATTUNE's lessons catalog is missing from the installed package; reinstall ATTUNE"
        )
    return load_lesson_folder(shipped)


def load_lessons(dir: Path | str | None = None) -> list[Lesson]:
    """The catalog a campaign uses: ATTUNE's packaged lessons (:func:`catalog_dir`), then those of the tuning
    repository's folder ``dir`` (default: :func:`repo_lessons_dir`; nothing is added when there is no repository or
    the folder does not exist). A repository lesson whose id is a packaged lesson's replaces it in its place; the
    others follow, in file-name order. Every ``try`` is one a campaign can make (:func:`try_problem`). Raises
    ``LessonFileError`` on the first problem (a file that is not UTF-8 text, a duplicate id within either folder).
    """
    lessons = packaged_lessons()
    folder = Path(dir) if dir else repo_lessons_dir()
    own = load_lesson_folder(folder) if folder is not None and folder.is_dir() else []
    mine = {lesson.id: lesson for lesson in own}
    merged = [mine.pop(lesson.id, lesson) for lesson in lessons]
    return merged + [lesson for lesson in own if lesson.id in mine]
