"""TODO jump_review"""

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
    """A kept layout jump moved several parallel degrees at once on the analytic model's word, and its measured
    gain says how the whole move paid, not whether each degree went as far as it should: the model that ranked
    the target errs most on the terms the jump traded (the bubble of few microbatches, CP's ring attention), so
    one of its degrees may have gone a notch too far, or stopped a notch short. Each degree the jump moved, one
    notch back towards where it came from and one notch further the way it went (the local batch following the
    pinned global batch's share as an enabler where the DP degree changes), is measured once on the incumbent --
    a coordinate-descent pass over the jump's own coordinates, each tried both ways (lesson
    ``layout-jump-review``): the reviews predicted fastest first, none whose peak, anchored on the incumbent's
    measured one, exceeds the device (the jump's own fit test, no margin), and no more once one ran and measured
    no gain (an out-of-memory run, cheap, does not end them). Proposed after the recompute the incumbent can shed
    and before the lessons. Simulated, 5 seeds: qwen3-30b-a3b on 16 B200s, whose jump to PP 4 measured +44 %
    where the model predicted +224 %, keeps PP 2 at +4-9 % (94.9 -> 97.6 % of the oracle); llama3.1-70b on 32
    B200s keeps CP 2 over the jump's CP 4 at +5-9 % (93.6 -> 96.2 %). One notch further: minimax-m2 on 128 H100s
    (a scratch probe, 3 seeds), whose jump went PP 4 -> 8, keeps PP 16 with local batch 32 at +6 % (93.5 -> 99.0 %);
    no other of 33 simulated tasks moved. Where the jump placed every degree right the first review ends the
    pass at about one run; with every degree reviewed regardless of misses minimax-m2 on 128 H100s lost
    93.5 -> 89.0 %, and before the lessons' recompute change, qwen3-235b-a22b on 32 B200s lost 82.9 -> 71.7 %."""
    jumps = [s for s in campaign.steps if s.kept and any(JUMP_LESSON in campaign.step(m).change.lessons for m in chain_steps(campaign, s.n))]
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
        for notch, way in ((notch_toward(space.values[c.lever], c.after, c.before), "back"),
                           (next_notch(space.values[c.lever], c.before, c.after), "further")):
            if notch is None or (c.lever, str(notch)) in tried or proposed_by(campaign, REVIEW_LESSON, c.lever, notch):
                continue
            target = with_batch_share(campaign.incumbent_levers, c.lever, notch)
            peak = predicted_peak(campaign, target, None, space, records)
            if peak is not None and peak.predicted > peak.capacity:
                continue  # the jump's own test (layout_jump): anchored on the measured peak, no margin
            options.append((predicted_step(space, target), c, notch, way))
    for _, c, notch, way in sorted(options, key=lambda o: o[0]):
        why = (f"step {jump.n} (the layout jump, kept at {jump.gain:+.1%}) moved {c.lever.rsplit('.', 1)[-1]} {c.before} -> "
               f"{c.after} together with other levers, on the cost model's word: one notch {way}, {c.after} -> {notch}, "
               "measured once on the incumbent (a coordinate-descent pass over the jump's degrees)")
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
