"""A campaign request: the issue form of ``.github/ISSUE_TEMPLATE/campaign.yml``, parsed and re-validated.

GitHub does not enforce the form (``required`` holds only in public repositories, bodies can be edited), so every
field is checked again here. ``validate_request`` answers either a ``CampaignRequest`` or one ``RequestError``
that lists every problem at once, naming the field and what is expected, so the requester can fix the issue in a
single edit. Values quoted back in the message are shortened and stripped of Markdown-active characters.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import PurePosixPath
from typing import Literal, get_args

from pydantic import BaseModel, Field

from bot.github.issue_form import parse_sections

Policy = Literal[
    "heuristic", "ranked", "claude", "random", "tpe", "gp", "cmaes", "greedy", "costmodel"
]  # bot.agent.POLICIES
POLICIES: tuple[str, ...] = get_args(Policy)
MAX_BUDGET_HOURS = 500.0
MIN_BENCH_STEPS = 5
MAX_BENCH_STEPS = 10_000
MAX_RUNNER_LABELS = 10
RUNNER_LABEL = re.compile(r"^[A-Za-z0-9_.-]+$")
_RECIPE_CHARS = re.compile(r"^[A-Za-z0-9_./-]+$")
_NUMBER = re.compile(r"^[0-9]+(\.[0-9]+)?$")
_DIGITS = re.compile(r"[0-9]+")

# The labels of the issue form's fields, exactly as GitHub renders them as headings.
FIELD_RECIPE = "Recipe path"
FIELD_BUDGET = "Budget (device-hours)"
FIELD_POLICY = "Policy"
FIELD_RUNNER_LABELS = "Runner labels"
FIELD_BENCH_STEPS = "Bench steps"
FIELDS = (FIELD_RECIPE, FIELD_BUDGET, FIELD_POLICY, FIELD_RUNNER_LABELS, FIELD_BENCH_STEPS)


class CampaignRequest(BaseModel):
    """A validated request to tune one recipe within a device-hour budget."""

    recipe: str
    budget_hours: float = Field(gt=0, le=MAX_BUDGET_HOURS)
    policy: Policy
    runner_labels: list[str] = Field(min_length=1, max_length=MAX_RUNNER_LABELS)
    bench_steps: int | None = Field(default=None, ge=MIN_BENCH_STEPS, le=MAX_BENCH_STEPS)


class RequestError(BaseModel):
    """Why a request cannot start a campaign: every problem, each naming its field."""

    problems: list[str]

    @property
    def message(self) -> str:
        lines = "\n".join(f"- {p}" for p in self.problems)
        return (
            "This campaign request cannot start yet. Please edit the issue and fix:\n\n"
            f"{lines}\n\nThe bot reads the request again when the issue is labelled `attune:campaign` again."
        )


def shown(value: str, limit: int = 60) -> str:
    """``value`` safe to quote in a comment: one line, short, no Markdown/HTML-active characters."""
    flat = " ".join(value.split())
    flat = re.sub(r"[`<>\[\]()*_|@#!\\]", "?", flat)
    return f"'{flat[:limit]}…'" if len(flat) > limit else f"'{flat}'"


def plain_digits(text: str) -> bool:
    """Whether ``text`` is a whole number written in ASCII digits only (``0``-``9``, at least one). ``str.isdigit``
    is not enough: it also takes ``²`` (which ``int`` then refuses) and other scripts' digits (``٣``, ``５``)."""
    return _DIGITS.fullmatch(text) is not None


def check_recipe_path(text: str) -> str | None:
    """The problem with a recipe path, or None: relative, under ``recipes/``, ending ``.yaml``, no ``..``."""
    where = f"{FIELD_RECIPE}: {shown(text)}"
    if not text:
        return f"{FIELD_RECIPE}: missing; expected a path like recipes/llama3_8b/h100x8.yaml"
    if not _RECIPE_CHARS.match(text):
        return f"{where} may use only letters, digits and . _ - /"
    parts = PurePosixPath(text).parts
    if text.startswith("/") or ".." in parts or "." in text.split("/") or "//" in text:
        return f"{where} must be a plain relative path without '..' or empty parts"
    if len(parts) < 2 or parts[0] != "recipes" or not text.endswith(".yaml"):
        return f"{where} must be a .yaml file under recipes/"
    return None


def parse_runner_labels(text: str) -> tuple[list[str], str | None]:
    """Runner labels from comma- or whitespace-separated text, and the problem with them (or None)."""
    labels = [x for x in re.split(r"[,\s]+", text) if x]
    if not labels:
        return [], f"{FIELD_RUNNER_LABELS}: missing; expected labels of your GPU runners, e.g. gpu, h100"
    bad = [x for x in labels if not RUNNER_LABEL.match(x) or len(x) > 64]
    if bad:
        return (
            [],
            f"{FIELD_RUNNER_LABELS}: {', '.join(shown(x, 20) for x in bad[:3])} — use only A-Z a-z 0-9 _ . -",
        )
    if len(labels) > MAX_RUNNER_LABELS:
        return [], f"{FIELD_RUNNER_LABELS}: {len(labels)} labels; at most {MAX_RUNNER_LABELS}"
    return list(dict.fromkeys(labels)), None


def runs_on(labels_text: str) -> list[str]:
    """The ``runs-on`` list for a trial: ``self-hosted`` plus validated labels.

    ``labels_text`` is a JSON array of strings (as dispatched to trial.yml) or comma/space-separated text.
    Raises ``ValueError`` naming the problem, so a bad dispatch never reaches a runner.
    """
    text = labels_text.strip()
    if text.startswith("["):
        try:
            items = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{FIELD_RUNNER_LABELS}: not a JSON array of strings ({exc.msg})") from None
        if not isinstance(items, list) or not all(isinstance(x, str) and x.strip() == x for x in items):
            raise ValueError(f"{FIELD_RUNNER_LABELS}: expected a JSON array of label strings")
        # Each item is checked whole, so "a b" cannot split into two labels.
        if any(not RUNNER_LABEL.match(x) for x in items):
            raise ValueError(f"{FIELD_RUNNER_LABELS}: use only A-Z a-z 0-9 _ . - in each label")
        text = ",".join(items)
    labels, problem = parse_runner_labels(text)
    if problem:
        raise ValueError(problem)
    return ["self-hosted", *(x for x in labels if x != "self-hosted")]


def _budget(text: str) -> tuple[float | None, str | None]:
    if not text:
        return None, f"{FIELD_BUDGET}: missing; expected a number of device-hours, e.g. 8"
    if not _NUMBER.match(text):
        return None, f"{FIELD_BUDGET}: {shown(text)} is not a plain number of device-hours (e.g. 8 or 2.5)"
    hours = float(text)
    if not math.isfinite(hours) or hours <= 0 or hours > MAX_BUDGET_HOURS:
        return None, f"{FIELD_BUDGET}: {shown(text)}; expected more than 0 and at most {MAX_BUDGET_HOURS:g}"
    return hours, None


def _policy(text: str) -> tuple[str | None, str | None]:
    value = text.strip().lower()
    if value in POLICIES:
        return value, None
    what = "missing" if not text else shown(text)
    return None, f"{FIELD_POLICY}: {what}; expected one of {', '.join(POLICIES)}"


def _bench_steps(text: str) -> tuple[int | None, str | None]:
    if not text:
        return None, None  # optional: the recipe's own bench.steps
    if not plain_digits(text):
        return None, f"{FIELD_BENCH_STEPS}: {shown(text)} is not a whole number written with the digits 0-9"
    steps = int(text)
    if not MIN_BENCH_STEPS <= steps <= MAX_BENCH_STEPS:
        return (
            None,
            f"{FIELD_BENCH_STEPS}: {steps}; expected {MIN_BENCH_STEPS} to {MAX_BENCH_STEPS} (or empty)",
        )
    return steps, None


def validate_request(body: str | None) -> CampaignRequest | RequestError:
    """The request in an issue-form body, or a ``RequestError`` listing everything to fix."""
    sections = parse_sections(body)
    if not any(field in sections for field in FIELDS):
        return RequestError(
            problems=[
                "the issue body has none of the campaign form's sections "
                f"({', '.join(FIELDS)}); open the issue with the 'Tuning campaign' form"
            ]
        )
    recipe = sections.get(FIELD_RECIPE, "")
    problems = [p for p in [check_recipe_path(recipe)] if p]
    budget, problem = _budget(sections.get(FIELD_BUDGET, ""))
    problems += [problem] if problem else []
    policy, problem = _policy(sections.get(FIELD_POLICY, ""))
    problems += [problem] if problem else []
    labels, problem = parse_runner_labels(sections.get(FIELD_RUNNER_LABELS, ""))
    problems += [problem] if problem else []
    steps, problem = _bench_steps(sections.get(FIELD_BENCH_STEPS, ""))
    problems += [problem] if problem else []
    if problems:
        return RequestError(problems=problems)
    return CampaignRequest(recipe=recipe, budget_hours=budget, policy=policy, runner_labels=labels, bench_steps=steps)
