"""The review of a kept layout jump: each degree it moved, one notch back and one further."""

from __future__ import annotations

from bot.agent.cost_focus import (
    predicted_step,
)
from bot.agent.heuristic.checked import checked
from bot.agent.heuristic.constants import DEGREES, JUMP_LESSON, REVIEW_LESSON
from bot.agent.heuristic.move import Context
from bot.agent.history import (
    chain_steps,
    proposed_by,
    tried_from_incumbent,
)
from bot.agent.layout_moves import (
    next_notch,
    notch_toward,
    with_batch_share,
)
from bot.agent.memory_screen import predicted_peak
from bot.agent.policy import LeverSpace
from bot.core import levers as catalog
from bot.core.records import Change, RecordReader
from bot.core.state import Campaign


def jump_review(campaign: Campaign, space: LeverSpace, records: RecordReader) -> Change | None:
    """Each degree a kept layout jump moved, one notch back and one notch further (the local batch following the
    global batch's share as an enabler), measured once on the incumbent, predicted fastest first, none predicted not
    to fit: a coordinate-descent pass over the jump's own degrees (lesson ``layout-jump-review``); the model errs most
    on the terms a jump trades. No more once one ran and measured no gain (an out-of-memory run does not end them)."""
    jumps = [
        s
        for s in campaign.steps
        if s.kept and any(JUMP_LESSON in campaign.step(m).change.lessons for m in chain_steps(campaign, s.n))
    ]
    if not jumps:
        return None
    jump = jumps[-1]
    reviews = [s for s in campaign.steps if s.n > jump.n and REVIEW_LESSON in s.change.lessons and s.runs]
    if any(not s.kept and all(r.outcome != "oom" for r in s.runs) for s in reviews):
        return None  # a review measured no gain: the degrees the model ranks below it are not worth a run
    current = catalog.effective(campaign.incumbent_levers)
    tried = tried_from_incumbent(campaign)
    options = []
    for m in chain_steps(campaign, jump.n):
        c = campaign.step(m).change
        if c.lever not in DEGREES or c.lever not in space.values or current.get(c.lever) != c.after:
            continue
        for notch, way in (
            (notch_toward(space.values[c.lever], c.after, c.before), "back"),
            (next_notch(space.values[c.lever], c.before, c.after), "further"),
        ):
            if notch is None or (c.lever, str(notch)) in tried or proposed_by(campaign, REVIEW_LESSON, c.lever, notch):
                continue
            target = with_batch_share(campaign.incumbent_levers, c.lever, notch)
            peak = predicted_peak(campaign, target, None, space, records)
            if peak is not None and peak.predicted > peak.capacity:
                continue  # the jump's own test (layout_jump): anchored on the measured peak, no margin
            options.append((predicted_step(space, target), c, notch, way))
    for _, c, notch, way in sorted(options, key=lambda o: o[0]):
        why = (
            f"step {jump.n} (the layout jump, kept at {jump.gain:+.1%}) moved {c.lever.rsplit('.', 1)[-1]} {c.before} -> "
            f"{c.after} together with other levers, on the cost model's word: one notch {way}, {c.after} -> {notch}, "
            "measured once on the incumbent (a coordinate-descent pass over the jump's degrees)"
        )
        change = checked(campaign, space, c.lever, notch, why, [REVIEW_LESSON])
        if change is not None:
            return change
    return None


class JumpReview:
    """Each degree a kept layout jump moved, one notch back and one further (:func:`jump_review`)."""

    id = "jump-review"
    lessons = (REVIEW_LESSON,)
    obligation = False

    def propose(self, ctx: Context) -> Change | None:
        return jump_review(ctx.campaign, ctx.space, ctx.records)
