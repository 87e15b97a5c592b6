"""Pipeline schedules: bubble length and in-flight activations per schedule (docs/reference/performance-model.md §4.3).

Bubbles are in units of ``T_mb``, one microbatch's forward+backward through all of a rank's stages:
GPipe / 1F1B idle ``p - 1``; interleaved schedules ``(p - 1) / v`` (Narayanan et al. 2021); zero-bubble variants
cut that further (Qi et al., arXiv 2401.10241: ZB-H1 about a third of 1F1B, ZB-V near zero). With fewer
microbatches than ranks (m < p) an interleaved rank also waits ``p - m`` slots per round.

In-flight activations follow PyTorch's schedule code: 1F1B holds ``min(m, p - rank)`` microbatches; interleaved
rank r warms up ``(v - 1) * microbatches_per_round + 2 * (p - 1 - r)`` chunks (``_get_warmup_ops``), i.e. about
``1 + (p - 1) / (p v)`` times 1F1B; GPipe and LoopedBFS hold every microbatch.
"""

from __future__ import annotations

from bot.facts.legality import Layout

# Share of the 1F1B-equivalent bubble that zero-bubble schedules leave (ZB-H1 ~1/3; ZB-V / DualPipeV ~0).
ZERO_BUBBLE_SHARE = {"InterleavedZeroBubble": 1.0 / 3.0, "ZBVZeroBubble": 0.15, "DualPipeV": 0.15}


def bubble_units(lay: Layout) -> float:
    """Idle time per pipeline step on the critical path, in units of T_mb (0 without PP)."""
    p, v, m = lay.pp, lay.stages_per_rank, lay.n_microbatches
    if p == 1:
        return 0.0
    if lay.schedule in ("1F1B", "GPipe"):
        return float(p - 1)
    base = (p - 1) / v + max(0, p - m)
    return base * ZERO_BUBBLE_SHARE.get(lay.schedule, 1.0)


def inflight_chunks(lay: Layout, rank: int) -> float:
    """Activations held at the peak on pipeline rank ``rank``, in units of (one microbatch x one stage chunk).

    A chunk is ``1 / stages_per_rank`` of the rank's layers, so the memory is ``chunks / v * rank_layers``.
    """
    p, v, m = lay.pp, lay.stages_per_rank, lay.n_microbatches
    if p == 1:
        return 1.0
    if lay.schedule in ("GPipe", "LoopedBFS"):
        return float(m * v)
    if lay.schedule == "1F1B":
        return float(min(m, p - rank))
    if lay.schedule in ("ZBVZeroBubble", "DualPipeV"):
        extra = 1.0 if lay.schedule == "DualPipeV" else 0.0
        return float(min(m * v, v * (p - rank) + extra))
    rounds = max(1, m // p)
    per_round = m // rounds
    warmup = (v - 1) * per_round + 2 * (p - 1 - rank)
    return float(min(m * v, warmup + 1))
