"""bot/agent/cost_focus.py: the lessons aimed at the cost that dominates the incumbent's step come first."""

from __future__ import annotations

from pathlib import Path

import pytest
from campaign_fakes import new_state

from bot.agent.cost_focus import aimed_at_a_larger_cost, aims_at, dominant_cost_first, failed_aims
from bot.agent.lessons import load_lessons
from bot.core.diagnosis import Diagnosis
from bot.core.records import Change
from bot.core.state import RunRef, Step

LESSONS = load_lessons()
RECIPE = Path(__file__).resolve().parents[2] / "bot/bench/tasks/llama3.1-70b/h100x64.yaml"


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


def _comm_steps(outcomes: list[bool]):
    """A campaign whose steps after the baseline each set fsdp_reshard_after_forward to never (aimed at exposed
    communication), measured, kept or not as ``outcomes`` says."""
    state = new_state(RECIPE.read_text())
    steps, incumbent = [], 0
    for n, kept in enumerate(outcomes, start=1):
        change = Change(lever="parallelism.fsdp_reshard_after_forward", **{"from": "default", "to": "never"})
        run = RunRef(kind="trial", n=n, outcome="ok", tps=1.0)
        steps.append(Step(n=n, change=change, levers={}, state="closed", runs=[run], kept=kept, gain=0.0))
        incumbent = n if kept else incumbent
    return state.model_copy(update={"steps": steps, "incumbent_step": incumbent})


def test_a_dominant_cost_goes_first_until_two_steps_aimed_at_it_since_the_incumbent_gained_nothing() -> None:
    """The diagnosis names a cost; once two measured steps aimed at it since the incumbent was kept gained nothing,
    its moves no longer go ahead of the lessons' own order (nor does a diagnosis-driven move aimed at it pre-empt a
    lesson's), so the other costs get their turn."""
    by_id = {ls.id: ls for ls in LESSONS}
    ac, comm = by_id["ac-full-to-selective-with-headroom"], by_id["reshard-never-when-memory-allows"]
    comm_bound = Diagnosis(
        outcome="ok", breakdown={"compute": 0.4, "exposed_comm": 0.5, "bubble": 0.0, "recompute": 0.1}
    )
    driven = Change(lever="parallelism.expert_parallel_degree", **{"from": 1, "to": 8})
    lesson_change = Change(lever="activation_checkpoint", **{"from": "full", "to": "selective"})
    for outcomes, spent in [
        ([], False),
        ([False], False),  # one miss: the cost still leads
        ([False, True], False),  # a kept step since: its misses before it no longer count
        ([False, False], True),
        ([True, False, False], True),
    ]:
        campaign = _comm_steps(outcomes)
        assert (failed_aims(campaign).count("exposed_comm") >= 2) is spent
        order = [ls.id for ls in dominant_cost_first([ac, comm], comm_bound, campaign)]
        assert order == ([ac.id, comm.id] if spent else [comm.id, ac.id]), outcomes
        assert aimed_at_a_larger_cost(driven, lesson_change, comm_bound, campaign) is not spent, outcomes
