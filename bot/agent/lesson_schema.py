"""A lesson's record: the schema a catalog file's entries are validated against, and its YAML form.

The fields, and the context a lesson's ``when`` may read: docs/lessons.md.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator, model_validator

from bot.core.datafile import DataFileError
from bot.core.matcher import Condition, parse_specifier, show, to_data

RelOp = Literal["double", "halve", "next", "prev", "max"]
Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]
LessonId = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9._-]*$")]
LeverName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*$")]

_PATH_SOURCE = re.compile(r"^(?!/)(?!.*\.\.)[A-Za-z0-9_.@+-]+(/[A-Za-z0-9_.@#+-]+)+$")


class LessonFileError(DataFileError):
    """A lessons file is malformed; the message names file, lesson, field and what was expected."""


def check_source(source: str) -> str:
    """``source`` if it is an https URL or a repository path (a run record); else a ValueError saying what is expected."""
    if source.startswith("https://") and len(source) > len("https://"):
        return source
    if _PATH_SOURCE.match(source):
        return source
    raise ValueError(
        f"expected an https:// URL or a repository path such as results/<recipe>/<run>.json; got {source!r}"
    )


class LeverChange(BaseModel):
    """One step a lesson suggests: set ``lever`` to ``value``, or move it by ``op``."""

    model_config = ConfigDict(extra="forbid")

    lever: LeverName
    value: Any = None
    op: RelOp | None = None

    @model_validator(mode="after")
    def _one_of(self) -> LeverChange:
        has_value = "value" in self.model_fields_set
        if has_value == (self.op is not None):
            raise ValueError("give exactly one of 'value' or 'op' (double|halve|next|prev|max)")
        return self

    def render(self) -> str:
        return f"{self.lever}: {self.op}" if self.op else f"{self.lever} = {show(self.value)}"

    def to_data(self) -> dict[str, Any]:
        return {"lever": self.lever, "op": self.op} if self.op else {"lever": self.lever, "value": self.value}


class StackRange(BaseModel):
    """PEP 440 ranges of the stack a lesson was learned on ("" = any)."""

    model_config = ConfigDict(extra="forbid")

    torch: str = ""
    torchtitan: str = ""

    @field_validator("torch", "torchtitan")
    @classmethod
    def _specifier(cls, spec: str) -> str:
        parse_specifier(spec)
        return spec


class AppliesTo(BaseModel):
    """Where a lesson holds: model-id globs, hardware globs, stack ranges."""

    model_config = ConfigDict(extra="forbid")

    models: list[Text] = Field(default_factory=lambda: ["*"], min_length=1)
    hardware: list[Text] = Field(default_factory=lambda: ["*"], min_length=1)
    stack: StackRange = Field(default_factory=StackRange)


class Lesson(BaseModel):
    """One cited tuning lesson (every field: docs/lessons.md)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    id: LessonId
    title: str = ""
    when: Condition | None = None
    try_: list[LeverChange] = Field(alias="try")
    why: Text
    source: str
    applies_to: AppliesTo = Field(default_factory=AppliesTo)
    priority: int = 0
    status: Literal["curated", "proposed"] = "curated"
    auto_propose: bool = True
    # "rule": the citation of a rule the default policy implements in code (never proposed from the catalog, never
    # offered to an agent as a lesson); "lesson": a lesson
    kind: Literal["lesson", "rule"] = "lesson"
    evidence: str = ""
    # the throughput gain its evidence measured (a fraction): the scorer's prior where the cost model cannot tell
    expected_gain: float | None = Field(default=None, gt=-1.0, le=10.0)

    @field_validator("source")
    @classmethod
    def _source(cls, source: str) -> str:
        return check_source(source)

    @model_validator(mode="after")
    def _try_needed(self) -> Lesson:
        if self.kind == "rule" and self.auto_propose:
            raise ValueError("a 'kind: rule' citation is never proposed from the catalog: set auto_propose: false")
        if self.auto_propose and not self.try_:
            raise ValueError("'try' must list at least one lever change (or set auto_propose: false)")
        return self


def lesson_to_data(lesson: Lesson) -> dict[str, Any]:
    """Plain data for a lesson, in the YAML form ``load_lessons`` reads back."""
    data: dict[str, Any] = {"id": lesson.id}
    if lesson.title:
        data["title"] = lesson.title
    if lesson.when is not None:
        data["when"] = to_data(lesson.when)
    data["try"] = [change.to_data() for change in lesson.try_]
    data["why"] = lesson.why
    data["source"] = lesson.source
    applies = lesson.applies_to
    data["applies_to"] = {"models": list(applies.models), "hardware": list(applies.hardware)}
    stack = {k: v for k, v in applies.stack.model_dump().items() if v}
    if stack:
        data["applies_to"]["stack"] = stack
    if lesson.priority:
        data["priority"] = lesson.priority
    data["status"] = lesson.status
    if not lesson.auto_propose:
        data["auto_propose"] = False
    if lesson.kind != "lesson":
        data["kind"] = lesson.kind
    if lesson.evidence:
        data["evidence"] = lesson.evidence
    if lesson.expected_gain is not None:
        data["expected_gain"] = lesson.expected_gain
    return data
