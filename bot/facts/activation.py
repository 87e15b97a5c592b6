"""Activation memory of one transformer layer, per token, for each activation-checkpoint mode (analytic).

Counts the bf16 tensors autograd saves between forward and backward in a SwiGLU block with fused (flash-style)
attention, after Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models"
(https://arxiv.org/abs/2205.05198), widened for GQA/MLA, MoE dispatch and shared experts. Checked against torch's
``MemTracker`` on torchtitan's own blocks in ``tests/facts/``.
"""

from __future__ import annotations

from bot.facts.spec import ModelSpec

# Share of the no-AC activations that torchtitan's per-op selective AC keeps, for a block whose save order is not
# counted structurally (separate Q/K/V or latent projections). Measured with torch's MemTracker on a llama3_8b block at
# seq 8192 on the CPU: 513 / 1,761 MiB.
SELECTIVE_SHARE = 0.29
LSE_BYTES_PER_HEAD = 4  # the attention kernel's float32 log-sum-exp, kept for the backward
TOPK_BYTES = 4 + 8  # the router's top-k scores (float32) and indices (int64), per routed expert


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


def selective_bytes_per_token(m: ModelSpec, *, moe: bool) -> float:
    """Bytes torchtitan's selective AC keeps per token in a block with a fused QKV projection: the layer input, the
    output of every other matmul in call order (QKV, FFN gate, FFN out; the router gate is always recomputed, and the
    routed experts' grouped matmuls are not on the save list), the attention output with its log-sum-exp, and the
    router's top-k. torchtitan ``distributed/activation_checkpoint.py`` (``_save_list``, the alternating ``mm``)."""
    h, q, kv = m.hidden, m.q_dim, m.kv_dim
    elems = h + (q + 2 * kv) + q  # input, QKV output, attention output
    elems += 0 if moe else m.ffn_dense + h  # dense FFN: w1's output and w2's (w3's is recomputed)
    extra = LSE_BYTES_PER_HEAD * m.n_heads + (TOPK_BYTES * m.top_k if moe else 0)
    return 2.0 * elems + extra


def layer_bytes_per_token(m: ModelSpec, mode: str, *, moe: bool) -> float:
    """Bytes one layer keeps per token under AC ``mode`` (none | selective | full), bf16, no TP."""
    none = 2.0 * layer_elems_per_token(m, moe=moe)
    full = 2.0 * m.hidden  # only the layer's input
    if mode == "none":
        return none
    if mode == "selective":
        if m.qkv_fused and m.attention == "gqa" and not (moe and m.n_shared_experts):
            return selective_bytes_per_token(m, moe=moe)
        return max(full, SELECTIVE_SHARE * none)
    if mode == "full":
        return full
    raise ValueError(f"unknown activation-checkpoint mode {mode!r}; expected none, selective or full")
