"""A small, safe condition matcher: conditions are data (YAML), never code.

A condition is one of

* a leaf ``{field: <dotted name>, op: <op>, value: <v>}`` (optional ``icase: true`` makes string
  comparisons case-insensitive), with ``op`` one of ``eq ne in not_in lt le gt ge exists absent
  version_in``;
* a combinator ``{all: [cond, ...]}``, ``{any: [cond, ...]}`` or ``{not: cond}``.

Conditions are evaluated against a *flat* context: a dict whose keys are dotted names
(``parallelism.tensor_parallel_degree``) and whose values are plain scalars or lists.
``flatten`` turns a nested mapping into such a dict.

Semantics (pure, total, never raises on any context):

* A field that is not in the context makes every leaf false except ``absent`` (which is true).
  So ``ne``/``not_in`` are *false* on a missing field; write ``{not: {... op: eq ...}}`` to mean
  "anything but", missing included.
* ``eq``/``ne``/``in``/``not_in`` never equate a bool with a number (``true`` is not ``1``).
* ``lt le gt ge`` compare numbers only (bools excluded); any other type is no match.
* ``version_in`` takes a PEP 440 specifier set (``">=2.10,<2.14"``; ``""`` matches every version)
  and compares with ``packaging.version``; local labels (``2.13.0+cpu``) are ignored as PEP 440
  says, and pre-/dev-releases (nightlies such as ``2.13.0.dev20260614``) are included.
  An unparsable version is no match.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version
from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    TypeAdapter,
    ValidationInfo,
    field_validator,
)

Op = Literal["eq", "ne", "in", "not_in", "lt", "le", "gt", "ge", "exists", "absent", "version_in"]

_FIELD_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*(\.[A-Za-z0-9_-]+)*$")
_MISSING = object()

_OP_WORDS = {
    "eq": "==",
    "ne": "!=",
    "in": "in",
    "not_in": "not in",
    "lt": "<",
    "le": "<=",
    "gt": ">",
    "ge": ">=",
    "exists": "exists",
    "absent": "is absent",
    "version_in": "version in",
}


def show(value: Any) -> str:
    """Render a value YAML-style for messages: ``true``/``false``/``null``, other values by repr."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    return repr(value)


def parse_specifier(spec: str) -> SpecifierSet:
    """Parse a PEP 440 specifier set; raise ``ValueError`` with a clear message if it is invalid."""
    try:
        return SpecifierSet(spec)
    except InvalidSpecifier:
        raise ValueError(f"expected a PEP 440 version specifier such as '>=2.10,<2.14'; got {spec!r}") from None


def version_matches(spec: str, version: object) -> bool:
    """True when ``version`` (a string such as ``2.13.0+cpu``) satisfies the specifier set ``spec``."""
    if not isinstance(version, str):
        return False
    try:
        parsed = Version(version)
    except InvalidVersion:
        return False
    try:
        return parse_specifier(spec).contains(parsed, prereleases=True)
    except ValueError:
        return False


class _Unset:
    """Marks a leaf written without ``value`` (``null`` is a legitimate value for ``eq``)."""

    def __repr__(self) -> str:
        return "<unset>"


_UNSET = _Unset()


class Leaf(BaseModel):
    """``{field, op, value}``: compare one context field."""

    model_config = ConfigDict(extra="forbid")

    field: str
    op: Op
    value: Any = Field(default=_UNSET, validate_default=True)
    icase: bool = False

    @field_validator("field")
    @classmethod
    def _check_field(cls, name: str) -> str:
        if not _FIELD_RE.match(name):
            raise ValueError(f"expected a dotted name such as 'training.seq_len'; got {name!r}")
        return name

    @field_validator("value")
    @classmethod
    def _check_value(cls, value: Any, info: ValidationInfo) -> Any:
        op = info.data.get("op")
        if op is None:  # the op itself is invalid; that error is reported on its own
            return None if value is _UNSET else value
        if op in ("exists", "absent"):
            if value is not _UNSET and value is not None:
                raise ValueError(f"op {op!r} takes no value; got {value!r}")
            return None
        if value is _UNSET:
            raise ValueError(f"op {op!r} needs a value")
        if op in ("in", "not_in") and not isinstance(value, list):
            raise ValueError(f"op {op!r} needs a list value; got {value!r}")
        if op in ("lt", "le", "gt", "ge") and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise ValueError(f"op {op!r} needs a number value; got {value!r}")
        if op == "version_in":
            if not isinstance(value, str):
                raise ValueError(f"op 'version_in' needs a PEP 440 specifier string; got {value!r}")
            parse_specifier(value)
        return value


class AllOf(BaseModel):
    """``{all: [...]}``: every condition matches (an empty list matches)."""

    model_config = ConfigDict(extra="forbid")

    all: list[Condition]


class AnyOf(BaseModel):
    """``{any: [...]}``: at least one condition matches (an empty list never matches)."""

    model_config = ConfigDict(extra="forbid")

    any: list[Condition]


class NotOf(BaseModel):
    """``{not: cond}``: the condition does not match."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    not_: Condition = Field(alias="not")


def _condition_tag(data: Any) -> str | None:
    if isinstance(data, BaseModel):
        return {Leaf: "<leaf>", AllOf: "<all>", AnyOf: "<any>", NotOf: "<not>"}.get(type(data))
    if not isinstance(data, dict):
        return None
    for key, tag in (("field", "<leaf>"), ("all", "<all>"), ("any", "<any>"), ("not", "<not>")):
        if key in data:
            return tag
    return None


Condition = Annotated[
    Annotated[Leaf, Tag("<leaf>")]
    | Annotated[AllOf, Tag("<all>")]
    | Annotated[AnyOf, Tag("<any>")]
    | Annotated[NotOf, Tag("<not>")],
    Discriminator(
        _condition_tag,
        custom_error_type="condition_shape",
        custom_error_message=(
            "expected a condition: {field, op, value} or {all: [...]} or {any: [...]} or {not: condition}"
        ),
    ),
]

AllOf.model_rebuild()
AnyOf.model_rebuild()
NotOf.model_rebuild()

_ADAPTER: TypeAdapter[Leaf | AllOf | AnyOf | NotOf] = TypeAdapter(Condition)


def parse_condition(data: Any) -> Leaf | AllOf | AnyOf | NotOf:
    """Validate plain data (from YAML) into a condition; raises ``pydantic.ValidationError``."""
    return _ADAPTER.validate_python(data)


def flatten(nested: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Flatten nested mappings into dotted keys; lists and scalars stay values."""
    flat: dict[str, Any] = {}
    for key, value in nested.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, Mapping):
            flat.update(flatten(value, name))
        else:
            flat[name] = value
    return flat


def _norm(value: Any, icase: bool) -> Any:
    return value.casefold() if icase and isinstance(value, str) else value


def _equal(a: Any, b: Any, icase: bool) -> bool:
    if isinstance(a, bool) != isinstance(b, bool):
        return False
    return bool(_norm(a, icase) == _norm(b, icase))


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _leaf_matches(leaf: Leaf, ctx: Mapping[str, Any]) -> bool:
    actual = ctx.get(leaf.field, _MISSING)
    if leaf.op == "absent":
        return actual is _MISSING
    if actual is _MISSING:
        return False
    op, value, icase = leaf.op, leaf.value, leaf.icase
    if op == "exists":
        return True
    if op == "eq":
        return _equal(actual, value, icase)
    if op == "ne":
        return not _equal(actual, value, icase)
    if op == "in":
        return any(_equal(actual, v, icase) for v in value)
    if op == "not_in":
        return not any(_equal(actual, v, icase) for v in value)
    if op == "version_in":
        return version_matches(value, actual)
    if not _is_number(actual):
        return False
    if op == "lt":
        return bool(actual < value)
    if op == "le":
        return bool(actual <= value)
    if op == "gt":
        return bool(actual > value)
    return bool(actual >= value)  # ge


def matches(cond: Leaf | AllOf | AnyOf | NotOf, ctx: Mapping[str, Any]) -> bool:
    """Evaluate ``cond`` against the flat context ``ctx``."""
    if isinstance(cond, Leaf):
        return _leaf_matches(cond, ctx)
    if isinstance(cond, AllOf):
        return all(matches(c, ctx) for c in cond.all)
    if isinstance(cond, AnyOf):
        return any(matches(c, ctx) for c in cond.any)
    return not matches(cond.not_, ctx)


def fields(cond: Leaf | AllOf | AnyOf | NotOf, *, negated: bool = True) -> set[str]:
    """Every context field the condition reads (to check a context for completeness); with ``negated=False`` only
    those it reads outside any ``not``: the fields whose value makes it fire."""
    if isinstance(cond, Leaf):
        return {cond.field}
    if isinstance(cond, AllOf):
        return set().union(*(fields(c, negated=negated) for c in cond.all))
    if isinstance(cond, AnyOf):
        return set().union(*(fields(c, negated=negated) for c in cond.any))
    return fields(cond.not_) if negated else set()


def positive_fields(cond: Leaf | AllOf | AnyOf | NotOf) -> set[str]:
    """The fields the condition reads outside any ``not`` (a lesson that fires on a cost's share reads it there;
    one held back by it reads it under ``not``)."""
    return fields(cond, negated=False)


def describe(cond: Leaf | AllOf | AnyOf | NotOf) -> str:
    """A one-line human rendering, e.g. ``all(diagnosis.outcome == 'oom', levers.x > 1)``."""
    if isinstance(cond, Leaf):
        word = _OP_WORDS[cond.op]
        if cond.op in ("exists", "absent"):
            return f"{cond.field} {word}"
        suffix = " (any case)" if cond.icase else ""
        return f"{cond.field} {word} {show(cond.value)}{suffix}"
    if isinstance(cond, AllOf):
        return "all(" + ", ".join(describe(c) for c in cond.all) + ")"
    if isinstance(cond, AnyOf):
        return "any(" + ", ".join(describe(c) for c in cond.any) + ")"
    return "not(" + describe(cond.not_) + ")"


def explain(cond: Leaf | AllOf | AnyOf | NotOf, ctx: Mapping[str, Any]) -> str:
    """A checklist of the condition tree: ``[x]`` marks what matched, ``[ ]`` what did not.

    Leaves show the actual context value, so a reader sees why a rule fired (or did not).
    """
    lines: list[str] = []

    def walk(node: Leaf | AllOf | AnyOf | NotOf, depth: int) -> None:
        mark = "[x]" if matches(node, ctx) else "[ ]"
        pad = "  " * depth
        if isinstance(node, Leaf):
            actual = ctx.get(node.field, _MISSING)
            shown = "missing" if actual is _MISSING else show(actual)
            lines.append(f"{pad}{mark} {describe(node)}  (actual: {shown})")
            return
        if isinstance(node, NotOf):
            lines.append(f"{pad}{mark} not")
            walk(node.not_, depth + 1)
            return
        children = node.all if isinstance(node, AllOf) else node.any
        lines.append(f"{pad}{mark} {'all' if isinstance(node, AllOf) else 'any'}")
        for child in children:
            walk(child, depth + 1)

    walk(cond, 0)
    return "\n".join(lines)


def matched_leaves(cond: Leaf | AllOf | AnyOf | NotOf, ctx: Mapping[str, Any]) -> list[Leaf]:
    """The leaves of ``cond`` that are true in ``ctx`` (in tree order)."""
    if isinstance(cond, Leaf):
        return [cond] if matches(cond, ctx) else []
    if isinstance(cond, NotOf):
        return matched_leaves(cond.not_, ctx)
    children = cond.all if isinstance(cond, AllOf) else cond.any
    return [leaf for child in children for leaf in matched_leaves(child, ctx)]


def to_data(cond: Leaf | AllOf | AnyOf | NotOf) -> dict[str, Any]:
    """Plain data for a condition (the YAML form ``parse_condition`` reads back)."""
    if isinstance(cond, Leaf):
        data: dict[str, Any] = {"field": cond.field, "op": cond.op}
        if cond.op not in ("exists", "absent"):
            data["value"] = cond.value
        if cond.icase:
            data["icase"] = True
        return data
    if isinstance(cond, AllOf):
        return {"all": [to_data(c) for c in cond.all]}
    if isinstance(cond, AnyOf):
        return {"any": [to_data(c) for c in cond.any]}
    return {"not": to_data(cond.not_)}
