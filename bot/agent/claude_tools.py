"""The tools of the ``claude`` policy's agent loop, and what each answers.

``list_moves`` (what the default policy's registry proposes now, each with the analytic cost model's prediction),
``predict`` (a layout's step time and memory), ``lesson`` (a lesson by id or lever), ``propose`` (one lever, or a
listed move, validated like any policy's proposal) and ``stop``. A call answers the text of its ``tool_result``, or a
decision; a bad input raises :class:`ToolError`, sent back as an ``is_error`` result. What was called is kept in a
:class:`bot.core.records.Consulted`.
"""

from __future__ import annotations

import json
from typing import Any

from anthropic.types import ToolParam

from bot.agent.claude_predict import forecast
from bot.agent.heuristic import MOVES, Context, HeuristicPolicy
from bot.agent.history import enabled_settings, incumbent_diagnosis
from bot.agent.lessons import Lesson, find_lesson, relevant, render_lesson
from bot.agent.memory_screen import change_levers, checks_the_screen, predicted_oom
from bot.agent.policy import LeverSpace, lesson_context, validate_change
from bot.agent.space import layout_problem
from bot.agent.stopping import no_gain_allowance_left
from bot.core import levers as catalog
from bot.core.diagnosis import Diagnosis
from bot.core.records import Change, Consulted, RecordReader, Scalar, Stop
from bot.core.state import Campaign

POLICY = "claude"
_VALUE = {"type": ["string", "number", "boolean"]}

TOOLS: list[ToolParam] = [
    {
        "name": "list_moves",
        "description": "Every move the default policy's registry proposes now (the one it would take is marked pick), each "
        "with its lever change and the analytic cost model's prediction (step time, tokens/s change, memory). "
        "An obligation continues an open chain (an out-of-memory retry, the change an enabler was made for).",
        "input_schema": {"type": "object", "properties": {}},
    },
    {
        "name": "predict",
        "description": "The analytic cost model's step time and per-device memory for the incumbent layout with these lever "
        "values (or for the layout of an out-of-memory step, with stacked_on).",
        "input_schema": {
            "type": "object",
            "properties": {
                "levers": {"type": "object", "additionalProperties": _VALUE, "description": "lever name -> value"},
                "stacked_on": {
                    "type": "integer",
                    "description": "a step whose layout to start from instead of the incumbent's",
                },
            },
            "required": ["levers"],
        },
    },
    {
        "name": "lesson",
        "description": "A lesson by id (its condition, changes, rationale and source), or the lessons that change a lever.",
        "input_schema": {"type": "object", "properties": {"id": {"type": "string"}, "lever": {"type": "string"}}},
    },
    {
        "name": "propose",
        "description": "Propose the next step: exactly one lever change, or a listed move by its id. It is checked like any "
        "proposal (a legal value, not pinned, not tried, prerequisites met, a layout torchtitan accepts); an "
        "invalid one is answered with the reason and you may propose again.",
        "input_schema": {
            "type": "object",
            "properties": {
                "move": {"type": "string", "description": "the id of a move from list_moves, taken as listed"},
                "lever": {"type": "string", "description": "a lever name from the catalog"},
                "value": {**_VALUE, "description": "the new value"},
                "why": {"type": "string", "description": "the diagnosis-based rationale, one sentence"},
                "lessons": {"type": "array", "items": {"type": "string"}, "description": "ids of lessons relied on"},
                "stacked_on": {
                    "type": "integer",
                    "description": "only to retry a step that ran out of memory: that step's "
                    "number; the change is applied on top of its layout instead of the incumbent",
                },
                "retry_reason": {
                    "type": "string",
                    "description": "only to propose again a configuration measured "
                    "'undecided': why measuring it again can now decide",
                },
            },
            "required": ["why"],
        },
    },
    {
        "name": "stop",
        "description": "Stop the campaign: nothing left is worth the budget.",
        "input_schema": {"type": "object", "properties": {"why": {"type": "string"}}, "required": ["why"]},
    },
]


class ToolError(ValueError):
    """A tool call's input cannot be answered: sent back as an ``is_error`` tool_result."""


def _lever_value(lever: Any, value: Any) -> tuple[str, Scalar]:
    if not isinstance(lever, str) or value is None or isinstance(value, list | dict):
        raise ToolError(f"expected a lever name and a scalar value, got lever={lever!r} value={value!r}")
    try:
        return lever, catalog.parse_value(lever, value)
    except catalog.LeverError as exc:
        raise ToolError(str(exc)) from None


def _step_number(campaign: Campaign, raw: Any) -> int | None:
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int) or not any(s.n == raw for s in campaign.steps):
        raise ToolError(f"stacked_on={raw!r} is not a step of this campaign")
    return raw


class Toolbox:
    """The tools answered for one decision of ``campaign``; ``consulted`` keeps what was called."""

    def __init__(
        self, campaign: Campaign, diagnosis: Diagnosis, lessons: list[Lesson], space: LeverSpace, records: RecordReader
    ) -> None:
        self.campaign, self.diagnosis, self.lessons, self.space, self.records = (
            campaign,
            diagnosis,
            lessons,
            space,
            records,
        )
        self.consulted = Consulted()
        self._moves: dict[str, Change | Stop] | None = None
        self._obligations: set[str] = set()  # the listed moves that continue an open chain

    def call(self, name: str, args: object) -> str | Change | Stop:
        """The answer to one tool call: a tool_result's text, or the decision a valid ``propose`` / ``stop`` makes."""
        if not isinstance(args, dict):
            raise ToolError(f"{name}: the input must be an object, got {type(args).__name__}")
        tool = {
            "list_moves": self.list_moves,
            "predict": self.predict,
            "lesson": self.lesson,
            "propose": self.propose,
            "stop": self.stop,
        }.get(name)
        if tool is None:
            raise ToolError(f"unknown tool {name!r}; expected one of {', '.join(t['name'] for t in TOOLS)}")
        return tool(args)

    # --- list_moves
    def moves(self) -> dict[str, Change | Stop]:
        """Each registry move's proposal now, by move id (a repeated id gets ``#2``), in the registry's order."""
        if self._moves is None:
            c = self.campaign
            incumbent = incumbent_diagnosis(c, self.records) if c.steps else self.diagnosis
            ctx = Context(c, self.diagnosis, self.lessons, self.space, self.records, incumbent)
            self._moves = {}
            for move in MOVES:
                proposal = move.propose(ctx)
                if proposal is not None:
                    key = (
                        move.id
                        if move.id not in self._moves
                        else f"{move.id}#{sum(k.split('#')[0] == move.id for k in self._moves) + 1}"
                    )
                    self._moves[key] = proposal
                    if move.obligation:
                        self._obligations.add(key)
        return self._moves

    def target(self, change: Change) -> dict[str, Scalar]:
        """The layout a change leads to: an enabler's with the change it enables."""
        levers = change_levers(self.campaign, change)
        enables = enabled_settings(change) if change.enabler else []
        return {**levers, enables[0].lever: enables[0].value} if enables else levers

    def pick(self) -> Change | Stop:
        """What the default policy itself would propose now (its scorer and screens included)."""
        return HeuristicPolicy().propose(self.campaign, self.diagnosis, self.lessons, self.space, self.records)

    def list_moves(self, args: dict[str, Any]) -> str:
        listed = []
        pick = self.pick()
        chosen = (pick.lever, pick.after, pick.stacked_on) if isinstance(pick, Change) else None
        for key, p in self.moves().items():
            if isinstance(p, Stop):
                listed.append({"id": key, "stop": p.why})
                continue
            entry: dict[str, Any] = {
                "id": key,
                "lever": p.lever,
                "from": p.before,
                "to": p.after,
                "why": p.why,
                "lessons": p.lessons,
            }
            entry |= {
                k: v
                for k, v in (
                    ("stacked_on", p.stacked_on),
                    ("enabler", p.enabler),
                    ("probe", p.probe),
                    ("obligation", key in self._obligations),
                    ("pick", (p.lever, p.after, p.stacked_on) == chosen),
                )
                if v
            }
            if p.enables:
                entry["enables"] = [f"{s.lever}={s.value}" for s in p.enables]
            entry["prediction"] = forecast(self.campaign, self.space, self.records, self.target(p), p.stacked_on)
            listed.append(entry)
        self.consulted.moves = list(dict.fromkeys([*self.consulted.moves, *self.moves()]))
        return json.dumps({"moves": listed}, default=str)

    # --- predict
    def predict(self, args: dict[str, Any]) -> str:
        raw = args.get("levers")
        if not isinstance(raw, dict) or not raw:
            raise ToolError("predict: 'levers' must be a non-empty object of lever name -> value")
        stacked = _step_number(self.campaign, args.get("stacked_on"))
        changes = dict(_lever_value(k, v) for k, v in raw.items())
        base = self.campaign.step(stacked).levers if stacked else self.campaign.incumbent_levers
        levers = {**base, **changes}
        illegal = layout_problem(self.space.recipe, levers)
        if illegal is not None:
            raise ToolError(f"torchtitan would refuse this layout: {illegal}")
        self.consulted.predictions.append(
            ", ".join(f"{k}={v}" for k, v in changes.items()) + (f" on step {stacked}" if stacked else "")
        )
        return json.dumps(forecast(self.campaign, self.space, self.records, levers, stacked), default=str)

    # --- lesson
    def lesson(self, args: dict[str, Any]) -> str:
        lid, lever = args.get("id"), args.get("lever")
        now = {x.id for x in relevant(self.lessons, lesson_context(self.campaign, self.diagnosis, self.space))}
        if isinstance(lid, str) and lid:
            found = find_lesson(self.lessons, lid)
            if found is None:
                raise ToolError(f"no lesson {lid!r}; ask by lever to see the lessons that change it")
            self.consulted.lessons.append(found.id)
            rule = "\n(a rule the default policy implements in code, cited here; not a lesson to propose from)"
            return (
                render_lesson(found)
                + f"\nmatches now: {'yes' if found.id in now else 'no'}"
                + (rule if found.kind == "rule" else "")
            )
        if isinstance(lever, str) and lever:
            hits = [x for x in self.lessons if x.kind != "rule" and any(t.lever == lever for t in x.try_)]
            self.consulted.lessons.extend(x.id for x in hits)
            return json.dumps(
                {
                    "lessons": [
                        {"id": x.id, "title": x.title, "try": [t.render() for t in x.try_], "matches_now": x.id in now}
                        for x in hits
                    ]
                }
            )
        raise ToolError("lesson: give a lesson 'id' or a 'lever'")

    # --- propose, stop
    def propose(self, args: dict[str, Any]) -> Change | Stop:
        why = args.get("why")
        if not isinstance(why, str) or not why.strip():
            raise ToolError("propose: 'why' must be a one-sentence rationale")
        move = args.get("move")
        if move is not None:
            return self._take_move(str(move), why)
        lever, value = _lever_value(args.get("lever"), args.get("value"))
        stacked = _step_number(self.campaign, args.get("stacked_on"))
        if stacked is not None and not any(
            r.kind == "trial" and r.outcome == "oom" for r in self.campaign.step(stacked).runs
        ):
            raise ToolError(f"stacked_on={stacked} is not a step that ran out of memory")
        current = catalog.effective(self.campaign.step(stacked).levers if stacked else self.campaign.incumbent_levers)
        cited = args.get("lessons", [])
        change = Change(
            lever=lever,
            before=current.get(lever),
            after=value,
            why=why.strip(),
            policy=POLICY,
            lessons=[str(x) for x in cited] if isinstance(cited, list) else [],
            stacked_on=stacked,
            retry_reason=str(args.get("retry_reason") or ""),
            enables=[],
            probe=False,
        )
        problem = validate_change(self.campaign, change, self.space)
        if problem is None:
            illegal = layout_problem(self.space.recipe, change_levers(self.campaign, change))
            problem = (
                f"torchtitan would refuse this layout: {illegal} (list_moves shows the enabler a change needs)"
                if illegal
                else None
            )
        if problem:
            raise ToolError(f"invalid proposal: {problem}")
        return self._screened(change)

    def _take_move(self, key: str, why: str) -> Change | Stop:
        moves = self.moves()
        if key not in moves:
            raise ToolError(f"no move {key!r} is proposed now; listed: {', '.join(moves) or 'none'}")
        taken = moves[key]
        if isinstance(taken, Stop):
            return Stop(why=f"{why} ({taken.why})", policy=POLICY)
        return self._screened(
            taken.model_copy(
                update={
                    "policy": POLICY,
                    "why": f"{why} (move {key}: {taken.why})",
                    "enables": taken.enables or [],
                    "probe": bool(taken.probe),
                }
            )
        )

    def _screened(self, change: Change) -> Change:
        """``change`` as the default policy would send it: with the memory screen's prediction where its layout cannot
        fit (not run: an OOM, for free), and capped by what is left of the no-gain allowance."""
        c, update = self.campaign, dict[str, Any]()
        if not change.enabler and not checks_the_screen(change):
            oom = predicted_oom(c, change_levers(c, change), change.stacked_on, self.space, self.records)
            if oom:  # a layout that cannot fit is not slow: its retries follow from the out-of-memory trial
                update |= {"predicted_oom": oom, "predicted_slower": ""}
        left = no_gain_allowance_left(c, incumbent_diagnosis(c, self.records) if c.steps else self.diagnosis)
        if left:
            update["max_device_hours"] = left
        return change.model_copy(update=update)

    def stop(self, args: dict[str, Any]) -> Stop:
        why = args.get("why")
        if not isinstance(why, str) or not why.strip():
            raise ToolError("stop: 'why' must say why nothing left is worth the budget")
        return Stop(why=why.strip(), policy=POLICY)
