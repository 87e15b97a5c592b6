"""The Megatron-Bridge 25.11 dropless host-synced dispatch floor (``sim.moe_dispatch``), checked by hand."""

import pytest

from bot.facts.legality import LayoutError, resolve_layout
from bot.sim.efficiency import DEFAULT_FACTORS
from bot.sim.hardware import get_hardware
from bot.sim.steptime import dropless_dispatch_floor, microbatch_time, step_time
from bot.sim.zoo import get_model

# mb-qwen3-30b-b200: 8 B200, EP8, one 4K-token sequence per microbatch, no PP / TP / CP.
Q30_LEVERS = {
    "parallelism.data_parallel_shard_degree": 8,
    "parallelism.expert_parallel_degree": 8,
    "training.local_batch_size": 1,
    "activation_checkpoint": "none",
    "compile.enable": True,
    "quantize.linear": "float8_tensorwise",
    "quantize.grouped_mm": "float8",
    "training.disable_cuda_graphs": True,
    "sim.stack": "megatron",
}
Q30_PINNED = {"training.seq_len": 4096, "training.global_batch_size": 512}


def _q30(**extra):
    m, hw = get_model("qwen3-30b-a3b"), get_hardware("b200")
    lay, _ = resolve_layout(m, hw, 1, 8, {**Q30_LEVERS, **extra}, Q30_PINNED)
    return m, hw, lay


def test_floor_by_hand():
    m, _, lay = _q30(**{"sim.moe_dispatch": "dropless-hostsync"})
    # 4,096 tokens on the rank x top-8 routed copies x 210 ns = 6.881 ms per MoE layer (fwd+bwd).
    assert m.top_k == 8
    assert dropless_dispatch_floor(m, lay, DEFAULT_FACTORS, 4096) == pytest.approx(4096 * 8 * 2.10e-7)
    assert dropless_dispatch_floor(m, lay, DEFAULT_FACTORS, 4096) == pytest.approx(6.881e-3, rel=1e-3)


def test_floor_off_by_default_and_without_ep():
    m, _, lay = _q30()
    assert lay.moe_dispatch == "default"
    assert dropless_dispatch_floor(m, lay, DEFAULT_FACTORS, 4096) == 0.0
    m, _, lay = _q30(**{"sim.moe_dispatch": "dropless-hostsync", "parallelism.expert_parallel_degree": 1})
    assert dropless_dispatch_floor(m, lay, DEFAULT_FACTORS, 4096) == 0.0


def test_floor_replaces_a_faster_all_to_all():
    m, hw, plain = _q30()
    _, _, dropless = _q30(**{"sim.moe_dispatch": "dropless-hostsync"})
    base = microbatch_time(m, hw, plain, DEFAULT_FACTORS, 0)
    slow = microbatch_time(m, hw, dropless, DEFAULT_FACTORS, 0)
    assert plain.ranks[0].moe_layers == 48
    assert base.ep < 48 * 6.914e-3  # intra-node EP8 all-to-all is well under the floor
    assert slow.ep == pytest.approx(48 * 4096 * 8 * 2.10e-7)
    assert slow.compute == base.compute
    # 64 microsteps per step (GBS 512 over 8 ranks, one sequence each) pay the difference once each, plus the
    # 0.3 % structured-logging housekeeping charged on busy time.
    gap = step_time(m, hw, dropless, DEFAULT_FACTORS).step_time_s - step_time(m, hw, plain, DEFAULT_FACTORS).step_time_s
    assert gap == pytest.approx(64 * (slow.ep - base.ep) * 1.003, rel=1e-9)


def test_floor_hidden_behind_a_slower_all_to_all():
    # EP32 across four nodes (mb-qwen3-235b-fp8's shape): the modelled all-to-all already exceeds the floor.
    m, hw = get_model("qwen3-235b-a22b"), get_hardware("h100-sxm-80gb")
    levers = {
        "parallelism.data_parallel_shard_degree": 16,
        "parallelism.tensor_parallel_degree": 2,
        "parallelism.pipeline_parallel_degree": 8,
        "parallelism.expert_parallel_degree": 32,
        "parallelism.pipeline_parallel_schedule": "Interleaved1F1B",
        "parallelism.pipeline_parallel_microbatch_size": 1,
        "sim.virtual_stages": 4,
        "training.local_batch_size": 128,
        "activation_checkpoint": "none",
        "compile.enable": True,
        "training.disable_cuda_graphs": True,
        "sim.stack": "megatron",
    }
    pinned = {"training.seq_len": 4096, "training.global_batch_size": 2048}
    plain, _ = resolve_layout(m, hw, 32, 8, levers, pinned)
    dropless, _ = resolve_layout(m, hw, 32, 8, {**levers, "sim.moe_dispatch": "dropless-hostsync"}, pinned)
    assert (
        step_time(m, hw, dropless, DEFAULT_FACTORS).step_time_s == step_time(m, hw, plain, DEFAULT_FACTORS).step_time_s
    )


def test_unknown_dispatch_value_is_refused():
    with pytest.raises(LayoutError, match="sim.moe_dispatch"):
        _q30(**{"sim.moe_dispatch": "fast"})
