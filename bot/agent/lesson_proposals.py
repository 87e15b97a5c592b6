"""Lessons proposed from measured campaign steps (``status: proposed``), written atomically for a person to review."""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator
from ruamel.yaml import YAML

from bot.agent.lesson_checks import lesson_problem
from bot.agent.lesson_schema import Lesson, LessonFileError, LeverName, Text, check_source, lesson_to_data
from bot.core.datafile import load_entries


class Measurement(BaseModel):
    """One measured campaign step, as ``propose_lessons`` reads it."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    lever: LeverName
    from_: Any = Field(alias="from")
    to: Any
    gain: float  # relative throughput change, 0.15 = +15 %
    kept: bool
    record: str
    hardware: Text
    model: Text
    simulated: bool = False  # measured in the simulator: the lesson says so (a simulated number is labelled simulated)

    @field_validator("record")
    @classmethod
    def _record(cls, record: str) -> str:
        return check_source(record)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9._-]+", "-", text.lower()).strip("-.") or "x"


def propose_lessons(measurements: Iterable[Mapping[str, Any]], *, origin: str = "") -> list[dict[str, Any]]:
    """Lesson dicts (``status: proposed``) from kept, positive-gain measurements.

    Steps with the same (lever, from, to, model, hardware) are merged: the gain is their mean, the
    first record is the ``source`` and all records are listed in ``evidence``. Steps that were not
    kept or did not gain are not turned into lessons. ``origin`` (the campaign id) ends each lesson id, so two
    campaigns on one model and hardware (two recipes, or the same one twice) propose lessons that can sit in one
    catalog (``lessons/proposed/`` loads as one) until a person merges them.
    """
    groups: dict[tuple[str, str, str, str, str], list[Measurement]] = {}
    for raw in measurements:
        m = Measurement.model_validate(raw)
        if not m.kept or m.gain <= 0:
            continue
        key = (
            m.lever,
            repr(m.from_),
            repr(m.to),
            m.model,
            m.hardware,
        )  # (a campaign's steps are all simulated or none)
        groups.setdefault(key, []).append(m)
    proposed: list[dict[str, Any]] = []
    for (lever, _, _, model, hardware), group in groups.items():
        first = group[0]
        gain = sum(m.gain for m in group) / len(group)
        lesson = {
            "id": _slug(
                f"measured-{lever}-{first.from_}-to-{first.to}-" + (f"in-{origin}" if origin else f"{model}-{hardware}")
            ),
            "title": f"{lever}: {first.from_!r} -> {first.to!r} on {model} / {hardware}",
            "when": {"field": f"levers.{lever}", "op": "eq", "value": first.from_},
            "try": [{"lever": lever, "value": first.to}],
            "why": (
                f"SIMULATED (the simulator, not a measurement): {gain:+.1%} tokens/s"
                if first.simulated
                else f"Measured {gain:+.1%} tokens/s"
            )
            + f" on {model} / {hardware} over {len(group)} kept step(s).",
            "source": first.record,
            "applies_to": {"models": [model], "hardware": [hardware]},
            "priority": max(1, min(99, round(gain * 100))),
            "status": "proposed",
            "evidence": "records: " + ", ".join(m.record for m in group),
        }
        if not first.simulated:  # a measured gain is a prior the scorer may use; a simulated one is not evidence
            lesson["expected_gain"] = round(gain, 4)
        Lesson.model_validate(lesson)
        proposed.append(lesson)
    return proposed


def write_proposed(lessons: Iterable[Mapping[str, Any] | Lesson], path: Path | str, *, merge: bool = True) -> Path:
    """Write proposed lessons to ``path`` atomically (temp file in the same folder, then rename).

    With ``merge`` an existing file keeps its lessons except those whose id is rewritten.
    Every lesson is validated first; nothing is written if one is malformed.
    """
    target = Path(path)
    new = [lesson if isinstance(lesson, Lesson) else Lesson.model_validate(dict(lesson)) for lesson in lessons]
    kept: list[Lesson] = []
    if merge and target.exists():
        ids = {lesson.id for lesson in new}
        old = load_entries(target, "lessons", Lesson, LessonFileError, kind="lesson", check=lesson_problem)
        kept = [lesson for lesson in old if lesson.id not in ids]
    data = {
        "about": "Proposed lessons from measured campaign steps; review, then move into a topic file.",
        "lessons": [lesson_to_data(lesson) for lesson in kept + new],
    }
    target.parent.mkdir(parents=True, exist_ok=True)
    yaml = YAML(typ="rt", pure=True)  # plain dicts in, insertion order kept out
    yaml.default_flow_style = False
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            yaml.dump(data, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
