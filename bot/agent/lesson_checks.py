"""Whether a campaign could ever make a lesson's ``try`` changes (checked at load), and what a relative op does."""

from __future__ import annotations

import difflib
from collections.abc import Sequence

from bot.agent.lesson_schema import Lesson, LeverChange
from bot.core import levers as catalog
from bot.core.datafile import EntryProblem
from bot.core.diagnosis import Diagnosis
from bot.core.matcher import AllOf, AnyOf, Leaf, NotOf
from bot.core.recipe import ENV_ALLOWED_TEXT, PIN_ALIASES, PIN_TYPES, REQUIRED_PINS, env_allowed
from bot.core.records import Scalar

# The ops a relative change may use, by the kind of its lever (bot.core.levers), as the heuristic applies them
# (bot.agent.heuristic ``_relative``): double and halve are arithmetic on an integer (a degree, a batch size); next and
# prev step through the lever's values in order (a choice's catalog order; the legal values of an int or float lever
# in the recipe's search space, bot.agent.space); max takes an integer to the largest of them that torchtitan would
# start with the incumbent's other levers. A flag takes a value (true or false), never an op.
OPS_BY_KIND: dict[str, tuple[str, ...]] = {
    "int": ("double", "halve", "next", "prev", "max"),
    "float": ("next", "prev"),
    "choice": ("next", "prev"),
    "bool": (),
}


def apply_op(op: str, current: Scalar | None, order: Sequence[Scalar]) -> Scalar | None:
    """The value a lesson's relative ``op`` takes ``current`` to (None: there is none). ``double`` / ``halve`` an
    integer multiply or divide it by 2 (``halve`` stops at 1); otherwise ``next`` / ``double`` step up ``order``
    (the lever's legal values, in order) and ``prev`` / ``halve`` down, None past either end or for a value not in
    it; ``max`` takes it to the last of ``order`` (None when it is there already; the heuristic walks down from there
    to the largest legal layout). Which ops a lesson may name for a lever's kind is :data:`OPS_BY_KIND`."""
    if op == "max":
        values = list(order)
        return values[-1] if values and current != values[-1] else None
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
        return (
            "op",
            f"op {change.op!r} does not apply to an environment variable; use {' or '.join(ENV_OPS)}, or a value",
        )
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


# What a lesson's ``when`` may read (bot.agent.policy.lesson_context builds it; docs/lessons.md lists it): a field
# outside these never exists, so a condition on it never matches and the lesson would be silently dead.
RECIPE_CONTEXT = frozenset(
    {
        "hardware",
        "devices",
        "nodes",
        "model",
        "moe",
        "global_batch_pinned",
        "devices_per_node",
        "expert_parallel_groups_per_node",
        "seq_len",
        "tokens_per_microbatch",
        "grad_accum_steps",
    }
)
DIAGNOSIS_CONTEXT = frozenset(set(Diagnosis.model_fields) - {"breakdown", "spans_ms"})


def field_problem(name: str) -> str | None:
    """Why a ``when`` condition's ``field`` is one the lessons' context never holds (None: it can hold it)."""
    head, _, rest = name.partition(".")
    if head == "stack" and rest:
        return None
    if head == "recipe" and (rest in RECIPE_CONTEXT or rest.startswith("env.") and len(rest) > 4):
        return None
    if head == "diagnosis" and (
        rest in DIAGNOSIS_CONTEXT or rest.startswith("breakdown.") and rest.endswith("_frac") and len(rest) > 15
    ):
        return None
    if head == "levers" and rest in catalog.CATALOG:
        return None
    if head == "levers" and rest.startswith("env."):
        return f"{name!r} is not in the context a lesson reads; the recipe's environment is read as recipe.{rest}"
    if head == "levers":
        return f"{name!r} names no lever: {_unknown_lever(rest)}"
    known = {
        "recipe": ", ".join(f"recipe.{k}" for k in sorted(RECIPE_CONTEXT)) + ", recipe.env.<VARIABLE>",
        "diagnosis": ", ".join(f"diagnosis.{k}" for k in sorted(DIAGNOSIS_CONTEXT))
        + ", diagnosis.breakdown.<cost>_frac",
    }
    if head in known:
        return f"{name!r} is not in the context a lesson reads; expected one of {known[head]}"
    return f"{name!r} is not in the context a lesson reads; expected diagnosis.*, recipe.*, stack.* or levers.<lever>"


def _leaves(cond: object, path: tuple) -> list[tuple[tuple, Leaf]]:
    if isinstance(cond, Leaf):
        return [(path, cond)]
    if isinstance(cond, AllOf | AnyOf):
        key = "all" if isinstance(cond, AllOf) else "any"
        items = cond.all if isinstance(cond, AllOf) else cond.any
        return [leaf for i, c in enumerate(items) for leaf in _leaves(c, (*path, key, i))]
    if isinstance(cond, NotOf):
        return _leaves(cond.not_, (*path, "not"))
    return []


def lesson_problem(lesson: Lesson) -> EntryProblem | None:
    """The first ``when`` field the lessons' context never holds (:func:`field_problem`), else the first ``try`` change
    a campaign could never make (:func:`try_problem`), or None: the check :func:`load_lessons` runs on every lesson."""
    for path, leaf in _leaves(lesson.when, ("when",)):
        message = field_problem(leaf.field)
        if message is not None:
            return EntryProblem((*path, "field"), message)
    return try_problem(lesson)
