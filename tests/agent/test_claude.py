"""bot/agent/claude.py offline, one answer at a time: the anthropic SDK against recorded Messages API responses.

A valid proposal or a stop decides at once; an invalid proposal is sent back as an ``is_error`` tool_result with the
same reason the validation of any policy's proposal gives, and the loop goes on; an answer with no tool call, an API
error or a missing key hands the step to the heuristic and the Change says so. (The multi-turn exchanges:
test_claude_loop.py.)
"""

from __future__ import annotations

import pytest
from campaign_fakes import table_rule
from claude_replay import LESSONS, OK, RECORDS, Replay, stepping_state

from bot.agent.claude import DEFAULT_MODEL, ClaudePolicy
from bot.core import levers as catalog
from bot.core.records import Change, Stop

MODEL = DEFAULT_MODEL
TOOLS = {"list_moves", "predict", "lesson", "propose", "stop"}


def propose(*replays: str, status: int = 200, state_space=None):
    state, space = state_space or stepping_state()
    replay = Replay(*replays, status=status)
    policy = ClaudePolicy(model=MODEL, client=replay.client())
    decision = policy.propose(state, OK, LESSONS, space, RECORDS)
    assert not replay.overrun
    return decision, replay, policy


def test_a_valid_proposal_is_returned_as_claudes() -> None:
    decision, replay, _ = propose("propose_valid")
    assert isinstance(decision, Change) and decision.policy == "claude"
    assert (decision.lever, decision.before, decision.after) == ("activation_checkpoint", "full", "none")
    assert decision.lessons == ["cpu-ac-off"] and "quarter" in decision.why
    assert decision.consulted is not None and (decision.consulted.turns, decision.consulted.tokens) == (1, 2451 + 87)
    assert decision.consulted.fallback == "" and decision.enables == [] and decision.probe is False
    (body,) = replay.requests
    assert body["model"] == MODEL
    assert {tool["name"] for tool in body["tools"]} == TOOLS
    assert body["tool_choice"] == {"type": "any"}
    prompt = body["messages"][0]["content"]
    assert "activation_checkpoint" in prompt and "cpu-ac-off" in prompt and "llama3-tiny/cpu" in prompt


def test_stop_is_returned_as_claudes() -> None:
    decision, _, _ = propose("stop")
    assert isinstance(decision, Stop) and decision.policy == "claude" and "noise band" in decision.why


def fallback_reason(decision) -> str:
    assert isinstance(decision, Change | Stop)
    assert decision.policy.startswith("heuristic (claude fallback: "), decision.policy
    return decision.policy


@pytest.mark.parametrize(
    ("replay", "why"),
    [
        ("propose_invalid_value", "expected one of"),
        ("propose_out_of_range", "not a legal value"),
        ("propose_tier_x", "unknown lever 'training.seq_len'"),
        ("propose_precision", "precision"),
        ("propose_malformed", "expected a lever name and a scalar value"),
        ("propose_unknown_tool", "unknown tool 'run_shell'"),
    ],
)
def test_an_invalid_answer_is_sent_back_as_an_error_and_the_loop_goes_on(replay: str, why: str) -> None:
    decision, sent, _ = propose(replay, "propose_valid")
    (result,) = sent.sent_back(1)
    assert result["type"] == "tool_result" and result["tool_use_id"] == "toolu_01A" and result["is_error"] is True
    assert why in result["content"]
    assert sent.requests[1]["messages"][1]["role"] == "assistant"  # the bad call itself precedes its error
    assert (
        isinstance(decision, Change)
        and decision.policy == "claude"
        and (decision.lever, decision.after) == ("activation_checkpoint", "none")
    )
    assert (
        decision.consulted is not None
        and len(decision.consulted.rejected) == 1
        and why in decision.consulted.rejected[0]
    )


def test_an_answer_with_no_tool_call_falls_back_to_the_heuristic() -> None:
    decision, replay, policy = propose("text_only")
    assert "no tool call" in fallback_reason(decision) and "no tool call" in policy.last_error
    assert len(replay.requests) == 1
    # the fallback is the heuristic's own proposal, and a legal one
    assert isinstance(decision, Change) and (decision.lever, decision.after) == ("activation_checkpoint", "none")
    assert decision.consulted is not None and "no tool call" in decision.consulted.fallback


def test_a_tier_x_lever_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(
        catalog.CATALOG, "training.steps", catalog.Lever("training.steps", "int", "X", "schedule length", minimum=1)
    )
    decision, replay, _ = propose("propose_objective_lever", "stop")
    assert "objective-changing (tier X)" in replay.sent_back(1)[0]["content"]
    assert isinstance(decision, Stop) and decision.policy == "claude"


def test_an_already_tried_value_is_refused() -> None:
    state_space = stepping_state([{"lever": "activation_checkpoint", "to": "none"}])
    decision, replay, _ = propose("propose_tried", "stop", state_space=state_space)
    assert "already tried" in replay.sent_back(1)[0]["content"]
    assert isinstance(decision, Stop)


@pytest.mark.parametrize("status", [500, 529])
def test_http_errors_fall_back(status: int) -> None:
    decision, replay, _ = propose(f"error_{status}", status=status)
    reason = fallback_reason(decision)
    assert ("InternalServerError" if status == 500 else "OverloadedError") in reason or str(status) in reason
    assert len(replay.requests) == 1  # max_retries=0: one request


def test_a_missing_api_key_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    state, space = stepping_state()
    decision = ClaudePolicy(model=MODEL).propose(state, OK, LESSONS, space, RECORDS)
    assert "ANTHROPIC_API_KEY is not set" in fallback_reason(decision)
    assert isinstance(decision, Change) and decision.consulted is not None and decision.consulted.turns == 0


def test_an_oom_retry_is_stacked_on_the_failed_step() -> None:
    oom = table_rule({(("training.local_batch_size", 2), ("activation_checkpoint", "full")): "oom"}, [1000.0, 1010.0])
    state_space = stepping_state([{"lever": "training.local_batch_size", "to": 2}], rule=oom)
    decision, replay, _ = propose("propose_stacked_retry", state_space=state_space)
    assert isinstance(decision, Change) and decision.policy == "claude"
    assert decision.stacked_on == 1 and decision.before == "full" and decision.after == "selective"
    propose_tool = next(t for t in replay.requests[0]["tools"] if t["name"] == "propose")
    assert "stacked_on" in propose_tool["input_schema"]["properties"]


def test_stacking_on_a_step_that_did_not_run_out_of_memory_is_refused() -> None:
    state_space = stepping_state([{"lever": "training.local_batch_size", "to": 2}])  # ran fine
    decision, replay, _ = propose("propose_stacked_retry", "stop", state_space=state_space)
    assert "stacked_on=1 is not a step that ran out of memory" in replay.sent_back(1)[0]["content"]
    assert isinstance(decision, Stop)


def test_the_default_model_is_not_deprecated() -> None:
    deprecated = pytest.importorskip("anthropic._data").DEPRECATED_MODELS  # the SDK's own end-of-life table
    assert DEFAULT_MODEL not in deprecated, f"{DEFAULT_MODEL} reaches end-of-life on {deprecated.get(DEFAULT_MODEL)}"
    state, space = stepping_state()
    replay = Replay("propose_valid")
    ClaudePolicy(client=replay.client()).propose(state, OK, LESSONS, space, RECORDS)
    assert replay.requests[0]["model"] == DEFAULT_MODEL
