"""The ``claude`` policy: Claude through the anthropic SDK, an agent loop over the default policy's moves.

Claude sees the campaign as text (diagnosis, history, relevant lessons, levers and legal values) and works with
tools (:mod:`.claude_tools`): list the moves the registry proposes now with their predictions, predict a layout's
step time and memory, read a lesson, then ``propose`` (one lever or a listed move, validated like any proposal; an
invalid one is answered with why) or ``stop``. Several turns fit a per-step token budget; a refusal, a timeout, an
API error, no tool call, repeated bad input or a spent allowance hands the step to the default policy's pick.
The Change records what Claude relied on (``Change.consulted``); a fallback says why in its ``policy``.
"""

from __future__ import annotations

import json
import os
from typing import Any

import anthropic

from bot.agent.claude_tools import TOOLS, Toolbox, ToolError
from bot.agent.heuristic import HeuristicPolicy
from bot.agent.history import incumbent_diagnosis
from bot.agent.lessons import Lesson, relevant
from bot.agent.policy import LeverSpace, lesson_context
from bot.agent.stopping import no_gain_stop
from bot.core import levers as catalog
from bot.core.diagnosis import Diagnosis
from bot.core.records import Change, Consulted, RecordReader, Stop
from bot.core.state import Campaign

DEFAULT_MODEL = os.environ.get(
    "ATTUNE_CLAUDE_MODEL", "claude-sonnet-5-5"
)  # claude-sonnet-4-5 reaches end-of-life 2026-11-30
TOKEN_BUDGET = 20_000  # input + output tokens one decision may spend, all turns together
MAX_TURNS = 6  # requests one decision may make
MAX_ERRORS = 3  # tool calls answered is_error before the fallback decides
TIMEOUT_S = 60.0  # one request

SYSTEM = (
    "You are ATTUNE, a throughput tuner for torchtitan LLM training recipes. Each step changes exactly one lever. "
    "Use the tools: list_moves shows what the default policy would do now and what the cost model predicts for each; "
    "predict gives any layout's step time and memory; lesson reads the cited evidence. Then call propose (one lever, "
    "or a listed move by id; a move of your own is welcome when the evidence supports it) or stop. Never propose an "
    "objective-changing or precision-changing setting, a value already tried, or a change whose prerequisite is "
    "missing. A listed obligation continues an open chain: take it unless the evidence says otherwise. After an "
    "out-of-memory trial, retry the layout with activation recomputation before abandoning it. "
    "Every answer must call a tool; be brief, the token budget is small."
)


def build_prompt(campaign: Campaign, diagnosis: Diagnosis, lessons: list[Lesson], space: LeverSpace) -> str:
    ctx = lesson_context(campaign, diagnosis, space)
    rel = relevant(lessons, ctx, include_rules=False)[:8]  # a rule in code is the default policy's, not a lesson
    history = [
        {
            "n": s.n,
            "change": s.change.title(),
            "outcome": next((r.outcome for r in s.runs if r.kind == "trial"), "not run"),
            "gain": s.gain,
            "interval": [s.measurement.lo, s.measurement.hi] if s.measurement else None,
            "pairs": s.measurement.pairs if s.measurement else 0,
            "decision": s.measurement.decision if s.measurement else None,
            "kept": s.kept,
            "closed": s.close_reason,
        }
        for s in campaign.steps
    ]
    levers = {
        name: {
            "current": catalog.effective(campaign.incumbent_levers).get(name),
            "legal": values,
            "tier": catalog.get(name).tier,
        }
        for name, values in space.values.items()
    }
    return "\n\n".join(
        [
            f"Recipe {space.recipe.name} on {space.recipe.devices} x {space.recipe.cluster.hardware}.",
            "Diagnosis of the latest run:\n" + diagnosis.model_dump_json(indent=1),
            f"Incumbent tokens/s per device: {campaign.incumbent_tps}; minimum worthwhile gain {campaign.min_gain:.1%} at "
            f"{campaign.confidence:.0%} confidence (paired A/B); an 'undecided' configuration may be proposed again only with a retry_reason; "
            f"budget {campaign.budget:.4f} device-hours, spent {campaign.spent:.4f}.",
            "History:\n" + json.dumps(history, default=str, indent=1),
            "Relevant lessons:\n"
            + "\n".join(
                f"- {lesson.id}: {lesson.why.strip()} (try: {', '.join(t.render() for t in lesson.try_)})"
                for lesson in rel
            ),
            "Levers you may change (current value, legal values, tier):\n" + json.dumps(levers, default=str, indent=1),
        ]
    )


class ClaudePolicy:
    """The agent loop; ``client``: an ``anthropic.Anthropic`` (or one built from ``ANTHROPIC_API_KEY``)."""

    name = "claude"

    def __init__(
        self,
        model: str | None = None,
        client: Any = None,
        max_tokens: int = 1024,
        token_budget: int = TOKEN_BUDGET,
        max_turns: int = MAX_TURNS,
        max_errors: int = MAX_ERRORS,
        timeout_s: float = TIMEOUT_S,
    ) -> None:
        self.model = model or DEFAULT_MODEL
        self.client = client
        self.max_tokens = max_tokens
        self.token_budget, self.max_turns, self.max_errors, self.timeout_s = (
            token_budget,
            max_turns,
            max_errors,
            timeout_s,
        )
        self.fallback = HeuristicPolicy()
        self.last_error: str = ""

    def _client(self) -> Any:
        if self.client is not None:
            return self.client
        if not os.environ.get("ANTHROPIC_API_KEY"):
            raise RuntimeError("ANTHROPIC_API_KEY is not set")
        self.client = anthropic.Anthropic()
        return self.client

    def _fallback(self, why: str, box: Toolbox) -> Change | Stop:
        """The default policy's own pick for this step, saying why Claude's did not decide."""
        self.last_error = why
        box.consulted.fallback = why
        decision = self.fallback.propose(box.campaign, box.diagnosis, box.lessons, box.space, box.records)
        decision.policy = f"heuristic (claude fallback: {why[:160]})"
        return decision.model_copy(update={"consulted": box.consulted}) if isinstance(decision, Change) else decision

    def propose(
        self, campaign: Campaign, diagnosis: Diagnosis, lessons: list[Lesson], levers: LeverSpace, records: RecordReader
    ) -> Change | Stop:
        box = Toolbox(campaign, diagnosis, lessons, levers, records)
        if no_gain_stop(campaign, incumbent_diagnosis(campaign, records) if campaign.steps else diagnosis) is not None:
            return self._fallback(
                "the default policy's no-gain stop: no gain in hand and its probing allowance is spent", box
            )
        try:
            client = self._client()
        except RuntimeError as exc:
            return self._fallback(str(exc), box)
        messages: list[dict[str, Any]] = [
            {"role": "user", "content": build_prompt(campaign, diagnosis, lessons, levers)}
        ]
        return self._loop(client, messages, box)

    def _loop(self, client: Any, messages: list[dict[str, Any]], box: Toolbox) -> Change | Stop:
        used, errors = box.consulted, 0
        for turn in range(1, self.max_turns + 1):
            if used.tokens >= self.token_budget:
                return self._fallback(
                    f"token budget spent: {used.tokens} of {self.token_budget} tokens in {turn - 1} turns", box
                )
            try:
                response = client.messages.create(
                    model=self.model,
                    max_tokens=min(self.max_tokens, self.token_budget - used.tokens),
                    system=SYSTEM,
                    tools=TOOLS,
                    tool_choice={"type": "any"},
                    messages=messages,
                    timeout=self.timeout_s,
                )
            except anthropic.APITimeoutError:
                return self._fallback(f"timeout: no answer within {self.timeout_s:g} s on turn {turn}", box)
            except Exception as exc:  # API errors, network: fall back, say why
                return self._fallback(f"{type(exc).__name__}: {exc}", box)
            used.turns = turn
            used.tokens += response.usage.input_tokens + response.usage.output_tokens
            text = " ".join(b.text for b in response.content if b.type == "text").strip()
            if response.stop_reason == "refusal":
                said = (
                    text
                    or getattr(getattr(response, "stop_details", None), "explanation", None)
                    or "declined to answer"
                )
                return self._fallback(f"refusal: {said}", box)
            calls = [b for b in response.content if b.type == "tool_use"]
            if not calls:
                return self._fallback(f"no tool call in the answer (stop_reason {response.stop_reason})", box)
            messages.append(
                {
                    "role": "assistant",
                    "content": [b.model_dump(mode="json", exclude_none=True) for b in response.content],
                }
            )
            results: list[dict[str, Any]] = []
            for call in calls:
                try:
                    answer = box.call(call.name, call.input)
                except ToolError as exc:
                    errors += 1
                    used.rejected.append(f"{call.name}: {exc}")
                    results.append(
                        {"type": "tool_result", "tool_use_id": call.id, "content": str(exc), "is_error": True}
                    )
                    continue
                if isinstance(answer, Change | Stop):
                    return self._decided(answer, used)
                results.append({"type": "tool_result", "tool_use_id": call.id, "content": answer})
            if errors > self.max_errors:
                return self._fallback(f"malformed tool input {errors} times; the last: {used.rejected[-1]}", box)
            messages.append({"role": "user", "content": results})
        return self._fallback(f"no decision after {self.max_turns} turns ({used.tokens} tokens)", box)

    def _decided(self, decision: Change | Stop, used: Consulted) -> Change | Stop:
        self.last_error = ""
        return decision.model_copy(update={"consulted": used}) if isinstance(decision, Change) else decision
