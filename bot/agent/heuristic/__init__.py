"""The default policy: deterministic, offline, lesson-guided moves asked in a fixed order.

Each move is a module here with an id, the lessons it follows and ``propose(context)`` (:mod:`.move`); the first
proposal of :data:`.registry.MOVES` wins. Before the moves, a recipe with no gain in hand stops (unless the cost model
predicts a large saving: :func:`past_the_allowance`); after them, a change
predicted to run out of memory is proposed with that prediction and not run, more stages that would leave a large
bubble are gated behind the fill, and a probe with no gain in hand gets what is left of its allowance as its cap.
What each move does and the measurements behind it: docs/agent-moves.md.
"""

from __future__ import annotations

from bot.agent.heuristic.constants import (
    JUMP_LESSON,
    LESS_RECOMPUTE,
    MAX_CHAIN,
    OOM_BATCH_LESSON,
    POLICY,
    RANKED_POLICY,
    REVIEW_LESSON,
)
from bot.agent.heuristic.enablers import fill_first
from bot.agent.heuristic.explain import prediction
from bot.agent.heuristic.model_guided import ModelGuided, model_backed_probe
from bot.agent.heuristic.move import Context, Move, Proposal
from bot.agent.heuristic.registry import LAST_RESORT, MOVES, OBLIGATIONS
from bot.agent.heuristic.scorer import Score, credibility, score
from bot.agent.history import chain_steps, incumbent_diagnosis
from bot.agent.lessons import Lesson
from bot.agent.memory_screen import change_levers, checks_the_screen, predicted_oom
from bot.agent.policy import LeverSpace
from bot.agent.stopping import no_gain_allowance_left, no_gain_stop
from bot.core.diagnosis import Diagnosis
from bot.core.records import Change, RecordReader, Stop
from bot.core.state import Campaign

__all__ = [
    "JUMP_LESSON",
    "LESS_RECOMPUTE",
    "MAX_CHAIN",
    "MOVES",
    "OBLIGATIONS",
    "OOM_BATCH_LESSON",
    "REVIEW_LESSON",
    "Context",
    "HeuristicPolicy",
    "Move",
]


class HeuristicPolicy:
    """The default policy; ``ranked``: its opportunities ranked by the one score instead of the registry's order (the
    ``ranked`` policy, kept for measurement: docs/agent-moves.md#the-score)."""

    def __init__(self, ranked: bool = False) -> None:
        self.ranked = ranked
        self.name = RANKED_POLICY if ranked else POLICY

    def propose(
        self, campaign: Campaign, diagnosis: Diagnosis, lessons: list[Lesson], levers: LeverSpace, records: RecordReader
    ) -> Change | Stop:
        incumbent = incumbent_diagnosis(campaign, records) if campaign.steps else diagnosis
        ctx = Context(campaign, diagnosis, lessons, levers, records, incumbent)
        flat = no_gain_stop(campaign, incumbent)
        if flat is not None:  # no gain in hand and the allowance spent: only a large predicted saving goes on
            past = past_the_allowance(ctx)
            if past is None:
                return Stop(why=flat, policy=self.name)
            decision: Proposal = told(ctx, *past)
        else:
            decision = first_proposal(ctx, self.ranked)
        if isinstance(decision, Change) and not decision.enabler and not checks_the_screen(decision):  # OOM, for free
            oom = predicted_oom(campaign, change_levers(campaign, decision), decision.stacked_on, levers, records)
            if oom is not None:  # a layout that cannot fit is not slow: its retries follow from the out-of-memory trial
                decision = decision.model_copy(update={"predicted_oom": oom, "predicted_slower": ""})
            elif not decision.predicted_slower:
                decision = fill_first(campaign, levers, decision) or decision
        if not isinstance(decision, Change):
            return decision
        # what it enables and whether it is a blind probe, stated on every proposal (None is left to older records)
        update = {"enables": decision.enables or [], "probe": bool(decision.probe)}
        if self.ranked:
            update["policy"] = self.name
        left = None if flat is not None else no_gain_allowance_left(campaign, incumbent)
        if left:  # a probe with no gain in hand spends what is left of it
            update["max_device_hours"] = left
        return decision.model_copy(update=update)


def past_the_allowance(ctx: Context) -> tuple[str, Change] | None:
    """With no gain in hand and the allowance spent: the cost model's probe (:func:`.model_guided.model_backed_probe`),
    once a campaign, and the obligations that continue its chain (an out-of-memory retry); the move's id and change."""
    campaign = ctx.campaign
    if not campaign.steps:
        return None  # stopped before the first step: the diagnosis says nothing measurable is left to win
    probe = next(
        (s for s in campaign.steps if s.change.prediction and s.change.prediction.move == ModelGuided.id), None
    )
    if probe is None:
        change = model_backed_probe(ctx)
        return None if change is None else (ModelGuided.id, change)
    if chain_steps(campaign, campaign.steps[-1].n)[-1] != probe.n:
        return None
    for move in MOVES:
        proposal = move.propose(ctx) if move.obligation else None
        if (
            isinstance(proposal, Change)
            and proposal.stacked_on
            and chain_steps(campaign, proposal.stacked_on)[-1] == probe.n
        ):
            return move.id, proposal
    return None


def told(ctx: Context, move: str, proposal: Proposal) -> Proposal:
    """``proposal`` with the record of the move that made it, what the policy saw and its score's prediction."""
    return _told(ctx, move, proposal, None, credibility(ctx.campaign, ctx.space), {x.id: x for x in ctx.lessons})


def _told(
    ctx: Context, move: str, proposal: Proposal, scored: Score | None, trust: float, by_id: dict[str, Lesson]
) -> Proposal:
    if not isinstance(proposal, Change):
        return proposal
    if scored is None:
        scored = score(ctx.campaign, ctx.space, ctx.incumbent, proposal, trust, by_id)
    return proposal.model_copy(update={"prediction": prediction(move, ctx.incumbent, scored)})


def first_proposal(ctx: Context, ranked: bool = False) -> Proposal:
    """The first move of :data:`MOVES` that proposes something (exploration, last, always does). ``ranked``: the first
    obligation that proposes, else the opportunity with the highest score (:mod:`.scorer`, registry order breaking
    ties), else the last resorts in order. Either way a change carries the move that proposed it, what the policy saw
    and its score's prediction (:mod:`.explain`)."""
    trust = credibility(ctx.campaign, ctx.space)
    by_id = {lesson.id: lesson for lesson in ctx.lessons}

    def told(move: str, proposal: Proposal, scored: Score | None = None) -> Proposal:
        return _told(ctx, move, proposal, scored, trust, by_id)

    if not ranked:
        for move in MOVES:
            proposal = move.propose(ctx)
            if proposal is not None:
                return told(move.id, proposal)
        return Stop(why="no untried legal change is left in the search space", policy=POLICY)
    for move in MOVES:
        if move.obligation:
            proposal = move.propose(ctx)
            if proposal is not None:
                return told(move.id, proposal)
    offers: list[tuple[float, int, str, Change, Score]] = []
    for move in MOVES:
        if move.obligation or move.id in LAST_RESORT:
            continue
        proposal = move.propose(ctx)
        if isinstance(proposal, Stop):
            return proposal
        if proposal is not None:
            s = score(ctx.campaign, ctx.space, ctx.incumbent, proposal, trust, by_id)
            offers.append((s.value, -len(offers), move.id, proposal, s))
    if offers:
        _, _, move_id, best, s = max(offers, key=lambda t: (t[0], t[1]))
        return told(move_id, best, s)
    for move in MOVES:
        if move.id in LAST_RESORT:
            proposal = move.propose(ctx)
            if proposal is not None:
                return told(move.id, proposal)
    return Stop(why="no untried legal change is left in the search space", policy=POLICY)
