"""Collective communication times per parallel axis (docs/reference/performance-model.md §4.4), alpha-beta model on NCCL bus bandwidth.

Bytes per rank follow the nccl-tests definitions: all-gather / reduce-scatter / all-to-all move ``(n-1)/n * M``,
all-reduce ``2 (n-1)/n * M``. A group inside one node runs at NVLink bus bandwidth; a group that crosses nodes is
limited by the per-GPU NIC (rings use one NIC per GPU). Groups are placed as torchtitan builds its device mesh,
``[pp, dp_replicate, dp_shard, cp, tp]`` with tp innermost; EP takes the innermost ranks of ``dp_shard*cp*tp``.
"""

from __future__ import annotations

from pydantic import BaseModel

from bot.facts.legality import Layout
from bot.sim.efficiency import EfficiencyFactors
from bot.sim.hardware import HardwareSpec


class Link(BaseModel):
    """Bandwidth (bytes/s) and per-step latency of one communication group."""

    size: int
    bandwidth: float
    alpha: float
    intra_node: bool


def link(size: int, span: int, lay: Layout, hw: HardwareSpec, f: EfficiencyFactors) -> Link:
    """A group of ``size`` ranks whose members lie within a block of ``span`` consecutive ranks."""
    intra = span <= lay.gpus_per_node
    if intra:
        return Link(size=size, bandwidth=hw.nvlink_gbs * 1e9 * f.nvlink_eff, alpha=f.alpha_intra_s, intra_node=True)
    return Link(size=size, bandwidth=hw.internode_gbs * 1e9 * f.internode_eff, alpha=f.alpha_inter_s, intra_node=False)


def groups(lay: Layout, hw: HardwareSpec, f: EfficiencyFactors) -> dict[str, Link]:
    """The communication groups of a layout, keyed by axis."""
    inner = lay.dp_shard * lay.cp * lay.tp
    return {
        "tp": link(lay.tp, lay.tp, lay, hw, f),
        "cp": link(lay.cp, lay.cp * lay.tp, lay, hw, f),
        "fsdp": link(lay.dp_shard * lay.cp, inner, lay, hw, f),
        "efsdp": link(lay.efsdp, inner, lay, hw, f),
        "ep": link(lay.ep, lay.ep, lay, hw, f),
        "dp_replicate": link(lay.dp_replicate, inner * lay.dp_replicate, lay, hw, f),
        "pp": link(lay.pp, lay.world, lay, hw, f),
    }


def all_gather(nbytes: float, g: Link) -> float:
    """Time to all-gather a tensor whose full (gathered) size is ``nbytes``; reduce-scatter costs the same."""
    if g.size <= 1 or nbytes <= 0:
        return 0.0
    n = g.size
    return (n - 1) / n * nbytes / g.bandwidth + (n - 1) * g.alpha


def all_reduce(nbytes: float, g: Link) -> float:
    if g.size <= 1 or nbytes <= 0:
        return 0.0
    n = g.size
    return 2 * (n - 1) / n * nbytes / g.bandwidth + 2 * (n - 1) * g.alpha


def all_to_all(nbytes: float, lay: Layout, hw: HardwareSpec, f: EfficiencyFactors, bw_gain: float = 1.0) -> float:
    """EP dispatch or combine: each rank exchanges ``nbytes`` with the other ``ep - 1`` ranks of its group.

    The intra-node share goes over NVLink, the rest over the NIC; both run at once, so the slower one counts.
    """
    e = lay.ep
    if e <= 1 or nbytes <= 0:
        return 0.0
    local = min(e, lay.gpus_per_node)
    intra = (local - 1) / e * nbytes / (hw.nvlink_gbs * 1e9 * f.nvlink_eff * bw_gain)
    inter = (e - local) / e * nbytes / (hw.internode_gbs * 1e9 * f.internode_eff * bw_gain)
    alpha = f.alpha_intra_s if e <= lay.gpus_per_node else f.alpha_inter_s
    return max(intra, inter) + (e - 1) * alpha


def p2p(nbytes: float, g: Link) -> float:
    """One pipeline send (or receive) between neighbouring stages."""
    if g.size <= 1 or nbytes <= 0:
        return 0.0
    return nbytes / g.bandwidth + g.alpha
