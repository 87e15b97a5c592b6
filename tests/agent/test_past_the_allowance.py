"""Past the no-gain allowance: one probe the cost model backs, once a campaign, with its out-of-memory retry."""

from __future__ import annotations

from pathlib import Path

from campaign_fakes import new_state, play, space_fn, table_rule

from bot.agent.heuristic import HeuristicPolicy
from bot.agent.heuristic.model_guided import PAST_ALLOWANCE_BAR, ModelGuided, guided_change
from bot.agent.heuristic.move import Context
from bot.agent.lessons import load_lessons
from bot.agent.stopping import NO_GAIN_SHARE
from bot.core.diagnosis import Diagnosis
from bot.core.recipe import parse_recipe_text
from bot.core.records import FileRecords

ROOT = Path(__file__).resolve().parents[2]
GPU = (ROOT / "bot/bench/tasks/glm-4.5/h100x128.yaml").read_text()  # the model predicts a large saving of its EP
CPU = (ROOT / "recipes/llama3-tiny/cpu.yaml").read_text()  # the model has no figures for a CPU host
PAST = "no step has gained and the no-gain allowance is spent, but the cost model predicts"


def _campaign(text: str, table: dict) -> object:
    space = space_fn(parse_recipe_text(text))
    lessons = load_lessons()

    def decide(state):
        return HeuristicPolicy().propose(state, Diagnosis(outcome="ok"), lessons, space, FileRecords())

    return play(new_state(text, budget=1.0), decide, table_rule(table, [1000.0, 1010.0]), cost=0.05)


def _by_model(state) -> list:
    return [s for s in state.steps if s.change.prediction and s.change.prediction.move == ModelGuided.id]


def test_a_flat_recipe_gets_one_probe_the_model_backs_past_the_allowance_then_stops() -> None:
    state = _campaign(GPU, {})  # every configuration measures like the baseline
    assert state.incumbent_step == 0 and state.finish_reason.startswith("policy stopped: no gain found")
    past = [s for s in state.steps if s.change.why.startswith(PAST)]
    assert len(past) == 1 and past[0] is state.steps[-1]  # one, the last step: then the no-gain stop stands
    assert past[0].change.max_device_hours is None  # not capped by an allowance already spent
    before = sum(r.device_hours for s in state.steps[:-1] for r in s.runs)
    assert before >= NO_GAIN_SHARE - state.expected_run_cost()  # it came only once the allowance was spent
    assert _by_model(state)[-1] is past[0]


def test_the_probe_that_runs_out_of_memory_is_retried_on_its_own_chain() -> None:
    first = _campaign(GPU, {})
    probe = next(s for s in first.steps if s.change.why.startswith(PAST)).change
    # the same campaign, where the probe's layout runs out of memory: the retry (an obligation) follows it
    state = _campaign(GPU, {((probe.lever, probe.after),): "oom"})
    n = next(s.n for s in state.steps if s.change.why.startswith(PAST))
    assert any(s.stacked_on == n for s in state.steps[n:]), [(s.change.lever, s.change.after) for s in state.steps]
    assert state.finish_reason.startswith("policy stopped: no gain found")


def test_where_the_model_cannot_tell_nothing_goes_past_the_allowance() -> None:
    state = _campaign(CPU, {})
    assert state.finish_reason.startswith("policy stopped: no gain found")
    assert not any(s.change.why.startswith(PAST) for s in state.steps)


def test_a_saving_that_clears_the_moves_bar_but_not_three_times_it_is_not_probed() -> None:
    text = (ROOT / "bot/bench/tasks/llama3.1-70b/h100x64.yaml").read_text()
    state = _campaign(text, {})
    assert state.finish_reason.startswith("policy stopped: no gain found")
    assert not any(s.change.why.startswith(PAST) for s in state.steps)
    ctx = Context(state, Diagnosis(outcome="ok"), [], space_fn(parse_recipe_text(text)), FileRecords(), None)
    assert guided_change(ctx) is not None  # the move itself would propose it (recompute off, about 27 %)
    assert guided_change(ctx, PAST_ALLOWANCE_BAR) is None
