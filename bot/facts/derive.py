"""Read a :class:`~bot.facts.spec.ModelSpec` off a torchtitan 0.3.0 model config and its model built on the meta device.

torchtitan's model configs are nested dataclasses (``cfg.model_spec.model``: ``dim``, ``vocab_size``, ``layers``, each
layer an ``attention``, a ``feed_forward`` or a ``moe``). The structure is read generically: the first field of a given
name, depth first. What the configs do not say alike across families is handled here and said so:

- latent attention (DeepSeek-V3, ``kv_lora_rank``): no KV-head count; K and V are per head (``n_kv_heads = n_heads``);
- sliding windows: ``sliding_window_size`` (gpt-oss) or an integer ``window_size`` (muse_glimmer), on some layers only;
- shared experts: one SwiGLU of width ``shared_experts.w1.out_features`` (counted as one expert of that width);
- a fused QKV projection (``wqkv``) or separate ones: which matmul outputs selective AC keeps depends on it.

Parameter totals are exact (the meta model's ``numel``); active parameters subtract the routed experts a token does not
use (parameters under ``routed_experts``, scaled by ``1 - top_k / n_experts``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from bot.facts.spec import ModelSpec

_SKIP = ("param_init", "sharding_config")


def find(obj: Any, name: str, *, depth: int = 6) -> Any:
    """The first non-None field called ``name`` in a nested dataclass, depth first (None when there is none)."""
    if depth < 0 or not dataclasses.is_dataclass(obj):
        return None
    fields = [f.name for f in dataclasses.fields(obj) if f.name not in _SKIP]
    if name in fields and getattr(obj, name) is not None:
        return getattr(obj, name)
    for f in fields:
        found = find(getattr(obj, f), name, depth=depth - 1)
        if found is not None:
            return found
    return None


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else 0


def _window(layer: Any) -> int:
    attn = getattr(layer, "attention", None)
    for name in ("sliding_window_size", "window_size"):
        w = getattr(attn, name, None)
        if isinstance(w, int) and not isinstance(w, bool) and w > 0:
            return w
    return 0


def spec_from_config(
    model_cfg: Any, *, model_id: str, source: str, n_params: int = 0, routed_params: int = 0
) -> ModelSpec:
    """The spec of a torchtitan model config (``cfg.model_spec.model``); ``n_params``/``routed_params`` from the built
    model (0: unknown, counted analytically by :mod:`bot.facts.flops`)."""
    layers = list(getattr(model_cfg, "layers", None) or [])
    if not layers:
        raise ValueError("the model config has no `layers` list (not a decoder-only transformer torchtitan builds)")
    hidden = _int(getattr(model_cfg, "dim", 0)) or _int(find(layers[0], "dim"))
    moe_layers = [ly for ly in layers if getattr(ly, "moe", None) is not None]
    dense_layers = [ly for ly in layers if getattr(ly, "moe", None) is None]
    attn = getattr(layers[0], "attention", None)
    n_heads = _int(find(attn, "n_heads"))
    mla = find(attn, "kv_lora_rank") is not None
    head_dim = _int(find(attn, "head_dim"))
    if not head_dim and n_heads:
        wo_in = _int(find(getattr(attn, "wo", None), "in_features"))
        head_dim = wo_in // n_heads if wo_in else hidden // n_heads
    n_kv = n_heads if mla else (_int(find(attn, "n_kv_heads")) or n_heads)
    ffn_dense = _int(find(getattr(dense_layers[0], "feed_forward", None), "out_features")) if dense_layers else 0
    fields: dict[str, Any] = {}
    if moe_layers:
        moe = moe_layers[0].moe
        n_experts = _int(find(moe, "num_experts"))
        shared = getattr(moe, "shared_experts", None)
        shared_w = _int(find(getattr(shared, "w1", None), "out_features")) if shared is not None else 0
        fields.update(
            n_experts=n_experts,
            top_k=_int(find(moe, "top_k")),
            ffn_expert=_int(find(getattr(moe, "routed_experts", None), "hidden_dim")),
            n_shared_experts=1 if shared_w else 0,
            ffn_shared=shared_w,
        )
    if mla:
        fields.update(
            attention="mla",
            q_lora_rank=_int(find(attn, "q_lora_rank")),
            kv_lora_rank=_int(find(attn, "kv_lora_rank")),
            qk_nope_head_dim=_int(find(attn, "qk_nope_head_dim")),
            qk_rope_head_dim=_int(find(attn, "qk_rope_head_dim")),
            v_head_dim=_int(find(attn, "v_head_dim")),
        )
    fields["qkv_fused"] = not mla and find(attn, "wqkv") is not None
    windows = [w for w in (_window(ly) for ly in layers) if w]
    vocab = _int(getattr(model_cfg, "vocab_size", 0)) or _int(
        find(getattr(model_cfg, "tok_embeddings", None), "num_embeddings")
    )
    active = 0
    if n_params:
        top_k, n_exp = fields.get("top_k", 0), fields.get("n_experts", 0)
        unused = routed_params * (1 - top_k / n_exp) if n_exp else 0
        active = int(round(n_params - unused))
    return ModelSpec(
        id=model_id,
        name=model_id,
        source=source,
        n_layers=len(layers),
        hidden=hidden,
        n_heads=n_heads,
        n_kv_heads=n_kv,
        head_dim=head_dim,
        vocab=vocab,
        ffn_dense=ffn_dense,
        n_dense_layers=len(dense_layers),
        tied_embeddings=bool(getattr(model_cfg, "enable_weight_tying", False)),
        max_seq_len=_int(find(attn, "max_seq_len")) or 131072,
        n_params=n_params,
        n_active_params=active,
        sliding_window=max(windows, default=0),
        n_window_layers=len(windows),
        torchtitan="built from the torchtitan config",
        **fields,
    )


def count_params(model: Any) -> tuple[int, int]:
    """(all parameters, routed-expert parameters) of a built model (meta tensors are fine)."""
    total = routed = 0
    for name, p in model.named_parameters():
        total += p.numel()
        if "routed_experts" in name or ".experts." in name and "shared" not in name:
            routed += p.numel()
    return total, routed
