"""Activation memory of one transformer layer, per token, for each activation-checkpoint mode (analytic).

Counts the bf16 tensors autograd saves between forward and backward in a SwiGLU block with fused (flash-style)
attention, after Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models"
(https://arxiv.org/abs/2205.05198), widened for GQA/MLA, MoE dispatch and shared experts. Checked against torch's
``MemTracker`` on torchtitan's own blocks in ``tests/facts/``.
"""

from __future__ import annotations

from bot.facts.spec import ModelSpec

# Share of the no-AC activations that torchtitan's per-op selective AC keeps (it saves matmul outputs, recomputes
# the rest). Measured with torch's MemTracker on a llama3_8b block at seq 8192 on the CPU: 513 / 1,761 MiB.
SELECTIVE_SHARE = 0.29


def layer_elems_per_token(m: ModelSpec, *, moe: bool, tp: int = 1, sp: bool = False) -> float:
    """bf16 elements saved per token by one layer without activation checkpointing (one TP rank)."""
    h = m.hidden
    e = 2 * h / (tp if sp else 1)  # inputs of the two RMSNorms (residual stream; sequence-sharded with SP)
    e += 2 * h  # all-gathered inputs of the QKV and FFN-in GEMMs (full sequence on every TP rank)
    e += (3 * m.q_dim + 4 * m.kv_dim) / tp  # q, k, v before/after RoPE, attention output
    if moe:
        e += (2 * m.top_k * h + 4 * m.top_k * m.ffn_expert) / tp  # dispatched tokens, expert SwiGLU, expert out
        e += 4 * m.n_shared_experts * m.ffn_shared / tp + 2 * m.n_experts / tp  # shared expert, router scores
    else:
        e += 4 * m.ffn_dense / tp  # gate, up, silu(gate), product
    return e


def layer_bytes_per_token(m: ModelSpec, mode: str, *, moe: bool) -> float:
    """Bytes one layer keeps per token under AC ``mode`` (none | selective | full), bf16, no TP."""
    none = 2.0 * layer_elems_per_token(m, moe=moe)
    full = 2.0 * m.hidden  # only the layer's input
    if mode == "none":
        return none
    if mode == "selective":
        return max(full, SELECTIVE_SHARE * none)
    if mode == "full":
        return full
    raise ValueError(f"unknown activation-checkpoint mode {mode!r}; expected none, selective or full")
