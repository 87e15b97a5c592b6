"""bot/agent/claude.py offline: the anthropic SDK against recorded Messages API responses (a mock HTTP transport).

The SDK's HTTP layer is replaced by a MockTransport of the HTTP package the installed SDK uses (``httpx2``
for anthropic >= 2.x, which refuses ``httpx`` objects; ``httpx`` before).

Every answer Claude gives goes through the same validation as the heuristic's; an invalid answer, an
API error or a missing key falls back to the heuristic and the Change says so.
"""

from __future__ import annotations

import json
from pathlib import Path

import anthropic
import pytest
from campaign_fakes import new_state, play, recipe_text, space_fn, table_rule

from bot.agent.claude import DEFAULT_MODEL, ClaudePolicy
from bot.agent.lessons import load_lessons
from bot.core import levers as catalog
from bot.core.diagnosis import Diagnosis
from bot.core.recipe import parse_recipe_text
from bot.core.records import Change, FileRecords, Stop

RECORDS = FileRecords()  # the records these policies read: files on disk

try:  # the SDK's own HTTP package
    import httpx2 as http
except ImportError:  # pragma: no cover - older SDKs are built on httpx
    import httpx as http

FIXTURES = Path(__file__).parent / "fixtures"
MODEL = DEFAULT_MODEL
LESSONS = load_lessons()
OK = Diagnosis(outcome="ok", tps=1000.0, mem_headroom_frac=0.9)


class Recorder:
    """An httpx transport handler answering with a recorded fixture; keeps every request body."""

    def __init__(self, fixture: str, status: int = 200) -> None:
        self.body = json.loads((FIXTURES / fixture).read_text())
        self.status = status
        self.requests: list[dict] = []

    def __call__(self, request: http.Request) -> http.Response:
        assert request.url.path == "/v1/messages"
        self.requests.append(json.loads(request.content))
        return http.Response(self.status, json=self.body, headers={"request-id": "req_test"})


def client_for(recorder: Recorder) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key="test", http_client=http.Client(transport=http.MockTransport(recorder)), max_retries=0)


def stepping_state(steps: list[dict] | None = None, rule=None):
    """A CPU campaign after its baseline (and after the given steps, none of which won)."""
    text = recipe_text()
    script = list(steps or [])

    def decide(state):
        i = len(state.steps)
        if i < len(script):
            spec = script[i]
            base = state.step(spec["stacked_on"]).levers if spec.get("stacked_on") else state.incumbent_levers
            return Change(lever=spec["lever"], before=catalog.effective(base)[spec["lever"]], after=spec["to"], why="t",
                          stacked_on=spec.get("stacked_on"))
        return Stop(why="history built")

    state = play(new_state(text, policy="claude"), decide, rule or table_rule({}, [1000.0, 1010.0]))
    return state.model_copy(update={"phase": "stepping", "finish_reason": ""}), space_fn(parse_recipe_text(text))


def propose(fixture: str, status: int = 200, state_space=None):
    state, space = state_space or stepping_state()
    recorder = Recorder(fixture, status)
    policy = ClaudePolicy(model=MODEL, client=client_for(recorder))
    return policy.propose(state, OK, LESSONS, space, RECORDS), recorder, policy


def test_a_valid_proposal_is_returned_as_claudes() -> None:
    decision, recorder, _ = propose("propose_valid.json")
    assert isinstance(decision, Change) and decision.policy == "claude"
    assert (decision.lever, decision.before, decision.after) == ("activation_checkpoint", "full", "none")
    assert decision.lessons == ["cpu-ac-off"] and "quarter" in decision.why
    (body,) = recorder.requests
    assert body["model"] == MODEL
    assert {tool["name"] for tool in body["tools"]} == {"propose_change", "stop"}
    assert body["tool_choice"] == {"type": "any"}
    prompt = body["messages"][0]["content"]
    assert "activation_checkpoint" in prompt and "cpu-ac-off" in prompt and "llama3-tiny/cpu" in prompt


def test_stop_is_returned_as_claudes() -> None:
    decision, _, _ = propose("stop.json")
    assert isinstance(decision, Stop) and decision.policy == "claude" and "noise band" in decision.why


def fallback_reason(decision) -> str:
    assert isinstance(decision, Change | Stop)
    assert decision.policy.startswith("heuristic (claude fallback: "), decision.policy
    return decision.policy


@pytest.mark.parametrize(
    ("fixture", "why"),
    [
        ("propose_invalid_value.json", "expected one of"),
        ("propose_out_of_range.json", "not a legal value"),
        ("propose_tier_x.json", "unknown lever 'training.seq_len'"),
        ("propose_precision.json", "precision"),
        ("propose_malformed.json", "malformed tool call propose_change"),
        ("propose_unknown_tool.json", "malformed tool call run_shell"),
        ("text_only.json", "no tool call"),
    ],
)
def test_invalid_answers_fall_back_to_the_heuristic(fixture: str, why: str) -> None:
    decision, recorder, policy = propose(fixture)
    assert why in fallback_reason(decision) and why in policy.last_error
    assert len(recorder.requests) == 1
    # the fallback is the heuristic's own proposal, and a legal one
    assert isinstance(decision, Change) and (decision.lever, decision.after) == ("activation_checkpoint", "none")


def test_a_tier_x_lever_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(catalog.CATALOG, "training.steps", catalog.Lever("training.steps", "int", "X", "schedule length", minimum=1))
    decision, _, _ = propose("propose_objective_lever.json")
    assert "objective-changing (tier X)" in fallback_reason(decision)


def test_an_already_tried_value_falls_back() -> None:
    state_space = stepping_state([{"lever": "activation_checkpoint", "to": "none"}])
    decision, _, _ = propose("propose_tried.json", state_space=state_space)
    assert "already tried" in fallback_reason(decision)
    assert (decision.lever, decision.after) != ("activation_checkpoint", "none")


@pytest.mark.parametrize("status", [500, 529])
def test_http_errors_fall_back(status: int) -> None:
    decision, recorder, _ = propose(f"error_{status}.json", status=status)
    reason = fallback_reason(decision)
    assert ("InternalServerError" if status == 500 else "OverloadedError") in reason or str(status) in reason
    assert len(recorder.requests) == 1  # max_retries=0: one request


def test_a_missing_api_key_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    state, space = stepping_state()
    decision = ClaudePolicy(model=MODEL).propose(state, OK, LESSONS, space, RECORDS)
    assert "ANTHROPIC_API_KEY is not set" in fallback_reason(decision)


def test_an_oom_retry_is_stacked_on_the_failed_step() -> None:
    oom = table_rule({(("training.local_batch_size", 2), ("activation_checkpoint", "full")): "oom"}, [1000.0, 1010.0])
    state_space = stepping_state([{"lever": "training.local_batch_size", "to": 2}], rule=oom)
    decision, recorder, _ = propose("propose_stacked_retry.json", state_space=state_space)
    assert isinstance(decision, Change) and decision.policy == "claude"
    assert decision.stacked_on == 1 and decision.before == "full" and decision.after == "selective"
    assert "stacked_on" in recorder.requests[0]["tools"][0]["input_schema"]["properties"]


def test_stacking_on_a_step_that_did_not_run_out_of_memory_falls_back() -> None:
    state_space = stepping_state([{"lever": "training.local_batch_size", "to": 2}])  # ran fine
    decision, _, _ = propose("propose_stacked_retry.json", state_space=state_space)
    assert "stacked_on=1 is not a step that ran out of memory" in fallback_reason(decision)


def test_the_default_model_is_not_deprecated() -> None:
    deprecated = pytest.importorskip("anthropic._data").DEPRECATED_MODELS  # the SDK's own end-of-life table
    assert DEFAULT_MODEL not in deprecated, f"{DEFAULT_MODEL} reaches end-of-life on {deprecated.get(DEFAULT_MODEL)}"
    state, space = stepping_state()
    recorder = Recorder("propose_valid.json")
    ClaudePolicy(client=client_for(recorder)).propose(state, OK, LESSONS, space, RECORDS)
    assert recorder.requests[0]["model"] == DEFAULT_MODEL
