"""One score for the opportunities: the predicted saving of step time per expected device-hour.

``saving`` blends the analytic cost model's saving (GPUs; the layout the change leads to against the incumbent's) and
a prior from what was measured (the diagnosis, the lessons' evidence, the last kept step), weighted by how well the
model reproduced the campaign's kept steps; ``cost`` is the runs a step takes (a trial and its pairs) at the
predicted step time. The formula and its constants: docs/agent-moves.md#the-score.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from bot.agent.cost_focus import aimed_cost
from bot.agent.history import enabled_settings
from bot.agent.lessons import Lesson
from bot.agent.memory_screen import change_levers
from bot.agent.policy import LeverSpace
from bot.agent.speed_screen import predicted_tps
from bot.core import levers as catalog
from bot.core.diagnosis import Diagnosis
from bot.core.records import Change, Scalar
from bot.core.state import Campaign
from bot.sim.hardware import get_hardware

PRIOR_CREDIBILITY = 0.5  # the model's weight before a kept step has tested it
REMOVED_SHARE = 0.5  # the share of the cost it is aimed at that a change is expected to remove
BLIND_PRIOR = 0.01  # the saving expected of a change aimed at no measured cost (a probe)
UNMODELLED = 0.002  # a predicted saving this small: the model has no term for the change
ERROR_FLOOR = 0.05  # the smallest saving the model's error is judged against (about the minimum worthwhile gain)


@dataclass(frozen=True)
class Score:
    """The figures behind a proposal's rank; ``value`` orders proposals (higher first)."""

    saving: float  # predicted share of the incumbent's step time saved
    model_saving: float | None  # the cost model's alone (None: it cannot tell here)
    prior_saving: float  # the diagnosis prior's alone
    credibility: float  # the model's weight in ``saving``
    cost: float  # expected runs, in incumbent-run equivalents
    aimed_at: str  # the cost it is aimed at ("" for none)
    prior_basis: str = "blind"  # what the prior rests on: diagnosis, lesson, momentum or blind

    @property
    def value(self) -> float:
        return self.saving / self.cost


def _models_speed(space: LeverSpace) -> bool:
    try:
        return get_hardware(space.recipe.cluster.hardware).kind == "gpu"
    except KeyError:
        return False


def model_saving(space: LeverSpace, before: dict[str, Scalar], after: dict[str, Scalar]) -> float | None:
    """The cost model's share of the step time saved going from ``before`` to ``after``; None where it cannot tell
    (a CPU host, whose time its GPU figures do not model; an unknown model or accelerator)."""
    if not _models_speed(space):
        return None
    a, b = predicted_tps(space, before), predicted_tps(space, after)
    if a is None or b is None:
        return None
    return 1.0 - a[0] / b[0]


def target_levers(campaign: Campaign, change: Change) -> dict[str, Scalar]:
    """The levers the run ``change`` leads to: an enabler's with the changes it enables applied."""
    levers = change_levers(campaign, change)
    for s in enabled_settings(change) if change.enabler else []:
        levers[s.lever] = s.value
    return levers


def credibility(campaign: Campaign, space: LeverSpace) -> float:
    """How well the cost model reproduced the kept steps' measured savings: 1 - their mean error over the mean saving
    (floored at ERROR_FLOOR), within [0, 1]; PRIOR_CREDIBILITY before any kept step it could predict (one it
    predicts no saving for changed what it has no term for, such as compile, and is left out)."""
    errors, sizes = [], []
    before = catalog.effective(campaign.baseline_levers)
    for st in campaign.steps:
        if not st.kept or st.gain is None:
            continue
        after = catalog.effective(st.levers)
        predicted = model_saving(space, before, after)
        before = after
        if predicted is None or abs(predicted) < UNMODELLED:
            continue  # the model has no term for what the step changed (compile): it tests nothing of the model
        measured = 1.0 - 1.0 / (1.0 + st.gain)
        errors.append(abs(predicted - measured))
        sizes.append(abs(measured))
    if not errors:
        return PRIOR_CREDIBILITY
    scale = max(sum(sizes) / len(sizes), ERROR_FLOOR)
    return max(0.0, 1.0 - (sum(errors) / len(errors)) / scale)


def _saving(gain: float) -> float:
    return 1.0 - 1.0 / (1.0 + gain)


def prior_saving(
    change: Change,
    incumbent: Diagnosis | None,
    lessons: Mapping[str, Lesson] | None = None,
    campaign: Campaign | None = None,
) -> tuple[float, str, str]:
    """The diagnosis-side prior of ``change``: the largest of half the share of the incumbent's step it is aimed at,
    the gain its lessons' evidence measured (``expected_gain``), and half the saving the last kept step measured on
    the same lever in the same direction (a line search's next notch); BLIND_PRIOR where none applies. Returns the
    prior, the cost it is aimed at and its basis ("diagnosis", "lesson", "momentum" or "blind")."""
    cost = aimed_cost(change)
    share = (incumbent.breakdown.get(cost) if incumbent is not None and cost else None) or 0.0
    options = [(REMOVED_SHARE * share, "diagnosis")] if share > 0 else []
    for lid in change.lessons:
        lesson = (lessons or {}).get(lid)
        if lesson is not None and lesson.expected_gain is not None and lesson.expected_gain > 0:
            options.append((_saving(lesson.expected_gain), "lesson"))
    last = next((st for st in reversed(campaign.steps) if st.kept), None) if campaign is not None else None
    if (
        last is not None
        and last.gain
        and last.gain > 0
        and last.change.lever == change.lever
        and _same_direction(last.change.before, last.change.after, change.after)
    ):
        options.append((REMOVED_SHARE * _saving(last.gain), "momentum"))
    best, basis = max(options, default=(BLIND_PRIOR, "blind"))
    return best, cost, basis


def _same_direction(before: Scalar | None, after: Scalar, further: Scalar) -> bool:
    """Whether ``further`` continues the move ``before -> after`` (numbers only)."""
    numbers = (int, float)
    if not all(isinstance(v, numbers) and not isinstance(v, bool) for v in (before, after, further)):
        return False
    return (after - before) * (further - after) > 0  # type: ignore[operator]


def score(
    campaign: Campaign,
    space: LeverSpace,
    incumbent: Diagnosis | None,
    change: Change,
    trust: float | None = None,
    lessons: Mapping[str, Lesson] | None = None,
) -> Score:
    """The score of ``change`` against the incumbent (``trust``: :func:`credibility`, computed where not given;
    ``lessons`` by id, for their measured gains)."""
    here = catalog.effective(campaign.incumbent_levers)
    there = target_levers(campaign, change)
    m = model_saving(space, here, there)
    prior, aimed, basis = prior_saving(change, incumbent, lessons, campaign)
    c = (credibility(campaign, space) if trust is None else trust) if m is not None else 0.0
    saving = c * m + (1.0 - c) * prior if m is not None else prior
    ratio = 1.0 / (1.0 - m) if m is not None and m < 1.0 else 1.0  # candidate step time over the incumbent's
    cost = 1.0 + (ratio if math.isfinite(ratio) else 1.0)
    return Score(
        saving=saving, model_saving=m, prior_saving=prior, credibility=c, cost=cost, aimed_at=aimed, prior_basis=basis
    )
