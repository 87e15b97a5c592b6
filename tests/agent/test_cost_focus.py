"""bot/agent/cost_focus.py: the lessons aimed at the cost that dominates the incumbent's step come first."""

from __future__ import annotations

import pytest

from bot.agent.cost_focus import aims_at, dominant_cost_first
from bot.agent.lessons import load_lessons
from bot.core.diagnosis import Diagnosis

LESSONS = load_lessons()


@pytest.mark.parametrize(
    ("comm", "first"),
    [
        (0.89, "reshard-never-when-memory-allows"),
        (0.43, "reshard-never-when-memory-allows"),
        (0.35, "ac-full-to-selective-with-headroom"),
    ],
)
def test_lessons_aimed_at_a_cost_that_dominates_the_step_come_first(comm: float, first: str) -> None:
    by_id = {ls.id: ls for ls in LESSONS}
    relevant = [
        by_id["ac-full-to-selective-with-headroom"],
        by_id["reshard-never-when-memory-allows"],
    ]  # priority 60, 40
    diagnosis = Diagnosis(
        outcome="ok", breakdown={"compute": 0.96 - comm, "exposed_comm": comm, "bubble": 0.0, "recompute": 0.04}
    )
    assert [ls.id for ls in dominant_cost_first(relevant, diagnosis)][0] == first
    assert dominant_cost_first(relevant, Diagnosis(outcome="ok")) == relevant  # no breakdown: the lessons' own order


def test_a_lesson_that_fires_on_the_dominant_costs_share_is_aimed_at_it() -> None:
    """A lesson is aimed at a cost when a lever it tries exists to remove it, or when it fires on that cost's share of
    the step: pipeline stages across nodes (PP) fire on exposed communication, so they come first when it dominates."""
    by_id = {ls.id: ls for ls in LESSONS}
    pp = by_id["pp-across-nodes-when-fsdp-comm-dominates"]
    ac = by_id["ac-full-to-selective-with-headroom"]
    assert aims_at(pp, "exposed_comm") and not aims_at(pp, "recompute") and not aims_at(ac, "exposed_comm")
    comm_bound = Diagnosis(
        outcome="ok", breakdown={"compute": 0.08, "exposed_comm": 0.89, "bubble": 0.0, "recompute": 0.03}
    )
    assert [ls.id for ls in dominant_cost_first([ac, pp], comm_bound)] == [pp.id, ac.id]
