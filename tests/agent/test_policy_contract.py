"""The contract every registered policy keeps, whatever it is (the model: optuna's sampler tests, one module
parametrized over its registry).

The names are read from the registry (:data:`bot.agent.POLICIES`) when the tests are collected, so a newly
registered policy is held to the contract without a line here. Each policy drives simulated campaigns built by
the same code ``attune bench tuners`` uses (:func:`bot.bench.tuners.run_campaign`) on two tasks: one shipped
task recipe as it is, and one with two of its levers moved into ``pinned``. Every proposal it makes is
recorded and must be a stop or a legal change: each lever it moves is one of the recipe's levers and none of
its pins, each value is in that lever's domain for the recipe (the space the policy was handed), and the
layout it makes is one torchtitan would start. The agent policies move exactly one lever a step; the
search baselines (``MULTI_LEVER``) move to a sampled point, one lever plus ``extra``. A campaign never spends
past its device-hour budget, and the same seed gives the same proposals.

``claude`` runs with no network and no key, through its ``client`` injection point: the anthropic SDK's own client
over a mock HTTP transport, whose seeded fake model answers with Messages API objects built from
``anthropic.types``, legal proposals and illegal ones (a pinned lever, a value out of its domain, an unknown lever,
no tool call) alike; the policy's own checks and fallback must keep the contract.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import pytest
import yaml
from anthropic.types import Message, TextBlock, ToolUseBlock, Usage

import bot.bench.tuners as tuners
from bot.agent import POLICIES, get_policy
from bot.agent.policy import LeverSpace, base_levers
from bot.agent.space import layout_problem
from bot.core import levers as catalog
from bot.core.recipe import Recipe, load_recipe
from bot.core.records import Change, Scalar, Stop
from bot.core.state import Campaign
from bot.runner.sim import SimRunner

try:  # the anthropic SDK's own HTTP package (httpx2 from anthropic 2.x, httpx before)
    import httpx2 as http
except ImportError:  # pragma: no cover - older SDKs are built on httpx
    import httpx as http

# the search baselines: each step moves to a sampled point (one lever plus ``extra``); every other policy,
# a newly registered one included, moves exactly one lever a step
MULTI_LEVER = frozenset({"random", "tpe", "gp", "cmaes", "greedy", "costmodel"})
SHIPPED = "llama3.1-8b/h100x8.yaml"  # a dense model on one node, as shipped
PINNED_TASK = "qwen3-30b-a3b/b200x16.yaml"  # an MoE model on two nodes, two of its levers pinned below
PIN_MOVED = ("activation_checkpoint", "compile.enable")
BUDGET_RUNS = 6  # baseline-sized runs: small enough that most campaigns end on the budget
SEED = 3
CLAUDE_STOPS_AT = 40  # the fake model answers every request from the 41st on with a stop


@dataclass
class Proposal:
    """One decision a policy made, with what it was made against."""

    decision: Change | Stop
    base: dict[str, Scalar]  # the levers it is applied on (the incumbent's, or a stacked-on step's)
    space: LeverSpace


class Recording:
    """Wraps a policy and keeps every decision it returns (a copy, so later steps cannot alter it)."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.name = inner, inner.name
        self.proposals: list[Proposal] = []

    def propose(
        self, campaign: Campaign, diagnosis: Any, lessons: list, levers: LeverSpace, records: Any
    ) -> Change | Stop:
        decision = self.inner.propose(campaign, diagnosis, lessons, levers, records)
        base = dict(base_levers(campaign, decision)) if isinstance(decision, Change) else {}
        self.proposals.append(Proposal(decision.model_copy(deep=True), base, levers))
        return decision


class FakeClaude:
    """A seeded stand-in for the Messages API: each request is answered with one ``anthropic.types.Message`` calling
    one of the tools the request offers (``propose`` or, in the one-call form, ``propose_change``; ``list_moves`` and
    a listed move where offered; ``stop`` once enough were asked), or with text alone."""

    def __init__(self, recipe: Recipe, seed: int) -> None:
        self.rng = random.Random(seed)
        self.recipe = recipe
        self.space = tuners.make_space(recipe).values
        self.requests: list[dict[str, Any]] = []
        self.broken: list[str] = []  # what the fake could not answer (the SDK would report it as a connection error)

    def listed_moves(self, body: dict[str, Any]) -> list[str]:
        """The move ids of the last ``list_moves`` answer in the conversation so far."""
        for message in reversed(body["messages"]):
            for block in message["content"] if isinstance(message["content"], list) else []:
                if (
                    block.get("type") == "tool_result"
                    and not block.get("is_error")
                    and '"moves"' in str(block.get("content"))
                ):
                    return [m["id"] for m in json.loads(block["content"])["moves"]]
        return []

    def call(self, body: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
        """The next tool call (name, input), or None for an answer of text alone."""
        tools = {t["name"] for t in body.get("tools", [])}
        propose = "propose" if "propose" in tools else "propose_change"
        assert {propose, "stop"} <= tools, (
            f"the claude policy offers neither propose nor propose_change and stop: {sorted(tools)}"
        )
        if len(self.requests) >= CLAUDE_STOPS_AT:
            return "stop", {"why": "nothing left is worth the budget"}
        lever = self.rng.choice(sorted(self.space))
        kinds = ["legal", "legal", "legal", "pinned", "domain", "unknown", "text"]
        kinds += ["list_moves"] if "list_moves" in tools else []
        moves = self.listed_moves(body)
        kinds += ["move", "move"] if moves else []
        kind = self.rng.choice(kinds)
        if kind == "text":
            return None
        if kind == "list_moves":
            return "list_moves", {}
        if kind == "move":
            return propose, {"move": self.rng.choice(moves), "why": "fake: a listed move"}
        args = {
            "legal": {"lever": lever, "value": self.rng.choice(self.space[lever])},
            "pinned": {"lever": self.rng.choice(sorted(self.recipe.pinned)), "value": 1},
            "domain": {"lever": lever, "value": 3 if isinstance(self.space[lever][0], int) else "bogus"},
            "unknown": {"lever": "no_such.lever", "value": 2},
        }[kind]
        return propose, {**args, "why": f"fake: {kind}"}

    def __call__(self, request: http.Request) -> http.Response:
        body = json.loads(request.content)
        try:
            call, n = self.call(body), len(self.requests)
        except AssertionError as exc:
            self.broken.append(str(exc))
            raise
        self.requests.append(body)
        blocks: list[Any] = (
            [TextBlock(type="text", text="I would rather explain than call a tool.")]
            if call is None
            else [ToolUseBlock(type="tool_use", id=f"toolu_{n}", name=call[0], input=call[1])]
        )
        message = Message(
            id=f"msg_{n}",
            type="message",
            role="assistant",
            model="claude-fake",
            content=blocks,
            stop_reason="end_turn" if call is None else "tool_use",
            stop_sequence=None,
            usage=Usage(input_tokens=100, output_tokens=20),
        )
        return http.Response(200, json=message.model_dump(mode="json"), headers={"request-id": f"req_{n}"})


@dataclass
class Drive:
    """One campaign a policy drove, and what it proposed."""

    state: Campaign
    proposals: list[Proposal]
    fake: FakeClaude | None


_DRIVES: dict[tuple[str, str, int], Drive] = {}


def task_recipe(task: str, tmp: Path) -> Path:
    """The task's recipe file: as shipped, or (``PINNED_TASK``) with the ``PIN_MOVED`` levers moved into pinned."""
    path = tuners.TASKS_DIR / task
    if task != PINNED_TASK:
        return path
    data = yaml.safe_load(path.read_text())
    for lever in PIN_MOVED:
        data["pinned"][lever] = data["levers"].pop(lever)
    out = tmp / "pinned" / task
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


def drive(name: str, task: str, tmp_factory: pytest.TempPathFactory, again: int = 0) -> Drive:
    """The campaign ``name`` drives on ``task`` at ``SEED`` (``again``: a second, independent run), made once."""
    key = (name, task, again)
    if key in _DRIVES:
        return _DRIVES[key]
    tmp = tmp_factory.mktemp(f"{name}-{again}")
    path = task_recipe(task, tmp)
    recipe = load_recipe(path)
    budget = BUDGET_RUNS * SimRunner(seed=0).run(recipe, out_dir=None).summary.device_hours
    made: list[Recording] = []
    fake = FakeClaude(recipe, SEED) if name == "claude" else None

    def recorded(policy: str, **options: Any) -> Recording:
        if fake is not None:
            client = anthropic.Anthropic(
                api_key="no-network", max_retries=0, http_client=http.Client(transport=http.MockTransport(fake))
            )
            options = {**options, "client": client}
        made.append(Recording(get_policy(policy, **options)))
        return made[-1]

    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("ANTHROPIC_API_KEY", raising=False)
        mp.setattr(tuners, "get_policy", recorded)  # the bench's own campaign set-up, with the policy recorded
        state = tuners.run_campaign(path, name, SEED, budget, tmp / "work", recipe=recipe)
    assert len(made) == 1 and made[0].proposals, f"{name} made no proposal on {task}"
    _DRIVES[key] = Drive(state, made[0].proposals, fake)
    return _DRIVES[key]


def problems(name: str, p: Proposal) -> list[str]:
    """What breaks the contract in one proposal (empty: nothing)."""
    if isinstance(p.decision, Stop):
        return []
    change, recipe = p.decision, p.space.recipe
    moved = {change.lever: change.after, **change.extra}
    out = []
    if change.extra and name not in MULTI_LEVER:
        out.append(f"moves {len(moved)} levers in one step: {sorted(moved)}")
    for lever, value in moved.items():
        if lever in recipe.pinned:
            out.append(f"{lever} is pinned")
        elif lever not in recipe.levers:
            out.append(f"{lever} is not one of the recipe's levers")
        elif value not in p.space.values.get(lever, []):
            out.append(f"{lever}={value!r} is outside its domain {p.space.values.get(lever)}")
    target = {**p.base, **moved}
    if catalog.effective(target) == catalog.effective(p.base):
        out.append("changes nothing")
    if (why := layout_problem(recipe, target)) is not None:
        out.append(f"an illegal layout: {why}")
    return out


# the pinned task in the default suite (every policy, every check); the shipped task too in the slow matrix
TASKS = pytest.mark.parametrize("task", [pytest.param(SHIPPED, marks=pytest.mark.slow), PINNED_TASK])


@pytest.mark.parametrize("name", POLICIES)
@TASKS
def test_every_proposal_is_a_legal_change_or_a_stop(
    name: str, task: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    run = drive(name, task, tmp_path_factory)
    bad = [
        f"proposal {i}: {p.decision.title() if isinstance(p.decision, Change) else 'stop'}: {why}"
        for i, p in enumerate(run.proposals)
        for why in problems(name, p)
    ]
    assert not bad, f"{name} on {task}:\n" + "\n".join(bad)
    assert any(isinstance(p.decision, Change) for p in run.proposals), f"{name} proposed nothing to measure on {task}"


@pytest.mark.parametrize("name", POLICIES)
def test_no_step_touches_a_pinned_setting(name: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    run = drive(name, PINNED_TASK, tmp_path_factory)
    recipe = run.proposals[0].space.recipe
    assert set(PIN_MOVED) <= set(recipe.pinned) and not set(PIN_MOVED) & set(recipe.levers)
    touched = sorted(
        {lever for st in run.state.steps for lever in {st.change.lever, *st.change.extra}} & set(recipe.pinned)
    )
    assert not touched, f"{name} changed pinned settings: {touched}"
    assert all(not set(st.levers) & set(recipe.pinned) for st in run.state.steps)


@pytest.mark.parametrize("name", POLICIES)
@TASKS
def test_a_campaign_never_spends_past_its_budget(
    name: str, task: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    state = drive(name, task, tmp_path_factory).state
    assert state.phase == "finished", f"{name} on {task} did not finish: {state.phase}"
    assert 0 < state.spent <= state.budget, (
        f"{name} on {task} spent {state.spent:.4f} of {state.budget:.4f} device-hours"
    )


@pytest.mark.parametrize("name", POLICIES)
def test_the_same_seed_gives_the_same_proposals(name: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    first, second = (drive(name, PINNED_TASK, tmp_path_factory, again) for again in (0, 1))
    assert [p.decision.model_dump() for p in first.proposals] == [p.decision.model_dump() for p in second.proposals]
    assert [st.levers for st in first.state.steps] == [st.levers for st in second.state.steps]


def test_claude_is_held_to_the_contract_by_its_own_checks_not_by_a_polite_fake(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The fake model asked, offered illegal answers, had some of its answers taken and others replaced."""
    run = drive("claude", PINNED_TASK, tmp_path_factory)
    assert run.fake is not None and not run.fake.broken, run.fake.broken if run.fake else "no fake"
    assert run.fake.requests, "the claude policy never asked its client"
    by = [p.decision.policy for p in run.proposals]
    assert "claude" in by, f"no answer of the fake model was taken: {by}"
    assert any(b.startswith("heuristic (claude fallback") for b in by), f"no illegal answer was replaced: {by}"


def test_the_contract_check_refuses_each_kind_of_breach(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The check above is not vacuous: a change that breaks each clause is named for it."""
    p = drive("heuristic", PINNED_TASK, tmp_path_factory).proposals[0]

    def flagged(name: str, lever: str, after: Scalar, **extra: Scalar) -> list[str]:
        change = Change(
            lever=lever, before=catalog.effective(p.base).get(lever), after=after, extra=extra, why="t", policy=name
        )
        return problems(name, Proposal(change, p.base, p.space))

    assert flagged("heuristic", "activation_checkpoint", "none") == ["activation_checkpoint is pinned"]
    assert flagged("heuristic", "training.local_batch_size", 3)[0].startswith(
        "training.local_batch_size=3 is outside its domain"
    )
    assert flagged("heuristic", "parallelism.tensor_parallel_degree", 2, **{"loss.num_chunks": 4})[0].startswith(
        "moves 2 levers"
    )
    assert flagged("random", "parallelism.tensor_parallel_degree", 2, **{"loss.num_chunks": 4}) == []
    assert flagged("heuristic", "parallelism.tensor_parallel_degree", 8)[0].startswith(
        "an illegal layout: tensor_parallel_degree 8"
    )
    assert flagged("heuristic", "loss.num_chunks", catalog.effective(p.base)["loss.num_chunks"]) == ["changes nothing"]
    assert flagged("heuristic", "training.local_batch_size", 1) == []
