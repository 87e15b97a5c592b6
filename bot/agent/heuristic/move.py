"""What a move of the default policy is: an id, the lessons it follows, and ``propose(context)``; and the context
every move reads (the campaign, the last run's diagnosis, the lessons, the lever space, the records)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Protocol

from bot.agent.cost_focus import unmeasurable
from bot.agent.history import incumbent_diagnosis, last_trial_failed
from bot.agent.lessons import Lesson, relevant
from bot.agent.policy import LeverSpace, lesson_context
from bot.core import levers as catalog
from bot.core.diagnosis import Diagnosis
from bot.core.records import Change, RecordReader, Scalar, Stop
from bot.core.state import Campaign

Proposal = Change | Stop


@dataclass
class Context:
    """One decision's inputs; ``incumbent`` is the incumbent's diagnosis (the last run's before any step)."""

    campaign: Campaign
    diagnosis: Diagnosis  # the last run's
    lessons: list[Lesson]
    space: LeverSpace
    records: RecordReader
    incumbent: Diagnosis | None

    @cached_property
    def matched(self) -> Diagnosis:
        """The diagnosis the lessons are matched against: the last run's, or the incumbent's where the last trial
        failed (a rejected candidate's layout is abandoned; an OOM lesson must not fire on a recipe that fits)."""
        d = self.diagnosis
        if d.outcome != "ok" and last_trial_failed(self.campaign):
            return incumbent_diagnosis(self.campaign, self.records) or Diagnosis(outcome="ok", simulated=d.simulated)
        return d

    @cached_property
    def lesson_ctx(self) -> dict:
        return lesson_context(self.campaign, self.matched, self.space)

    @cached_property
    def current(self) -> dict[str, Scalar]:
        return catalog.effective(self.campaign.incumbent_levers)

    @cached_property
    def moot(self) -> set[str]:
        """The levers whose whole addressable cost is inside the noise band."""
        return unmeasurable(self.campaign, self.matched)

    @cached_property
    def hits(self) -> list[Lesson]:
        """The lessons that match the incumbent."""
        return relevant(self.lessons, self.lesson_ctx)


class Move(Protocol):
    """One move: ``propose`` returns its proposal for this decision, or None where it does not apply.
    ``obligation``: it continues an open chain (a retry, an enabled change, a follow-up) and keeps its place first."""

    @property
    def id(self) -> str: ...
    @property
    def lessons(self) -> tuple[str, ...]: ...
    @property
    def obligation(self) -> bool: ...

    def propose(self, ctx: Context) -> Proposal | None: ...
