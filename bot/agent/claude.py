"""The ``claude`` policy: Claude through the anthropic SDK with tool use.

Claude sees the same context as the heuristic, as text — the diagnosis, the campaign history, the
relevant lessons and the lever catalog with legal values — and answers with one tool call:
``propose_change`` (one lever) or ``stop``. Its answer is validated exactly like the heuristic's
(:func:`bot.agent.policy.validate_change`); an invalid answer, an API error or a missing
``ANTHROPIC_API_KEY`` falls back to the heuristic, and the Change records which policy decided.
"""

from __future__ import annotations

import json
import os
from typing import Any

from bot.agent.heuristic import HeuristicPolicy
from bot.agent.lessons import Lesson, relevant
from bot.agent.policy import LeverSpace, lesson_context, validate_change
from bot.core import levers as catalog
from bot.core.diagnosis import Diagnosis
from bot.core.records import Change, RecordReader, Stop
from bot.core.state import Campaign

DEFAULT_MODEL = os.environ.get("ATTUNE_CLAUDE_MODEL", "claude-sonnet-5-5")  # claude-sonnet-4-5 reaches end-of-life 2026-11-30

TOOLS: list[dict[str, Any]] = [
    {
        "name": "propose_change",
        "description": "Propose exactly one lever change for the next campaign step.",
        "input_schema": {
            "type": "object",
            "properties": {
                "lever": {"type": "string", "description": "a lever name from the catalog"},
                "value": {"type": ["string", "number", "boolean"], "description": "the new value"},
                "why": {"type": "string", "description": "the diagnosis-based rationale"},
                "lessons": {"type": "array", "items": {"type": "string"}, "description": "ids of lessons relied on"},
                "stacked_on": {"type": "integer", "description": "only to retry a step that ran out of memory: that step's number; "
                               "the change is applied on top of its layout instead of the incumbent"},
                "retry_reason": {"type": "string", "description": "only to propose again a configuration measured 'undecided': why "
                                 "measuring it again can now decide"},
            },
            "required": ["lever", "value", "why"],
        },
    },
    {
        "name": "stop",
        "description": "Stop the campaign: nothing left is worth the budget.",
        "input_schema": {"type": "object", "properties": {"why": {"type": "string"}}, "required": ["why"]},
    },
]

SYSTEM = (
    "You are ATTUNE, a throughput tuner for torchtitan LLM training recipes. Each step changes exactly one "
    "lever. Never propose an objective-changing or precision-changing setting, a value already tried, or a "
    "change whose prerequisite is missing (propose the prerequisite first). After an out-of-memory trial, "
    "retry the layout with activation recomputation before abandoning it. Answer with one tool call."
)


def build_prompt(campaign: Campaign, diagnosis: Diagnosis, lessons: list[Lesson], space: LeverSpace) -> str:
    ctx = lesson_context(campaign, diagnosis, space)
    rel = relevant(lessons, ctx)[:8]
    history = [
        {"n": s.n, "change": s.change.title(), "outcome": next((r.outcome for r in s.runs if r.kind == "trial"), "not run"),
         "gain": s.gain, "interval": [s.measurement.lo, s.measurement.hi] if s.measurement else None,
         "pairs": s.measurement.pairs if s.measurement else 0, "decision": s.measurement.decision if s.measurement else None,
         "kept": s.kept, "closed": s.close_reason}
        for s in campaign.steps
    ]
    levers = {
        name: {"current": catalog.effective(campaign.incumbent_levers).get(name), "legal": values, "tier": catalog.get(name).tier}
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
            "Relevant lessons:\n" + "\n".join(f"- {lesson.id}: {lesson.why.strip()} (try: {', '.join(t.render() for t in lesson.try_)})" for lesson in rel),
            "Levers you may change (current value, legal values, tier):\n" + json.dumps(levers, default=str, indent=1),
        ]
    )


class ClaudePolicy:
    name = "claude"

    def __init__(self, model: str | None = None, client: Any = None, max_tokens: int = 1024) -> None:
        self.model = model or DEFAULT_MODEL
        self.client = client
        self.max_tokens = max_tokens
        self.fallback = HeuristicPolicy()
        self.last_error: str = ""

    def _client(self) -> Any:
        if self.client is not None:
            return self.client
        if not os.environ.get("ANTHROPIC_API_KEY"):
            raise RuntimeError("ANTHROPIC_API_KEY is not set")
        import anthropic

        self.client = anthropic.Anthropic()
        return self.client

    def _fallback(self, why: str, campaign: Campaign, diagnosis: Diagnosis, lessons: list[Lesson], space: LeverSpace,
                  records: RecordReader) -> Change | Stop:
        self.last_error = why
        decision = self.fallback.propose(campaign, diagnosis, lessons, space, records)
        decision.policy = f"heuristic (claude fallback: {why[:160]})"
        return decision

    def propose(self, campaign: Campaign, diagnosis: Diagnosis, lessons: list[Lesson], levers: LeverSpace,
                records: RecordReader) -> Change | Stop:
        try:
            response = self._client().messages.create(
                model=self.model,
                max_tokens=self.max_tokens,
                system=SYSTEM,
                tools=TOOLS,
                tool_choice={"type": "any"},
                messages=[{"role": "user", "content": build_prompt(campaign, diagnosis, lessons, levers)}],
            )
        except Exception as exc:  # API errors, network, missing key: fall back, say why
            return self._fallback(f"{type(exc).__name__}: {exc}", campaign, diagnosis, lessons, levers, records)
        call = next((b for b in response.content if getattr(b, "type", "") == "tool_use"), None)
        if call is None:
            return self._fallback("no tool call in the answer", campaign, diagnosis, lessons, levers, records)
        args = dict(call.input or {})
        if call.name == "stop":
            return Stop(why=str(args.get("why", "")), policy=self.name)
        if call.name != "propose_change" or "lever" not in args or "value" not in args:
            return self._fallback(f"malformed tool call {call.name}", campaign, diagnosis, lessons, levers, records)
        stacked = args.get("stacked_on")
        if stacked is not None:
            parent = next((s for s in campaign.steps if s.n == stacked), None) if isinstance(stacked, int) and not isinstance(stacked, bool) else None
            if parent is None or not any(r.kind == "trial" and r.outcome == "oom" for r in parent.runs):
                return self._fallback(f"invalid answer: stacked_on={stacked!r} is not a step that ran out of memory", campaign, diagnosis, lessons, levers, records)
        current = catalog.effective(campaign.step(stacked).levers if stacked is not None else campaign.incumbent_levers)
        try:
            value = catalog.parse_value(str(args["lever"]), args["value"])
        except catalog.LeverError as exc:
            return self._fallback(f"invalid answer: {exc}", campaign, diagnosis, lessons, levers, records)
        cited = args.get("lessons", [])
        change = Change(lever=str(args["lever"]), before=current.get(str(args["lever"])), after=value, why=str(args.get("why", "")),
                        lessons=[str(x) for x in cited] if isinstance(cited, list) else [], policy=self.name, stacked_on=stacked,
                        retry_reason=str(args.get("retry_reason", "")))
        problem = validate_change(campaign, change, levers)
        if problem:
            return self._fallback(f"invalid answer: {problem}", campaign, diagnosis, lessons, levers, records)
        return change
