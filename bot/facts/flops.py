"""Parameter counts and training FLOPs per token, in torchtitan's convention.

torchtitan (``torchtitan/models/utils.py`` ``get_nparams_and_flops``) counts training FLOPs per token as
``6 * (N_active - input_embedding) + 12 * L * n_heads * head_dim * seq_len``: the second term is attention
(QK^T and AV, forward + backward, no causal-mask discount). For MLA the attention term uses the real per-head
widths: ``6 * L * n_heads * (qk_head_dim + v_head_dim) * seq_len``, which equals the GQA formula when both are
``head_dim``. The same split (linear / expert / attention / head) drives the step-time model.
"""

from __future__ import annotations

from pydantic import BaseModel

from bot.facts.spec import ModelSpec


class ParamCounts(BaseModel):
    """Parameter counts of one model, split the way sharding treats them."""

    attention_per_layer: int
    dense_ffn_per_layer: int
    router_per_layer: int
    expert_each: int
    shared_per_layer: int
    norms_per_layer: int
    embedding: int
    head: int
    final_norm: int

    def dense_layer(self) -> int:
        return self.attention_per_layer + self.dense_ffn_per_layer + self.norms_per_layer

    def moe_layer_nonexpert(self) -> int:
        """Parameters of a MoE layer that are not routed experts (attention, router, shared expert, norms)."""
        return self.attention_per_layer + self.router_per_layer + self.shared_per_layer + self.norms_per_layer


class FlopsPerToken(BaseModel):
    """Training FLOPs per token (forward + backward), torchtitan convention, split by kind of work."""

    linear: float  # attention projections, dense FFN, shared experts, router
    expert: float  # routed experts actually used (top_k of n_experts)
    attention: float  # the seq_len-dependent QK^T / AV term
    head: float  # output projection (lm_head)

    @property
    def total(self) -> float:
        return self.linear + self.expert + self.attention + self.head

    @property
    def attention_share(self) -> float:
        return self.attention / self.total


def param_counts(m: ModelSpec) -> ParamCounts:
    """Count parameters per component (SwiGLU FFNs, GQA or MLA attention, untied embeddings unless stated)."""
    h = m.hidden
    if m.attention == "mla":
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        if m.q_lora_rank:
            q = h * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * m.n_heads * qk
        else:
            q = h * m.n_heads * qk
        kv = h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank
        kv += m.kv_lora_rank * m.n_heads * (m.qk_nope_head_dim + m.v_head_dim)
        attn = q + kv + m.n_heads * m.v_head_dim * h
    else:
        attn = h * m.q_dim + 2 * h * m.kv_dim + m.q_dim * h
    return ParamCounts(
        attention_per_layer=attn,
        dense_ffn_per_layer=3 * h * m.ffn_dense,
        router_per_layer=h * m.n_experts,
        expert_each=3 * h * m.ffn_expert,
        shared_per_layer=m.n_shared_experts * 3 * h * m.ffn_shared,
        norms_per_layer=2 * h,
        embedding=m.vocab * h,
        head=0 if m.tied_embeddings else m.vocab * h,
        final_norm=h,
    )


def total_params(m: ModelSpec) -> int:
    p = param_counts(m)
    n = m.n_dense_layers * p.dense_layer()
    n += m.n_moe_layers * (p.moe_layer_nonexpert() + m.n_experts * p.expert_each)
    return n + p.embedding + p.head + p.final_norm


def active_params(m: ModelSpec) -> int:
    """Parameters touched per token (top_k routed experts), embeddings included."""
    p = param_counts(m)
    n = m.n_dense_layers * p.dense_layer()
    n += m.n_moe_layers * (p.moe_layer_nonexpert() + m.top_k * p.expert_each)
    return n + p.embedding + p.head + p.final_norm


def attention_flops_per_token_per_layer(m: ModelSpec, seq_len: int) -> float:
    """QK^T and AV FLOPs per token per layer, forward + backward, no causal discount (torchtitan convention)."""
    if m.attention == "mla":
        return 6.0 * m.n_heads * (m.qk_nope_head_dim + m.qk_rope_head_dim + m.v_head_dim) * seq_len
    return 12.0 * m.n_heads * m.head_dim * seq_len


def flops_per_token(m: ModelSpec, seq_len: int) -> FlopsPerToken:
    """Training FLOPs per token split by kind; ``.total`` is torchtitan's ``num_flops_per_token``."""
    p = param_counts(m)
    linear_params = m.n_dense_layers * p.dense_layer() + m.n_moe_layers * p.moe_layer_nonexpert()
    return FlopsPerToken(
        linear=6.0 * linear_params,
        expert=6.0 * m.n_moe_layers * m.top_k * p.expert_each,
        attention=m.n_layers * attention_flops_per_token_per_layer(m, seq_len),
        head=6.0 * (p.head + p.final_norm),
    )
