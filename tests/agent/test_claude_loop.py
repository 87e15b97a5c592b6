"""The ``claude`` policy's agent loop, replayed: recorded multi-turn exchanges (Messages validated with the anthropic SDK's
own types, served through its HTTP layer, no network) -- a good proposal, a listed move taken, a refusal, malformed
tool input, a timeout and an over-long loop. Each asserts the outcome, what the step records and what was sent back.
"""

from __future__ import annotations

import json

import pytest
from claude_replay import LESSONS, OK, RECORDS, Replay, stepping_state

from bot.agent.claude import ClaudePolicy
from bot.agent.heuristic import HeuristicPolicy
from bot.core.records import Change, Stop


def run(name: str, **options):
    state, space = stepping_state()
    replay = Replay(name)
    decision = ClaudePolicy(client=replay.client(), **options).propose(state, OK, LESSONS, space, RECORDS)
    assert not replay.overrun, "the policy asked more than the replay recorded"
    return decision, replay


def heuristic_pick() -> Change:
    state, space = stepping_state()
    pick = HeuristicPolicy().propose(state, OK, LESSONS, space, RECORDS)
    assert isinstance(pick, Change)
    return pick


def assert_fell_back(decision, why: str) -> None:
    pick = heuristic_pick()
    assert isinstance(decision, Change) and decision.policy.startswith(f"heuristic (claude fallback: {why}"), (
        decision.policy
    )
    assert (decision.lever, decision.after, decision.lessons) == (pick.lever, pick.after, pick.lessons)
    assert decision.consulted is not None and decision.consulted.fallback.startswith(why)


def test_a_good_proposal_after_listing_the_moves_and_asking_predictions() -> None:
    decision, replay = run("good_proposal")
    assert isinstance(decision, Change) and decision.policy == "claude"
    assert (decision.lever, decision.before, decision.after) == ("activation_checkpoint", "full", "none")
    assert decision.lessons == ["cpu-ac-off"] and "+33 %" in decision.why
    used = decision.consulted
    assert used is not None and used.fallback == "" and used.rejected == []
    assert used.moves == ["lessons-or-diagnosis", "explore"]
    assert used.predictions == ["activation_checkpoint=selective"] and used.lessons == ["cpu-ac-off"]
    assert (used.turns, used.tokens) == (3, 2440 + 3160 + 3680)
    assert len(replay.requests) == 3
    # turn 2 carries list_moves' answer: the registry's proposals, each with the cost model's prediction
    (listed,) = replay.sent_back(1)
    assert listed["tool_use_id"] == "toolu_g1" and not listed.get("is_error")
    moves = json.loads(listed["content"])["moves"]
    assert [(m["id"], m["lever"], m["to"]) for m in moves] == [
        ("lessons-or-diagnosis", "activation_checkpoint", "none"),
        ("explore", "activation_checkpoint", "selective"),
    ]
    assert moves[0]["prediction"]["tokens_per_s_change"] == "+33.3%" and moves[1]["probe"] is True
    assert [m.get("pick", False) for m in moves] == [True, False]  # the default policy's own pick is marked
    assert "CPU host" in moves[0]["prediction"]["note"]
    # turn 3 carries both answers of turn 2, in order: the prediction and the lesson
    predicted, lesson = replay.sent_back(2)
    assert (predicted["tool_use_id"], lesson["tool_use_id"]) == ("toolu_g2", "toolu_g3")
    figures = json.loads(predicted["content"])
    assert figures["step_s"] < figures["incumbent_step_s"] and figures["tokens_per_s_change"] == "+14.3%"
    assert "model_memory_gib_per_device" in figures and figures["device_memory_gib"] > 0
    assert lesson["content"].startswith("cpu-ac-off") and "matches now: yes" in lesson["content"]
    # the conversation is replayed whole: the prompt, then each assistant turn before its results
    assert [m["role"] for m in replay.requests[2]["messages"]] == ["user", "assistant", "user", "assistant", "user"]
    assert replay.requests[2]["messages"][3]["content"][0]["name"] == "predict"


def test_a_listed_move_is_taken_by_its_id() -> None:
    decision, replay = run("listed_move")
    assert isinstance(decision, Change) and decision.policy == "claude"
    assert (decision.lever, decision.after, decision.probe) == ("activation_checkpoint", "selective", True)
    assert decision.why.startswith("Selective recompute keeps") and "(move explore: " in decision.why
    assert decision.consulted is not None and decision.consulted.moves == ["lessons-or-diagnosis", "explore"]
    assert decision.max_device_hours == heuristic_pick().max_device_hours  # the no-gain allowance caps it as any probe


def test_a_refusal_falls_back_to_the_heuristics_pick() -> None:
    decision, replay = run("refusal")
    assert_fell_back(decision, "refusal: I can't help")
    assert len(replay.requests) == 1 and decision.consulted.tokens == 2409 and decision.consulted.turns == 1


def test_malformed_tool_input_is_sent_back_as_errors_then_a_valid_proposal_decides() -> None:
    decision, replay = run("malformed_input")
    bad_predict, bad_propose = replay.sent_back(1)
    assert bad_predict == {
        "type": "tool_result",
        "tool_use_id": "toolu_m1",
        "is_error": True,
        "content": "predict: 'levers' must be a non-empty object of lever name -> value",
    }
    assert bad_propose["tool_use_id"] == "toolu_m2" and bad_propose["is_error"] is True
    assert "expected a lever name and a scalar value" in bad_propose["content"]
    assert isinstance(decision, Change) and decision.policy == "claude" and decision.after == "none"
    assert decision.consulted is not None and len(decision.consulted.rejected) == 2 and decision.consulted.turns == 2


def test_malformed_input_repeated_past_the_limit_falls_back() -> None:
    decision, replay = run("malformed_repeated", max_errors=3)
    assert_fell_back(decision, "malformed tool input 4 times")
    assert len(replay.requests) == 4 and len(decision.consulted.rejected) == 4
    assert all(r["is_error"] for n in (1, 2, 3) for r in replay.sent_back(n))


def test_a_timeout_falls_back_and_keeps_what_was_consulted() -> None:
    decision, replay = run("timeout", timeout_s=30)
    assert_fell_back(decision, "timeout: no answer within 30 s on turn 2")
    assert len(replay.requests) == 2 and decision.consulted.moves == ["lessons-or-diagnosis", "explore"]
    assert replay.requests[1]["messages"][-1]["content"][0]["tool_use_id"] == "toolu_t1"


def test_an_over_long_loop_falls_back_at_the_turn_limit() -> None:
    decision, replay = run("over_long", max_turns=5)
    assert_fell_back(decision, "no decision after 5 turns (15000 tokens)")
    assert len(replay.requests) == 5 and decision.consulted.turns == 5


def test_an_over_long_loop_falls_back_when_the_token_budget_is_spent() -> None:
    decision, replay = run("over_long", token_budget=7000)
    assert_fell_back(decision, "token budget spent: 9000 of 7000 tokens in 3 turns")
    assert len(replay.requests) == 3  # no fourth request once the budget is spent
    assert [r["max_tokens"] for r in replay.requests] == [1024, 1024, 1000]  # a turn never asks past the budget


def test_past_the_no_gain_allowance_it_stops_as_the_default_policy_does_without_a_request() -> None:
    state, space = stepping_state(
        [{"lever": "activation_checkpoint", "to": "none"}, {"lever": "activation_checkpoint", "to": "selective"}]
    )
    state = state.model_copy(update={"budget": 0.2})  # two futile steps spent past the no-gain share of it
    replay = Replay("propose_valid")
    decision = ClaudePolicy(client=replay.client()).propose(state, OK, LESSONS, space, RECORDS)
    assert isinstance(decision, Stop) and decision.why.startswith("no gain found")
    assert decision.policy.startswith("heuristic (claude fallback: the default policy's no-gain stop")
    assert replay.requests == []  # no tokens spent on a campaign the budget rule ends


def test_list_moves_marks_an_obligation_and_predict_refuses_an_illegal_layout(monkeypatch) -> None:
    import bot.agent.claude_tools as tools

    class Retry:  # an obligation move: it continues an open chain
        id, lessons, obligation = "oom-retry", (), True

        def propose(self, ctx):
            return Change(
                lever="activation_checkpoint", before="full", after="selective", why="retry", policy="heuristic"
            )

    monkeypatch.setattr(tools, "MOVES", (Retry(), *tools.MOVES))
    state, space = stepping_state()
    box = tools.Toolbox(state, OK, LESSONS, space, RECORDS)
    moves = json.loads(box.call("list_moves", {}))["moves"]
    assert [(m["id"], m.get("obligation", False)) for m in moves] == [
        ("oom-retry", True),
        ("lessons-or-diagnosis", False),
        ("explore", False),
    ]
    with pytest.raises(tools.ToolError, match="expected one of none, selective, full"):
        box.call("predict", {"levers": {"activation_checkpoint": "sometimes"}})
    with pytest.raises(tools.ToolError, match="not a step of this campaign"):
        box.call("predict", {"levers": {"activation_checkpoint": "none"}, "stacked_on": 9})
    with pytest.raises(tools.ToolError, match="torchtitan would refuse this layout"):
        box.call("predict", {"levers": {"parallelism.tensor_parallel_degree": 2}})  # 2 ranks on a 1-device recipe
    assert box.consulted.predictions == []  # a refused question is not a prediction relied on
