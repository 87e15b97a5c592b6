"""Replaying recorded Messages API exchanges to the ``claude`` policy through the anthropic SDK, with no network.

A replay (``replays/*.json``) is the API's answers in order: a Message (validated with the SDK's own
``anthropic.types.Message``), an error body (``anthropic.types.ErrorResponse``) or ``{"timeout": true}`` (the transport
times out: the SDK raises its ``APITimeoutError``). A file with ``turns`` holds several; one without is a single answer.
The SDK's HTTP layer is a MockTransport of the HTTP package the installed SDK uses (``httpx2`` for anthropic >= 2.x,
which refuses ``httpx`` objects; ``httpx`` before); every request body is kept for the tests to read.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anthropic
from anthropic.types import ErrorResponse, Message
from campaign_fakes import new_state, play, recipe_text, space_fn, table_rule

from bot.agent.lessons import load_lessons
from bot.core import levers as catalog
from bot.core.diagnosis import Diagnosis
from bot.core.recipe import parse_recipe_text
from bot.core.records import Change, FileRecords, Stop

try:  # the SDK's own HTTP package
    import httpx2 as http
except ImportError:  # pragma: no cover - older SDKs are built on httpx
    import httpx as http

REPLAYS = Path(__file__).parent / "replays"
RECORDS = FileRecords()  # the records these policies read: files on disk
LESSONS = load_lessons()
OK = Diagnosis(outcome="ok", tps=1000.0, mem_headroom_frac=0.9)
OVERRUN = {"type": "error", "error": {"type": "api_error", "message": "the replay has no more answers"}}


def load(name: str) -> list[dict[str, Any]]:
    """The answers of replay ``name``, each checked against the SDK's type for it."""
    data = json.loads((REPLAYS / f"{name}.json").read_text())
    turns = data.get("turns", [data])
    for turn in turns:
        if turn.get("type") == "message":
            Message.model_validate(turn)
        elif turn.get("type") == "error":
            ErrorResponse.model_validate(turn)
        else:
            assert turn == {"timeout": True}, f"{name}: not a Message, an error or a timeout: {turn}"
    return turns


class Replay:
    """A transport handler answering each request with the next recorded answer; keeps every request body."""

    def __init__(self, *names: str, status: int = 200) -> None:
        self.turns = [turn for name in names for turn in load(name)]
        self.status = status  # an error body's HTTP status
        self.requests: list[dict[str, Any]] = []
        self.overrun = False

    def __call__(self, request: http.Request) -> http.Response:
        assert request.url.path == "/v1/messages"
        self.requests.append(json.loads(request.content))
        if len(self.requests) > len(self.turns):
            self.overrun = True
            return http.Response(500, json=OVERRUN)
        turn = self.turns[len(self.requests) - 1]
        if turn.get("timeout"):
            raise http.ReadTimeout("replayed: no answer in time", request=request)
        status = self.status if turn.get("type") == "error" else 200
        return http.Response(status, json=turn, headers={"request-id": "req_test"})

    def client(self) -> anthropic.Anthropic:
        return anthropic.Anthropic(
            api_key="test", http_client=http.Client(transport=http.MockTransport(self)), max_retries=0
        )

    def sent_back(self, n: int) -> list[dict[str, Any]]:
        """The tool_result blocks request ``n`` (0-based) sent back: its last message's content."""
        last = self.requests[n]["messages"][-1]
        assert last["role"] == "user" and isinstance(last["content"], list), last
        return last["content"]


def stepping_state(steps: list[dict] | None = None, rule=None):
    """A CPU campaign after its baseline (and after the given steps, none of which won), and its lever space."""
    text = recipe_text()
    script = list(steps or [])

    def decide(state):
        i = len(state.steps)
        if i < len(script):
            spec = script[i]
            base = state.step(spec["stacked_on"]).levers if spec.get("stacked_on") else state.incumbent_levers
            return Change(
                lever=spec["lever"],
                before=catalog.effective(base)[spec["lever"]],
                after=spec["to"],
                why="t",
                stacked_on=spec.get("stacked_on"),
            )
        return Stop(why="history built")

    state = play(new_state(text, policy="claude"), decide, rule or table_rule({}, [1000.0, 1010.0]))
    return state.model_copy(update={"phase": "stepping", "finish_reason": ""}), space_fn(parse_recipe_text(text))
