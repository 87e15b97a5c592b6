"""Attention's hardware multiplier (``steptime.attn_hw_eff``): B200 attention does not take the GEMM-fitted gain."""

import pytest

from bot.facts.legality import resolve_layout
from bot.sim.efficiency import DEFAULT_FACTORS
from bot.sim.hardware import get_hardware
from bot.sim.steptime import attn_hw_eff, microbatch_time
from bot.sim.zoo import get_model


def test_attention_multiplier_per_hardware():
    assert attn_hw_eff(get_hardware("b200"), DEFAULT_FACTORS) == 1.0  # bf16 peak ratio only, no GEMM gain
    assert DEFAULT_FACTORS.hw_eff["b200"] > 1.0  # while GEMMs keep theirs
    # Elsewhere attention follows hw_eff: the 500 W H100 96GB's power-capped clock slows every kernel.
    assert attn_hw_eff(get_hardware("h100-96gb"), DEFAULT_FACTORS) == DEFAULT_FACTORS.hw_eff["h100-96gb"]
    assert attn_hw_eff(get_hardware("h100-sxm-80gb"), DEFAULT_FACTORS) == 1.0


def test_b200_attention_time_by_hand():
    # Llama 3.1 8B, FSDP8 on one B200 node, seq 8192, microbatch 1, no AC, torchtitan stack (attn_eff 0.246).
    m, hw = get_model("llama3.1-8b"), get_hardware("b200")
    levers = {
        "parallelism.data_parallel_shard_degree": 8,
        "training.local_batch_size": 1,
        "activation_checkpoint": "none",
    }
    lay, _ = resolve_layout(m, hw, 1, 8, levers, {"training.seq_len": 8192, "training.global_batch_size": 8})
    with_gain = DEFAULT_FACTORS.model_copy(update={"attn_hw_eff": {}})  # old behaviour: attention x hw_eff.b200
    new, old = microbatch_time(m, hw, lay, DEFAULT_FACTORS, 0), microbatch_time(m, hw, lay, with_gain, 0)
    # Causal attention: 0.5 * 8192 tokens * 32 layers * (12 * 32 heads * 128 * 8192) FLOPs at 2,250 TF/s x 0.246.
    t_attn = 0.5 * 8192 * 32 * (12 * 32 * 128 * 8192) / (2250e12 * 0.246)  # 95.4 ms at multiplier 1.0
    assert t_attn == pytest.approx(0.09535, rel=1e-3)
    gain = DEFAULT_FACTORS.hw_eff["b200"]
    assert new.compute - old.compute == pytest.approx(t_attn * (1.0 - 1.0 / gain), rel=1e-9)
