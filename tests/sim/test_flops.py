"""FLOPs per token in torchtitan's convention, against hand computation."""

import pytest

from bot.sim.flops import flops_per_token
from bot.sim.zoo import get_model


def test_llama_8b_flops_per_token_at_8k_by_hand():
    # 6 * (N - input embedding) + 12 * L * n_heads * head_dim * seq
    n = 8_030_261_248  # total parameters (see test_zoo)
    embedding = 128256 * 4096
    expected = 6 * (n - embedding) + 12 * 32 * 32 * 128 * 8192
    f = flops_per_token(get_model("llama3.1-8b"), 8192)
    assert f.total == pytest.approx(expected, rel=1e-9)
    assert f.total / 1e9 == pytest.approx(57.9, abs=0.1)  # docs/reference/performance-model.md §2.3


def test_attention_is_about_a_third_for_glm45_and_minimax_at_8k():
    # Q projections are 2x hidden (12288 vs 5120; 6144 vs 3072), so the seq-dependent term is big.
    glm = flops_per_token(get_model("glm-4.5"), 8192)
    # by hand: 12 * 92 layers * 96 heads * 128 * 8192
    assert glm.attention == pytest.approx(12 * 92 * 96 * 128 * 8192)
    assert 0.30 < glm.attention_share < 0.40
    assert flops_per_token(get_model("minimax-m2"), 8192).attention_share == pytest.approx(0.37, abs=0.02)
    assert flops_per_token(get_model("llama3.1-405b"), 8192).attention_share == pytest.approx(0.08, abs=0.01)


def test_moe_counts_only_routed_experts():
    mix = flops_per_token(get_model("mixtral-8x22b"), 4096)
    # 56 layers x top-2 of 8 experts x 3 x 6144 x 16384, forward + backward (x6)
    assert mix.expert == pytest.approx(6 * 56 * 2 * 3 * 6144 * 16384)
    assert mix.total / 1e9 == pytest.approx(251, rel=0.01)


def test_mla_attention_term():
    # DeepSeek-V3: 6 * L * heads * (qk_nope + qk_rope + v) * seq
    f = flops_per_token(get_model("deepseek-v3"), 4096)
    assert f.attention == pytest.approx(6 * 61 * 128 * (128 + 64 + 128) * 4096)
