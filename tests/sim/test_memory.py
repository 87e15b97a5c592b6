"""Per-rank peak memory terms against hand computation (docs/reference/performance-model.md §4.2)."""

import pytest

from bot.facts.legality import resolve_layout
from bot.sim.efficiency import DEFAULT_FACTORS as F
from bot.sim.hardware import get_hardware
from bot.sim.memory import GIB, activation_elems_per_token, peak_memory, rank_params, saved_elems_per_token
from bot.sim.simulate import simulate
from bot.sim.zoo import get_model

M8 = get_model("llama3.1-8b")
N8 = 8_030_261_248


def _lay(model, nodes, levers, pinned, hw="h100-sxm-80gb"):
    return resolve_layout(get_model(model), get_hardware(hw), nodes, 8, levers, pinned)[0]


def test_fsdp_model_states_by_hand():
    lay = _lay(
        "llama3.1-8b", 1, {"training.local_batch_size": 1, "activation_checkpoint": "full"}, {"training.seq_len": 2048}
    )
    mem = peak_memory(M8, lay, F)
    # fp32 master + 2 fp32 AdamW moments = 12 B/param, sharded over FSDP 8 (grads counted separately)
    assert mem.model_states == pytest.approx(12 * N8 / 8 / GIB)
    # grads: sharded fp32 (4 B/param / 8) + bf16 grads and fp32 reduce buffer of the two largest units
    rp = rank_params(M8, lay, lay.ranks[0])
    head, layer = 128256 * 4096, 4096 * 4096 * 2 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096
    assert rp.max_layer_unsharded == head and rp.layer_unsharded == layer
    assert mem.unsharded_grads == pytest.approx((4 * N8 / 8 + 6 * (head + layer)) / GIB)


def test_pipeline_holds_unsharded_stage_and_fp32_grads():
    lay = _lay(
        "llama3.1-405b",
        16,
        {
            "parallelism.tensor_parallel_degree": 8,
            "parallelism.pipeline_parallel_degree": 8,
            "training.disable_cuda_graphs": True,
            "training.local_batch_size": 32,
            "activation_checkpoint": "full",
        },
        {"training.global_batch_size": 256, "training.seq_len": 8192},
        hw="h200",
    )
    rp = rank_params(get_model("llama3.1-405b"), lay, lay.ranks[1])
    mem = peak_memory(get_model("llama3.1-405b"), lay, F)
    # reshard-after-forward is off under PP: bf16 copy of the stage (2 B) + fp32 grad accumulation (4 B)
    assert mem.unsharded_params == pytest.approx(2 * rp.dense_unsharded / GIB, rel=1e-6)
    assert mem.unsharded_grads == pytest.approx(4 * rp.dense_unsharded / GIB, rel=1e-6)


def test_activation_elements_by_hand():
    lay = _lay("llama3.1-8b", 1, {"training.local_batch_size": 1, "activation_checkpoint": "none"}, {})
    # norm inputs 2h + GEMM inputs 2h + q,k,v pre/post RoPE and attention out (3q + 4kv) + SwiGLU 4F
    h, q, kv, ffn = 4096, 4096, 1024, 14336
    assert activation_elems_per_token(M8, lay, moe=False) == 2 * h + 2 * h + 3 * q + 4 * kv + 4 * ffn == 90112
    # full AC keeps only the block input; TP 8 with SP shards it
    full = _lay("llama3.1-8b", 1, {"parallelism.tensor_parallel_degree": 8, "activation_checkpoint": "full"}, {})
    assert saved_elems_per_token(M8, full, False, F) == h / 8
    sel = _lay("llama3.1-8b", 1, {"activation_checkpoint": "selective"}, {})
    assert saved_elems_per_token(M8, sel, False, F) == pytest.approx(F.sac_memory * 90112)


def test_logits_by_hand():
    lay = _lay(
        "llama3.1-8b",
        1,
        {"training.local_batch_size": 2, "loss.num_chunks": 1, "activation_checkpoint": "full"},
        {"training.seq_len": 8192},
    )
    mem = peak_memory(M8, lay, F)
    # bf16 logits + fp32 log-softmax + fp32 grad = 10 B per logit, 2 x 8192 tokens x 128256 vocab, one chunk
    assert mem.logits == pytest.approx(10 * 2 * 8192 * 128256 / GIB)


def test_oom_when_peak_exceeds_capacity():
    res = simulate(
        "llama3.1-405b",
        "h100-sxm-80gb",
        1,
        8,
        {"parallelism.tensor_parallel_degree": 8},
        {"training.seq_len": 8192},
        seed=0,
    )
    assert res.outcome == "oom"
    assert res.peak_memory_gib > res.memory_capacity_gib == 79.6
    assert "exceeds" in res.reason and res.tokens_per_s_per_device == 0.0


def test_torchtitan_8b_benchmark_memory_close():
    # torchtitan Dec-2024 Table 1: FSDP8, lbs 2, SAC, eager -> 82.4 GiB on the 96 GB part
    res = simulate(
        "llama3.1-8b",
        "h100-96gb",
        1,
        8,
        {"training.local_batch_size": 2, "loss.num_chunks": 1, "training.disable_cuda_graphs": True},
        {"training.seq_len": 8192, "training.global_batch_size": 16},
        seed=0,
    )
    assert res.peak_memory_gib == pytest.approx(82.4, rel=0.05)
