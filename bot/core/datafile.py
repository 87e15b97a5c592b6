"""Loading cited YAML data files (rules, lessons) with one clear error per bad file.

``load_entries`` reads a file shaped ``{<key>: [entry, ...]}`` with ruamel.yaml, validates every
entry with a pydantic model and, on the first problem, raises the caller's ``DataFileError``
subclass with a complete message: file, line, entry index and id, the dotted field, what was
expected and what was found. Nothing is half-loaded: a file either loads whole or raises. A
``check`` passed to ``load_entries`` sees every validated entry and may refuse it with an
:class:`EntryProblem` (a field of the entry and what is wrong), reported the same way at that
field's line: for rules that need more than the entry itself (a lesson's lever is in the catalog).

Files are read as UTF-8 (:func:`bot.core.textfile.read_utf8`); any other encoding is a one-line
``DataFileError`` naming the file, line and byte.

The round-trip loader is used only to learn line numbers; it never constructs Python objects
from tags (any explicit tag such as ``!!python/object`` or ``!foo`` is refused), and the result is
converted to plain dict/list/str/int/float/bool/None before validation.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from bot.core.textfile import NotText, read_utf8
from bot.core.yamlguard import yaml_problem

M = TypeVar("M", bound=BaseModel)

Lines = dict[tuple[Any, ...], int]


class DataFileError(Exception):
    """A data file (rules, lessons) is malformed; the message says where and what was expected."""


class EntryProblem(NamedTuple):
    """What a ``load_entries`` check found wrong with one entry: the field (a path of the entry's own keys and list
    indexes, as in the file: ``("try", 1, "op")``; empty for the entry itself) and what is wrong there."""

    field: tuple[str | int, ...]
    message: str


def _tag_of(node: Any) -> str | None:
    tag = getattr(node, "tag", None)
    value = getattr(tag, "value", tag) if tag is not None else None
    return value if isinstance(value, str) and value else None


def _plain(node: Any, path: tuple[Any, ...], lines: Lines, where: str, line: int | None) -> Any:
    """Convert ruamel round-trip nodes into plain Python data, recording 1-based line numbers."""
    tag = _tag_of(node)
    if tag is not None:
        at = f", line {line}" if line else ""
        raise DataFileError(f"{where}{at}: YAML tags such as {tag!r} are not allowed in data files")
    if isinstance(node, CommentedMap):
        out: dict[Any, Any] = {}
        for key, value in node.items():
            try:
                key_line = node.lc.key(key)[0] + 1
            except (KeyError, TypeError, AttributeError):
                key_line = line
            lines[path + (key,)] = key_line or 0
            out[str(key) if not isinstance(key, int | bool) else key] = _plain(
                value, path + (key,), lines, where, key_line
            )
        return out
    if isinstance(node, CommentedSeq):
        items = []
        for i, value in enumerate(node):
            try:
                item_line = node.lc.item(i)[0] + 1
            except (KeyError, TypeError, AttributeError, IndexError):
                item_line = line
            lines[path + (i,)] = item_line or 0
            items.append(_plain(value, path + (i,), lines, where, item_line))
        return items
    if isinstance(node, bool) or type(node).__name__ == "ScalarBoolean":
        return bool(node)
    if isinstance(node, int):
        return int(node)
    if isinstance(node, float):
        return float(node)
    if isinstance(node, str):
        return str(node)
    if isinstance(node, _dt.date | _dt.datetime):
        return node.isoformat()
    if node is None:
        return None
    raise DataFileError(f"{where}, line {line}: unsupported YAML value {node!r}")


def load_yaml(path: Path) -> tuple[Any, Lines]:
    """Read one YAML file into plain data plus a map from data path to line number."""
    where = str(path)
    try:
        text = read_utf8(path)
    except NotText as exc:
        raise DataFileError(str(exc)) from None
    except OSError as exc:
        raise DataFileError(f"{where}: cannot read file: {exc.strerror or exc}") from None
    problem = yaml_problem(text, where)  # no anchors or aliases, at most 1 MiB
    if problem is not None:
        raise DataFileError(problem)
    yaml = YAML(typ="rt", pure=True)
    try:
        root = yaml.load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        at = f", line {mark.line + 1}" if mark is not None else ""
        problem = exc.problem or exc.context or "invalid YAML"
        raise DataFileError(f"{where}{at}: YAML syntax error: {problem}") from None
    except YAMLError as exc:
        raise DataFileError(f"{where}: YAML error: {exc}") from None
    lines: Lines = {}
    return _plain(root, (), lines, where, 1), lines


def _data_path(entry: Any, loc: Sequence[Any]) -> list[Any]:
    """Map a pydantic error location onto the entry's own keys (dropping union tags)."""
    path: list[Any] = []
    node = entry
    for part in loc:
        if (
            isinstance(node, dict)
            and part in node
            or isinstance(node, list)
            and isinstance(part, int)
            and 0 <= part < len(node)
        ):
            path.append(part)
            node = node[part]
        elif isinstance(node, dict) and isinstance(part, str) and not part.startswith("<"):
            path.append(part)  # a missing or unknown key: name it, then stop descending
            node = None
    return path


def _message(err: ErrorDetails, allowed: Sequence[str]) -> str:
    kind = err.get("type", "")
    msg = str(err.get("msg", "invalid value"))
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            msg = msg[len(prefix) :]
    if kind == "missing":
        return "required field is missing"
    if kind == "extra_forbidden":
        hint = f" (allowed: {', '.join(allowed)})" if allowed else ""
        return f"unknown field{hint}"
    if msg.startswith("Input should be "):
        msg = "expected " + msg[len("Input should be ") :]
    shown = repr(err.get("input"))
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return f"{msg}; got {shown}" if "got " not in msg else msg


def _allowed_fields(model: type[BaseModel], path: list[Any]) -> list[str]:
    if len(path) != 1:
        return []
    return sorted(f.alias or name for name, f in model.model_fields.items())


def format_validation_error(
    where: str,
    kind: str,
    index: int,
    entry: Any,
    exc: ValidationError,
    lines: Lines,
    base: tuple[Any, ...],
    model: type[BaseModel],
) -> str:
    """One complete message for the first problem of one entry."""
    errors = exc.errors()
    first = errors[0]
    path = _data_path(entry, first.get("loc", ()))
    dotted = ".".join(str(p) for p in path) or "(the entry itself)"
    line = _line_at(lines, base + tuple(path))
    entry_id = entry.get("id") if isinstance(entry, dict) else None
    ident = f" (id {entry_id!r})" if entry_id is not None else ""
    at = f", line {line}" if line else ""
    more = f" [{len(errors) - 1} more problem(s) in this {kind}]" if len(errors) > 1 else ""
    message = _message(first, _allowed_fields(model, path))
    return f"{where}{at}: {kind} {index}{ident}: field '{dotted}': {message}{more}"


def _line_at(lines: Lines, path: tuple[Any, ...]) -> int:
    """The line of the deepest prefix of ``path`` the file knows (0: none)."""
    for cut in range(len(path), -1, -1):
        line = lines.get(path[:cut], 0)
        if line:
            return line
    return 0


def format_entry_problem(
    where: str, kind: str, index: int, entry: Any, problem: EntryProblem, lines: Lines, base: tuple[Any, ...]
) -> str:
    """One complete message for a problem a ``load_entries`` check found, at the line of its field."""
    line = _line_at(lines, base + tuple(problem.field))
    entry_id = entry.get("id") if isinstance(entry, dict) else None
    ident = f" (id {entry_id!r})" if entry_id is not None else ""
    at = f", line {line}" if line else ""
    dotted = ".".join(str(p) for p in problem.field) or "(the entry itself)"
    return f"{where}{at}: {kind} {index}{ident}: field '{dotted}': {problem.message}"


def load_entries(
    path: Path,
    key: str,
    model: type[M],
    error: type[DataFileError],
    kind: str = "entry",
    check: Callable[[M], EntryProblem | None] | None = None,
) -> list[M]:
    """Load ``{key: [entries]}`` from ``path``; every entry validated by ``model`` (then by ``check``, if given:
    the first problem it returns is the error); ids unique."""
    where = str(path)
    try:
        data, lines = load_yaml(path)
    except DataFileError as exc:
        raise error(str(exc)) from None
    if not isinstance(data, dict) or not isinstance(data.get(key), list):
        raise error(f"{where}: expected a mapping with a '{key}' list at the top level")
    unknown = sorted(set(data) - {key, "about"})
    if unknown:
        raise error(f"{where}: unknown top-level key(s) {unknown}; allowed: '{key}', 'about'")
    out: list[M] = []
    seen: dict[str, int] = {}
    for index, entry in enumerate(data[key]):
        try:
            item = model.model_validate(entry)
        except ValidationError as exc:
            raise error(format_validation_error(where, kind, index, entry, exc, lines, (key, index), model)) from None
        problem = check(item) if check is not None else None
        if problem is not None:
            raise error(format_entry_problem(where, kind, index, entry, problem, lines, (key, index)))
        entry_id = getattr(item, "id", None)
        if isinstance(entry_id, str):
            if entry_id in seen:
                line = lines.get((key, index, "id"), 0)
                at = f", line {line}" if line else ""
                raise error(
                    f"{where}{at}: {kind} {index} (id {entry_id!r}): field 'id': "
                    f"duplicate id, already used by {kind} {seen[entry_id]}"
                )
            seen[entry_id] = index
        out.append(item)
    return out
