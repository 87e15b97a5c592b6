"""Model zoo: the architecture facts the simulator needs, one cited record per model.

Every number here is copied from the model's published ``config.json`` (Hugging Face) or from the model's paper;
the ``source`` URL on each record says where. Derived quantities (parameter counts, FLOPs) live in
``bot.sim.flops`` and are computed from these facts, never stored.
"""

from __future__ import annotations

from bot.facts.spec import ModelSpec

_HF = "https://huggingface.co"

ZOO: dict[str, ModelSpec] = {
    m.id: m
    for m in [
        ModelSpec(
            id="llama3.1-8b",
            name="Llama-3.1-8B",
            source=f"{_HF}/meta-llama/Llama-3.1-8B/blob/main/config.json",
            n_layers=32, hidden=4096, n_heads=32, n_kv_heads=8, head_dim=128, vocab=128256,
            ffn_dense=14336, n_dense_layers=32, max_seq_len=131072,
            torchtitan="native: llama3 / llama3_8b",
            notes="Also Llama 3 paper (arXiv 2407.21783) Table 3.",
        ),
        ModelSpec(
            id="llama3.1-70b",
            name="Llama-3.1-70B",
            source=f"{_HF}/meta-llama/Llama-3.1-70B/blob/main/config.json",
            n_layers=80, hidden=8192, n_heads=64, n_kv_heads=8, head_dim=128, vocab=128256,
            ffn_dense=28672, n_dense_layers=80, max_seq_len=131072,
            torchtitan="native: llama3 / llama3_70b",
            notes="Also Llama 3 paper (arXiv 2407.21783) Table 3.",
        ),
        ModelSpec(
            id="llama3.1-405b",
            name="Llama-3.1-405B",
            source=f"{_HF}/meta-llama/Llama-3.1-405B/blob/main/config.json",
            n_layers=126, hidden=16384, n_heads=128, n_kv_heads=8, head_dim=128, vocab=128256,
            ffn_dense=53248, n_dense_layers=126, max_seq_len=131072,
            torchtitan="native: llama3 / llama3_405b (float8 rowwise, async TP, compile)",
            notes="Also Llama 3 paper (arXiv 2407.21783) Table 3.",
        ),
        ModelSpec(
            id="llama3-tiny",
            name="ATTUNE's tiny llama3 (torchtitan Llama3Model, ~0.8M parameters)",
            source="https://github.com/pytorch/torchtitan/blob/release/0.3/torchtitan/models/llama3/__init__.py",
            n_layers=4, hidden=128, n_heads=4, n_kv_heads=2, head_dim=32, vocab=48,
            ffn_dense=384, n_dense_layers=4, max_seq_len=4096,
            torchtitan="native model code with tiny sizes: bot/inrank/workloads/llama3_tiny.py (module bot.inrank.workloads.llama3_tiny)",
            notes="Sizes from bot/inrank/workloads/llama3_tiny.py (DIM 128, 4 heads, 2 KV heads, 4 layers); vocab = the "
            "48-symbol character tokenizer of bot/inrank/workloads/text.py; ffn 384 = compute_ffn_hidden_dim(128, multiple_of=64).",
        ),
        ModelSpec(
            id="mixtral-8x22b",
            name="Mixtral-8x22B-v0.1",
            source=f"{_HF}/mistralai/Mixtral-8x22B-v0.1/blob/main/config.json",
            n_layers=56, hidden=6144, n_heads=48, n_kv_heads=8, head_dim=128, vocab=32000,
            n_dense_layers=0, n_experts=8, top_k=2, ffn_expert=16384, max_seq_len=65536,
            torchtitan="experimental transformers_modeling_backend only",
            notes="All 56 layers MoE, softmax router, no sliding window.",
        ),
        ModelSpec(
            id="glm-4.5",
            name="GLM-4.5 (355B-A32B)",
            source=f"{_HF}/zai-org/GLM-4.5/blob/main/config.json",
            n_layers=92, hidden=5120, n_heads=96, n_kv_heads=8, head_dim=128, vocab=151552,
            ffn_dense=12288, n_dense_layers=3, n_experts=160, top_k=8, ffn_expert=1536,
            n_shared_experts=1, ffn_shared=1536, max_seq_len=131072,
            torchtitan="experimental transformers_modeling_backend only (GLM-4.x MoE)",
            notes="Q projection 96x128=12288 > hidden 5120. The 1 MTP layer is not modelled. "
            "Also https://docs.nvidia.com/nemo/megatron-bridge/latest/models/llm/glm45.html",
        ),
        ModelSpec(
            id="minimax-m2",
            name="MiniMax-M2 (230B-A10B)",
            source=f"{_HF}/MiniMaxAI/MiniMax-M2/blob/main/config.json",
            n_layers=62, hidden=3072, n_heads=48, n_kv_heads=8, head_dim=128, vocab=200064,
            n_dense_layers=0, n_experts=256, top_k=8, ffn_expert=1536, max_seq_len=196608,
            torchtitan="none (no MiniMax-M2 training model in torchtitan)",
            notes="Full attention in all 62 layers; Q projection 48x128=6144 > hidden 3072. MTP modules not modelled.",
        ),
        ModelSpec(
            id="deepseek-v3",
            name="DeepSeek-V3 (671B-A37B)",
            source=f"{_HF}/deepseek-ai/DeepSeek-V3/blob/main/config.json",
            n_layers=61, hidden=7168, n_heads=128, n_kv_heads=128, head_dim=128, vocab=129280,
            ffn_dense=18432, n_dense_layers=3, n_experts=256, top_k=8, ffn_expert=2048,
            n_shared_experts=1, ffn_shared=2048, max_seq_len=163840, attention="mla",
            q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
            torchtitan="native: deepseek_v3 / deepseek_v3_671b",
            notes="MLA attention; the MTP module is not modelled.",
        ),
        ModelSpec(
            id="qwen3-30b-a3b",
            name="Qwen3-30B-A3B",
            source=f"{_HF}/Qwen/Qwen3-30B-A3B/blob/main/config.json",
            n_layers=48, hidden=2048, n_heads=32, n_kv_heads=4, head_dim=128, vocab=151936,
            n_dense_layers=0, n_experts=128, top_k=8, ffn_expert=768, max_seq_len=40960,
            torchtitan="native: qwen3 / qwen3_30b_a3b",
        ),
        ModelSpec(
            id="qwen3-235b-a22b",
            name="Qwen3-235B-A22B",
            source=f"{_HF}/Qwen/Qwen3-235B-A22B/blob/main/config.json",
            n_layers=94, hidden=4096, n_heads=64, n_kv_heads=4, head_dim=128, vocab=151936,
            n_dense_layers=0, n_experts=128, top_k=8, ffn_expert=1536, max_seq_len=40960,
            torchtitan="flavour only (qwen3 235B-A22B, no config function)",
        ),
        ModelSpec(
            id="moe-tiny",
            name="ATTUNE moe-tiny (Qwen3-30B-A3B scaled down)",
            source="https://github.com/pytorch/torchtitan/blob/release/0.3/torchtitan/models/qwen3/__init__.py",
            n_layers=4, hidden=128, n_heads=4, n_kv_heads=2, head_dim=32, vocab=48,
            n_dense_layers=0, n_experts=8, top_k=2, ffn_expert=96, max_seq_len=4096,
            torchtitan="native: qwen3 MoE layers, config function bot.inrank.workloads.moe_tiny.moe_tiny_cpu",
            notes="the CPU MoE workload; every number is a constant of bot/inrank/workloads/moe_tiny.py (a test holds them equal)",
        ),
    ]
}


def get_model(model_id: str) -> ModelSpec:
    """Look up a zoo model by id; the error lists the known ids."""
    try:
        return ZOO[model_id]
    except KeyError:
        raise KeyError(f"unknown model {model_id!r}; known: {sorted(ZOO)}") from None
