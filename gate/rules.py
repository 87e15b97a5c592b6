"""The gate's data-driven rules: known stack defects and the tier of every config field.

Two cited YAML files live beside this module in ``rules/``:

* ``defects.yaml`` — known stack defects. Each rule names the stack it ``affects`` (torch and
  torchtitan PEP 440 ranges, device families) and a ``when`` condition (``bot.core.matcher``) over the
  candidate's context: the resolved torchtitan config flattened to dotted keys
  (``parallelism.tensor_parallel_degree``), plus ``stack.*``, ``derived.*``, ``workload.*``,
  ``model.*``, ``runtime.*``, ``env.*`` and ``recipe.*`` keys (see ``defects.yaml``'s ``about``).
  A rule fires when both match; its ``action`` is ``reject`` or ``require_convergence``.
  A stack range that cannot be checked because the context lacks the version never fires;
  ``missing_context`` lists such gaps so the config check can warn about them.
* ``objective.yaml`` — resolved config fields (fnmatch globs over dotted names) → tier
  ``B`` (bit-identical), ``R`` (reduction order), ``N`` (numerics/precision, a policy decision) or
  ``X`` (objective-changing). **The first rule that applies wins**, so specific patterns come
  before general ones. A rule with ``values`` applies only when one of the values passed to
  ``classify`` is in that list (or when no values are passed: the conservative reading). A field
  no rule covers is ``X`` (fail closed).

A malformed file raises ``RuleFileError`` naming the file, line, entry (index and id), field and
what was expected.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator, model_validator

from bot.core.datafile import DataFileError, load_entries
from bot.core.matcher import Condition, explain, fields, matches, parse_specifier, version_matches

RULES_DIR = Path(__file__).resolve().parent / "rules"
DEFECTS_FILE = RULES_DIR / "defects.yaml"
OBJECTIVE_FILE = RULES_DIR / "objective.yaml"

Tier = Literal["B", "R", "N", "X"]
TIER_ORDER: dict[str, int] = {"B": 0, "R": 1, "N": 2, "X": 3}
DeviceFamily = Literal["cuda", "rocm", "xpu", "cpu", "any"]
Action = Literal["reject", "require_convergence"]
# Invariants a tier rule may demand; the invariants engine (config check) verifies them.
Invariant = Literal["global_batch_pinned", "seed_checkpoint", "lr_schedule_pinned"]

Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]
RuleId = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9._-]*$")]


class RuleFileError(DataFileError):
    """A rule file is malformed; the message names file, entry, field and what was expected."""


def _https(url: str) -> str:
    if not url.startswith("https://") or len(url) <= len("https://"):
        raise ValueError(f"expected a URL starting with https://; got {url!r}")
    return url


class Affects(BaseModel):
    """The stack a defect lives in: PEP 440 ranges ("" = any version) and device families."""

    model_config = ConfigDict(extra="forbid")

    torch: str = ""
    torchtitan: str = ""
    devices: list[DeviceFamily] = Field(min_length=1)

    @field_validator("torch", "torchtitan")
    @classmethod
    def _specifier(cls, spec: str) -> str:
        parse_specifier(spec)
        return spec


class DefectRule(BaseModel):
    """One known stack defect, cited."""

    model_config = ConfigDict(extra="forbid")

    id: RuleId
    title: Text
    source: str
    refs: list[str] = []
    affects: Affects
    when: Condition
    symptom: Text
    action: Action
    silent: bool = False  # the run finishes but trains something wrong
    fixed_in: str = ""
    workaround: str = ""
    note: str = ""
    evidence: str = ""  # measured evidence (e.g. a reference file section) backing the cited source

    @field_validator("source")
    @classmethod
    def _check_source(cls, url: str) -> str:
        return _https(url)

    @field_validator("refs")
    @classmethod
    def _check_refs(cls, refs: list[str]) -> list[str]:
        return [_https(r) for r in refs]


class TierRule(BaseModel):
    """Dotted-name glob → tier, with the reason and its source."""

    model_config = ConfigDict(extra="forbid")

    pattern: Text
    tier: Tier
    id: RuleId | None = None  # a name for the rule (reasons say it); default: the pattern
    why: Text
    source: str
    precision: bool = False
    values: list[Any] | None = None
    requires: list[Invariant] = []

    @field_validator("source")
    @classmethod
    def _check_source(cls, url: str) -> str:
        return _https(url)

    @model_validator(mode="after")
    def _precision_tier(self) -> TierRule:
        if self.precision and self.tier not in ("N", "X"):
            raise ValueError(f"a precision field must be tier N or X; got tier {self.tier!r}")
        return self

    @property
    def name(self) -> str:
        """What a reason calls this rule: its ``id``, else its pattern."""
        return self.id or self.pattern

    def applies(self, field: str, values: Sequence[Any] = ()) -> bool:
        """True when the pattern covers ``field`` and (if restricted) a value is in ``values``."""
        if not fnmatch.fnmatchcase(field, self.pattern):
            return False
        if self.values is None or not values:
            return True
        return any(v in self.values for v in values)


FAIL_CLOSED = TierRule(
    pattern="*",
    tier="X",
    why="not classified by gate/rules/objective.yaml: unknown fields change the objective until classified",
    source="https://github.com/pytorch/torchtitan/blob/main/docs/debugging.md",
)


def load_defects(path: Path | str | None = None) -> list[DefectRule]:
    """Load and validate ``defects.yaml`` (or ``path``); raises ``RuleFileError``."""
    return load_entries(Path(path) if path else DEFECTS_FILE, "defects", DefectRule, RuleFileError, kind="entry")


def load_tiers(path: Path | str | None = None) -> list[TierRule]:
    """Load and validate ``objective.yaml`` (or ``path``), keeping file order; raises ``RuleFileError``."""
    return load_entries(Path(path) if path else OBJECTIVE_FILE, "tiers", TierRule, RuleFileError, kind="entry")


@lru_cache(maxsize=1)
def _default_tiers() -> tuple[TierRule, ...]:
    return tuple(load_tiers())


def classify(field: str, *, values: Sequence[Any] = (), rules: Sequence[TierRule] | None = None) -> TierRule:
    """The first tier rule that applies to ``field`` (given its old/new ``values``), else ``FAIL_CLOSED``."""
    for rule in _default_tiers() if rules is None else rules:
        if rule.applies(field, values):
            return rule
    return FAIL_CLOSED


def strictest(rules: Iterable[TierRule]) -> TierRule:
    """The rule with the most restrictive tier (``X`` > ``N`` > ``R`` > ``B``); ``FAIL_CLOSED`` if none."""
    best: TierRule | None = None
    for rule in rules:
        if best is None or TIER_ORDER[rule.tier] > TIER_ORDER[best.tier]:
            best = rule
    return best or FAIL_CLOSED


def _stack_checks(affects: Affects) -> list[tuple[str, str]]:
    return [
        (key, spec) for key, spec in (("stack.torch", affects.torch), ("stack.torchtitan", affects.torchtitan)) if spec
    ]


def affects_matches(affects: Affects, ctx: Mapping[str, Any]) -> bool:
    """True when the context's stack (``stack.torch``, ``stack.torchtitan``, ``stack.device_family``) is affected."""
    for key, spec in _stack_checks(affects):
        if not version_matches(spec, ctx.get(key)):
            return False
    if "any" in affects.devices:
        return True
    return ctx.get("stack.device_family") in affects.devices


def missing_context(rule: DefectRule, ctx: Mapping[str, Any]) -> list[str]:
    """Context keys the rule reads that ``ctx`` lacks (a rule cannot fire on a version it cannot see)."""
    needed = {key for key, _ in _stack_checks(rule.affects)}
    if "any" not in rule.affects.devices:
        needed.add("stack.device_family")
    needed |= fields(rule.when)
    return sorted(k for k in needed if k not in ctx)


def defect_matches(rule: DefectRule, ctx: Mapping[str, Any]) -> bool:
    """True when the defect's stack range and its ``when`` condition both match ``ctx``."""
    return affects_matches(rule.affects, ctx) and matches(rule.when, ctx)


def matching_defects(rules: Sequence[DefectRule], ctx: Mapping[str, Any]) -> list[DefectRule]:
    """The rules that fire on ``ctx``, in file order."""
    return [rule for rule in rules if defect_matches(rule, ctx)]


def explain_defect(rule: DefectRule, ctx: Mapping[str, Any]) -> str:
    """Why ``rule`` does or does not fire: the stack checks, then the ``when`` checklist."""
    lines = [f"{rule.id}: {rule.title} -> {rule.action if defect_matches(rule, ctx) else 'does not apply'}"]
    for key, spec in _stack_checks(rule.affects):
        ok = version_matches(spec, ctx.get(key))
        lines.append(f"[{'x' if ok else ' '}] {key} version in {spec!r}  (actual: {ctx.get(key, 'missing')!r})")
    if "any" not in rule.affects.devices:
        ok = ctx.get("stack.device_family") in rule.affects.devices
        actual = ctx.get("stack.device_family", "missing")
        lines.append(f"[{'x' if ok else ' '}] stack.device_family in {rule.affects.devices}  (actual: {actual!r})")
    lines.append(explain(rule.when, ctx))
    lines.append(f"source: {rule.source}")
    return "\n".join(lines)


__all__ = [
    "FAIL_CLOSED",
    "TIER_ORDER",
    "Affects",
    "DefectRule",
    "RuleFileError",
    "TierRule",
    "affects_matches",
    "classify",
    "defect_matches",
    "explain_defect",
    "load_defects",
    "load_tiers",
    "matching_defects",
    "missing_context",
    "strictest",
]
