"""Lessons catalog: cited tuning heuristics that guide which lever a policy tries next.

ATTUNE's catalog ships with the package (``bot/agent/lessons_catalog/*.yaml``, package data: one file per topic, each
``{lessons: [...]}``); the tuning repository's own ``lessons/*.yaml``, when it has any, add lessons to it or replace
a packaged lesson of the same id (:func:`load_lessons`). A lesson is

* ``id``; ``when``: a ``bot.core.matcher`` condition over the context below (omitted = always);
* ``try``: ordered lever changes, ``{lever, value}`` or relative ``{lever, op: double|halve|next|prev}``
  (a policy takes the first one that is legal and differs from the current value). Checked at load
  (:func:`try_problem`): a lever of the catalog (:mod:`bot.core.levers`), never a pinned key; a value
  the lever accepts; an op its kind takes (``OPS_BY_KIND``). ``env.<VARIABLE>`` names a variable a
  recipe's ``env`` may set (advice: a campaign never changes a recipe's environment);
* ``why``, ``source`` (https URL, or the repository path of the run record that taught it);
* ``applies_to``: ``models`` and ``hardware`` glob lists and ``stack`` PEP 440 ranges;
* optional ``priority`` (higher first), ``status`` (``curated`` | ``proposed``), ``auto_propose``
  (false = informational: a policy must not propose it on its own, e.g. precision changes),
  ``evidence`` and ``title``.

Context keys a lesson's ``when`` may read (flat, dotted):
``diagnosis.outcome`` (ok|oom|crash|hang|timeout|invalid), ``diagnosis.mem_headroom_frac``
(1 - peak/capacity), ``diagnosis.tps_cv``, ``diagnosis.mfu``, ``diagnosis.simulated``,
``diagnosis.breakdown.{bubble_frac,exposed_comm_frac,recompute_frac}``, ``recipe.hardware``
(cpu, h100-sxm-80gb, h200, b200), ``recipe.devices``, ``recipe.model``, ``recipe.moe``,
``recipe.grad_accum_steps``, ``recipe.global_batch_pinned``, ``recipe.tokens_per_microbatch``,
``recipe.devices_per_node``, ``recipe.expert_parallel_groups_per_node`` (devices per node / EP: 2 or more, a doubled
EP group still fits in one node),
``stack.torch``, ``stack.torchtitan``, ``levers.<lever name>`` for every current lever value and
``recipe.env.<VARIABLE>`` for every variable the recipe's ``env`` sets (text, as given).

``relevant`` filters by ``applies_to`` (a stack range whose version is unknown does not exclude a
lesson: lessons only suggest, the gate decides) and ``when``, then orders by priority.
``propose_lessons`` turns measured campaign outcomes into ``status: proposed`` lessons and
``write_proposed`` stores them atomically for a human to review and move into the catalog.
"""

from __future__ import annotations

import difflib
import fnmatch
import os
import re
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator, model_validator
from ruamel.yaml import YAML

from bot.core import levers as catalog
from bot.core.datafile import DataFileError, EntryProblem, load_entries
from bot.core.matcher import Condition, describe, matches, parse_specifier, show, to_data, version_matches
from bot.core.recipe import ENV_ALLOWED_TEXT, PIN_ALIASES, PIN_TYPES, REQUIRED_PINS, env_allowed
from bot.core.records import Scalar
from bot.core.repo import RepoError, find_repo

RelOp = Literal["double", "halve", "next", "prev"]
Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]
LessonId = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9._-]*$")]
LeverName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*$")]

_PATH_SOURCE = re.compile(r"^(?!/)(?!.*\.\.)[A-Za-z0-9_.@+-]+(/[A-Za-z0-9_.@#+-]+)+$")


class LessonFileError(DataFileError):
    """A lessons file is malformed; the message names file, lesson, field and what was expected."""


def _check_source(source: str) -> str:
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
            raise ValueError("give exactly one of 'value' or 'op' (double|halve|next|prev)")
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
    """One cited tuning lesson."""

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
    evidence: str = ""

    @field_validator("source")
    @classmethod
    def _source(cls, source: str) -> str:
        return _check_source(source)

    @model_validator(mode="after")
    def _try_needed(self) -> Lesson:
        if self.auto_propose and not self.try_:
            raise ValueError("'try' must list at least one lever change (or set auto_propose: false)")
        return self


# The ops a relative change may use, by the kind of its lever (bot.core.levers), as the heuristic applies them
# (bot.agent.heuristic ``_relative``): double and halve are arithmetic on an integer (a degree, a batch size); next and
# prev step through the lever's values in order (a choice's catalog order; the legal values of an int or float lever
# in the recipe's search space, bot.agent.space). A flag takes a value (true or false), never an op.
OPS_BY_KIND: dict[str, tuple[str, ...]] = {
    "int": ("double", "halve", "next", "prev"),
    "float": ("next", "prev"),
    "choice": ("next", "prev"),
    "bool": (),
}


def apply_op(op: str, current: Scalar, order: Sequence[Scalar]) -> Scalar | None:
    """The value a lesson's relative ``op`` takes ``current`` to (None: there is none). ``double`` / ``halve`` an
    integer multiply or divide it by 2 (``halve`` stops at 1); otherwise ``next`` / ``double`` step up ``order``
    (the lever's legal values, in order) and ``prev`` / ``halve`` down, None past either end or for a value not in
    it. Which ops a lesson may name for a lever's kind is :data:`OPS_BY_KIND`; this is what each does."""
    if op in ("double", "halve") and isinstance(current, int) and not isinstance(current, bool):
        return current * 2 if op == "double" else (current // 2 if current > 1 else None)
    values = list(order)
    if current not in values:
        return None
    i = values.index(current) + (1 if op in ("next", "double") else -1)
    return values[i] if 0 <= i < len(values) else None


ENV_OPS = ("double", "halve")  # an environment variable is a number of threads or a setting: no order to step through
PINNED_KEYS = frozenset(REQUIRED_PINS) | frozenset(PIN_ALIASES) | frozenset(PIN_TYPES)  # the objective's settings


def _unknown_lever(name: str) -> str:
    close = difflib.get_close_matches(name, list(catalog.CATALOG), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"unknown lever {name!r}{hint} (the lever catalog: bot/core/levers.py)"


def _env_change_problem(change: LeverChange) -> tuple[str, str] | None:
    name = change.lever.removeprefix("env.")
    if not env_allowed(name):
        return "lever", f"{name!r} is not an environment variable a recipe may set ({ENV_ALLOWED_TEXT})"
    if change.op is not None and change.op not in ENV_OPS:
        return "op", f"op {change.op!r} does not apply to an environment variable; use {' or '.join(ENV_OPS)}, or a value"
    return None


def change_problem(change: LeverChange) -> tuple[str, str] | None:
    """Why a campaign could never make ``change`` (the field at fault: lever, op or value; and what is wrong), or None.

    The lever must be in the catalog and not part of the objective; a value must be one the lever accepts
    (:meth:`bot.core.levers.Lever.parse`, as every proposal is checked); an op one its kind takes (``OPS_BY_KIND``).
    """
    if change.lever in PINNED_KEYS:
        what = f", {REQUIRED_PINS[change.lever]}" if change.lever in REQUIRED_PINS else ""
        return "lever", f"{change.lever} is pinned (part of the objective{what}): a campaign never changes it"
    if change.lever.startswith("env."):
        return _env_change_problem(change)
    lever = catalog.CATALOG.get(change.lever)
    if lever is None:
        return "lever", _unknown_lever(change.lever)
    if change.op is not None:
        ops = OPS_BY_KIND[lever.kind]
        if change.op not in ops:
            takes = f"it takes {', '.join(ops)} or a value" if ops else "give a value (true or false)"
            return "op", f"op {change.op!r} does not apply to {lever.name} (a {lever.kind} lever): {takes}"
        return None
    try:
        lever.parse(change.value)
    except catalog.LeverError as exc:
        return "value", str(exc).removeprefix(f"{lever.name}: ")
    return None


def try_problem(lesson: Lesson) -> EntryProblem | None:
    """The first change in ``lesson``'s ``try`` a campaign could never make (:func:`change_problem`), or None: the
    check :func:`load_lessons` runs on every lesson (an unknown lever, a pinned key, an op or a value the lever cannot
    take is a load error, never a lesson a campaign silently skips; an ``env.`` change is advice for a person)."""
    for i, change in enumerate(lesson.try_):
        found = change_problem(change)
        if found is not None:
            field, message = found
            return EntryProblem(("try", i, field), message)
    return None


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
    if lesson.evidence:
        data["evidence"] = lesson.evidence
    return data


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
        for lesson in load_entries(path, "lessons", Lesson, LessonFileError, kind="lesson", check=try_problem):
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
        raise LessonFileError(f"{shipped}: ATTUNE's lessons catalog is missing from the installed package; reinstall ATTUNE")
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
) -> list[Lesson]:
    """Lessons that apply to ``ctx`` and whose ``when`` matches, highest priority first (stable)."""
    hits = [
        lesson
        for lesson in lessons
        if (include_proposed or lesson.status == "curated")
        and (include_manual or lesson.auto_propose)
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
        f"{lesson.id}  (priority {lesson.priority}, {lesson.status}{'' if lesson.auto_propose else ', manual'})"
    ]
    if lesson.title:
        lines.append(lesson.title)
    lines.append(f"when:       {describe(lesson.when) if lesson.when is not None else 'always'}")
    if lesson.try_:
        lines.append(
            "try:        " + "\n            ".join(f"{i}. {c.render()}" for i, c in enumerate(lesson.try_, 1))
        )
    else:
        lines.append("try:        (nothing automatic)")
    lines.append(f"why:        {lesson.why}")
    lines.append(f"source:     {lesson.source}")
    if lesson.evidence:
        lines.append(f"evidence:   {lesson.evidence}")
    lines.append(
        f"applies to: models {', '.join(scope.models)}; hardware {', '.join(scope.hardware)}; stack {stack}"
    )
    return "\n".join(lines)


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def render_table(lessons: Sequence[Lesson]) -> str:
    """A plain aligned table for ``attune lessons list``."""
    rows = [("ID", "PRI", "TRY", "SOURCE")]
    for lesson in lessons:
        first = lesson.try_[0].render() if lesson.try_ else "-"
        more = f" (+{len(lesson.try_) - 1})" if len(lesson.try_) > 1 else ""
        manual = "" if lesson.auto_propose else "(manual) "
        rows.append(
            (lesson.id, str(lesson.priority), _clip(manual + first + more, 48), _clip(lesson.source, 70))
        )
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    out = []
    for row in rows:
        out.append("  ".join(cell.ljust(widths[i]) if i < 3 else cell for i, cell in enumerate(row)).rstrip())
    return "\n".join(out)


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
        return _check_source(record)


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
        key = (m.lever, repr(m.from_), repr(m.to), m.model, m.hardware)  # (a campaign's steps are all simulated or none)
        groups.setdefault(key, []).append(m)
    proposed: list[dict[str, Any]] = []
    for (lever, _, _, model, hardware), group in groups.items():
        first = group[0]
        gain = sum(m.gain for m in group) / len(group)
        lesson = {
            "id": _slug(f"measured-{lever}-{first.from_}-to-{first.to}-" + (f"in-{origin}" if origin else f"{model}-{hardware}")),
            "title": f"{lever}: {first.from_!r} -> {first.to!r} on {model} / {hardware}",
            "when": {"field": f"levers.{lever}", "op": "eq", "value": first.from_},
            "try": [{"lever": lever, "value": first.to}],
            "why": (f"SIMULATED (the simulator, not a measurement): {gain:+.1%} tokens/s" if first.simulated else f"Measured {gain:+.1%} tokens/s")
                   + f" on {model} / {hardware} over {len(group)} kept step(s).",
            "source": first.record,
            "applies_to": {"models": [model], "hardware": [hardware]},
            "priority": max(1, min(99, round(gain * 100))),
            "status": "proposed",
            "evidence": "records: " + ", ".join(m.record for m in group),
        }
        Lesson.model_validate(lesson)
        proposed.append(lesson)
    return proposed


def write_proposed(
    lessons: Iterable[Mapping[str, Any] | Lesson], path: Path | str, *, merge: bool = True
) -> Path:
    """Write proposed lessons to ``path`` atomically (temp file in the same folder, then rename).

    With ``merge`` an existing file keeps its lessons except those whose id is rewritten.
    Every lesson is validated first; nothing is written if one is malformed.
    """
    target = Path(path)
    new = [
        lesson if isinstance(lesson, Lesson) else Lesson.model_validate(dict(lesson)) for lesson in lessons
    ]
    kept: list[Lesson] = []
    if merge and target.exists():
        ids = {lesson.id for lesson in new}
        old = load_entries(target, "lessons", Lesson, LessonFileError, kind="lesson", check=try_problem)
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
