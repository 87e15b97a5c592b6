"""The CPU MoE workload: a small Qwen3-MoE decoder from torchtitan's own MoE code, on project-made text.

Use as ``--module bot.inrank.workloads.moe_tiny --config moe_tiny_cpu``. The model is torchtitan's
``Qwen3Model`` built by ``torchtitan.models.qwen3._build_qwen3_moe_layers`` (GQA attention with QK-norm,
``MoE`` with ``TokenChoiceTopKRouter``, ``GroupedExperts`` on ``torch._grouped_mm``, the standard
``AllToAllTokenDispatcher`` that falls back to a local dispatch at EP 1, aux-loss-free load balancing
with an expert bias updated by ``register_moe_load_balancing_hook``); only the sizes are small.

Scaled down from torchtitan's ``qwen3_30b_a3b`` (Qwen3-30B-A3B:
https://github.com/pytorch/torchtitan/blob/release/0.3/torchtitan/models/qwen3/__init__.py ``_30b_a3b``):

=================  ================  ==========================
                   Qwen3-30B-A3B     moe_tiny
=================  ================  ==========================
layers / dim       48 / 2048         4 / 128
heads / kv heads   32 / 4            4 / 2
head_dim           128               32
expert hidden      768 (0.375 dim)   96 (0.375 dim)
experts / top-k    128 / 8           8 / 2
router             softmax, route_norm, no shared expert, load_balance_coeff 1e-3 (torchtitan default)
RoPE theta         1e6               1e6
=================  ================  ==========================

The tokenizer and text come from :mod:`bot.inrank.workloads.text` (deterministic, nothing downloaded). On
the CPU the experts compute in float32 (``bot.inrank.cpu_compat`` patch ``grouped_experts_dtype``).
"""

from __future__ import annotations

from torchtitan.models.common import CosSinRoPE, Embedding, Linear
from torchtitan.models.common.token_dispatcher import LocalTokenDispatcher
from torchtitan.models.qwen3 import (
    _EMBEDDING_INIT,
    _LINEAR_INIT,
    _build_qwen3_moe_layers,
    _qwen3_norm,
    model_registry,
)
from torchtitan.models.qwen3.model import Qwen3Model
from torchtitan.protocols.model_spec import ModelSpec
from torchtitan.trainer import Trainer

from bot.inrank.workloads.llama3_tiny import cpu_trainer_config
from bot.inrank.workloads.text import CharTokenizerCore

DIM, N_LAYERS, N_HEADS, N_KV_HEADS, HEAD_DIM = 128, 4, 4, 2, 32
MOE_HIDDEN, NUM_EXPERTS, TOP_K = 96, 8, 2
ROPE_THETA = 1_000_000.0


def moe_model_config(
    *, num_experts: int = NUM_EXPERTS, top_k: int = TOP_K, comm_backend: str = "standard"
) -> Qwen3Model.Config:
    """torchtitan's Qwen3-MoE model config at the tiny sizes above."""
    vocab = CharTokenizerCore().vocab_size
    return Qwen3Model.Config(
        vocab_size=vocab,
        dim=DIM,
        norm=_qwen3_norm(DIM),
        tok_embeddings=Embedding.Config(num_embeddings=vocab, embedding_dim=DIM, param_init=_EMBEDDING_INIT),
        lm_head=Linear.Config(in_features=DIM, out_features=vocab, param_init=_LINEAR_INIT),
        layers=_build_qwen3_moe_layers(
            fuse_qkv=True,
            n_layers=N_LAYERS,
            dim=DIM,
            n_heads=N_HEADS,
            n_kv_heads=N_KV_HEADS,
            head_dim=HEAD_DIM,
            moe_hidden_dim=MOE_HIDDEN,
            num_experts=num_experts,
            top_k=top_k,
            attn_backend="flex",
            rope=CosSinRoPE.Config(dim=HEAD_DIM, max_seq_len=4096, theta=ROPE_THETA),
            moe_comm_backend=comm_backend,
        ),
    )


def moe_model_spec(**kwargs) -> ModelSpec:
    """torchtitan's qwen3 model spec (parallelize, pipelining, load-balancing hook) around the tiny MoE."""
    base = model_registry("debugmodel_moe")
    return ModelSpec(
        name="qwen3",
        flavor="attune_moe_tiny",
        model=moe_model_config(**kwargs),
        parallelize_fn=base.parallelize_fn,
        pipelining_fn=base.pipelining_fn,
        post_optimizer_build_fn=base.post_optimizer_build_fn,
        state_dict_adapter=base.state_dict_adapter,
    )


def moe_tiny_cpu() -> Trainer.Config:
    """The shipped MoE CPU recipe's base config (levers and pins come from the recipe on the CLI).

    As :func:`bot.inrank.workloads.llama3_tiny.llama3_tiny_cpu`: fp32 params (bf16 matmuls are ~54x
    slower on AVX2-only CPUs), CUDA graphs off, ``partial_dtensor`` (torch 2.13's FSDP2 cannot convert
    spmd_types params for dp > 1). Activation checkpointing full as ``qwen3_30b_a3b``.
    """
    return cpu_trainer_config(moe_model_spec(), local_batch_size=2, steps=30)


def moe_tiny_cpu_local_dispatch() -> Trainer.Config:
    """:func:`moe_tiny_cpu` with torchtitan's ``LocalTokenDispatcher`` in every MoE layer (EP 1 only).

    The other token dispatcher torchtitan offers on the CPU (the default ``AllToAllTokenDispatcher`` falls back
    to the same local reorder at EP 1; DeepEP, HybridEP and MinimalAsyncEP need CUDA:
    ``bot.core.levers.MOE_CUDA_ONLY``). Same routing, same combine: a legitimate change the gate must pass.
    """
    config = moe_tiny_cpu()
    for layer in config.model_spec.model.layers:
        layer.moe.routed_experts.token_dispatcher = LocalTokenDispatcher.Config(num_experts=NUM_EXPERTS, top_k=TOP_K)
    return config
