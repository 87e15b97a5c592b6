"""The architecture of one decoder-only transformer, as every consumer reads it.

Built from the torchtitan model itself (:mod:`bot.facts.derive`) or, for models torchtitan 0.3.0 cannot build,
typed from a published config (the simulator's zoo, ``bot.sim.zoo``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class ModelSpec(BaseModel):
    """Architecture of one decoder-only transformer (dense or MoE), enough for FLOPs, memory and layout checks."""

    model_config = ConfigDict(frozen=True)

    id: str
    name: str
    source: str = Field(description="URL of the config.json / paper the facts below come from")
    n_layers: int
    hidden: int
    n_heads: int
    n_kv_heads: int = Field(description="KV heads (GQA); equals n_heads for MHA and MLA")
    head_dim: int
    vocab: int
    ffn_dense: int = Field(0, description="SwiGLU intermediate size of the dense layers (0 if none)")
    n_dense_layers: int = Field(description="layers with a dense FFN (all layers for a dense model)")
    n_experts: int = 0
    top_k: int = 0
    ffn_expert: int = 0
    n_shared_experts: int = 0
    ffn_shared: int = 0
    tied_embeddings: bool = False
    max_seq_len: int
    attention: Literal["gqa", "mla"] = "gqa"
    # Multi-head latent attention (DeepSeek-V3); unused for GQA models.
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    torchtitan: str = Field("", description="support status in torchtitan 0.3.0")
    notes: str = ""
    # Facts only the built model gives (0 where the spec was typed from a published config).
    n_params: int = Field(0, description="exact parameter count of the built model (0: count analytically)")
    n_active_params: int = Field(0, description="parameters touched per token (top-k routed experts)")
    sliding_window: int = Field(0, description="window of the layers with sliding-window attention (0: none)")
    n_window_layers: int = Field(0, description="how many layers use the sliding window")
    qkv_fused: bool = Field(True, description="one fused QKV projection (what selective AC's save order depends on)")

    @property
    def is_moe(self) -> bool:
        return self.n_experts > 0

    @property
    def n_moe_layers(self) -> int:
        return self.n_layers - self.n_dense_layers

    @property
    def q_dim(self) -> int:
        """Width of the query projection output (n_heads * per-head query dim)."""
        if self.attention == "mla":
            return self.n_heads * (self.qk_nope_head_dim + self.qk_rope_head_dim)
        return self.n_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of one of K or V as stored for attention (per token)."""
        if self.attention == "mla":
            return self.n_heads * self.v_head_dim
        return self.n_kv_heads * self.head_dim
