"""Layouts torchtitan would refuse come back ``invalid`` with a reason; legal ones resolve."""

import pytest

from bot.facts.legality import resolve_layout
from bot.sim.hardware import get_hardware
from bot.sim.simulate import simulate
from bot.sim.zoo import get_model

PIN = {"training.seq_len": 8192, "training.global_batch_size": 64}
PP = {"parallelism.pipeline_parallel_degree": 2, "training.disable_cuda_graphs": True}

INVALID = [
    # (model, nodes, levers, pinned, fragment of the reason)
    (
        "llama3.1-8b",
        1,
        {"parallelism.data_parallel_shard_degree": 4, "parallelism.tensor_parallel_degree": 4},
        PIN,
        "!= world size",
    ),
    ("llama3.1-8b", 1, {"parallelism.tensor_parallel_degree": 3}, PIN, "not divisible"),
    ("qwen3-30b-a3b", 1, {"parallelism.tensor_parallel_degree": 8}, PIN, "n_kv_heads (4)"),
    (
        "llama3.1-8b",
        1,
        {"parallelism.tensor_parallel_degree": 8},
        {**PIN, "training.seq_len": 8196},
        "divisible by tp=8",
    ),
    (
        "llama3.1-8b",
        1,
        {"parallelism.context_parallel_degree": 2, "parallelism.tensor_parallel_degree": 4},
        {**PIN, "training.seq_len": 8200},
        "2*cp*tp",
    ),
    ("llama3.1-8b", 1, {"parallelism.pipeline_parallel_degree": 2}, PIN, "disable_cuda_graphs"),
    (
        "llama3.1-8b",
        1,
        {"compile.enable_async_tensor_parallel": True, "parallelism.tensor_parallel_degree": 2},
        PIN,
        "requires compile.enable",
    ),
    ("llama3.1-8b", 1, {"activation_checkpoint": "memory_budget"}, PIN, "memory_budget requires compile"),
    (
        "llama3.1-8b",
        1,
        {"compile.enable": True, "compile.components": "loss", "activation_checkpoint": "memory_budget"},
        PIN,
        "'model' in compile.components",
    ),
    (
        "mixtral-8x22b",
        2,
        {"parallelism.expert_parallel_degree": 16, "training.disable_cuda_graphs": True},
        {**PIN, "training.seq_len": 4096},
        "does not divide the 8 experts",
    ),
    (
        "qwen3-30b-a3b",
        1,
        {"parallelism.expert_parallel_degree": 16, "training.disable_cuda_graphs": True},
        PIN,
        "must divide dp_shard*cp*tp = 8",
    ),
    ("llama3.1-8b", 1, {"parallelism.expert_parallel_degree": 2}, PIN, "has no experts"),
    ("qwen3-30b-a3b", 1, {"parallelism.expert_parallel_degree": 8}, PIN, "disable_cuda_graphs"),
    (
        "llama3.1-8b",
        1,
        {**PP, "training.local_batch_size": 6, "parallelism.pipeline_parallel_microbatch_size": 4},
        {**PIN, "training.global_batch_size": 24},
        "not divisible by pipeline_parallel_microbatch_size",
    ),
    ("llama3.1-8b", 1, {"training.local_batch_size": 3}, PIN, "global_batch_size 64 is not divisible"),
    (
        "llama3.1-8b",
        8,
        {"parallelism.pipeline_parallel_degree": 64, "training.disable_cuda_graphs": True},
        PIN,
        "exceeds the 32 layers",
    ),
    (
        "llama3.1-8b",
        1,
        {**PP, "parallelism.pipeline_parallel_schedule": "1F1B", "parallelism.pipeline_parallel_layers_per_stage": 9},
        PIN,
        "exactly 1 stage per rank",
    ),
    (
        "llama3.1-8b",
        1,
        {
            **PP,
            "parallelism.pipeline_parallel_schedule": "Interleaved1F1B",
            "parallelism.pipeline_parallel_layers_per_stage": 17,
        },
        PIN,
        ">= 2 stages per rank",
    ),
    (
        "llama3.1-8b",
        1,
        {**PP, "parallelism.pipeline_parallel_schedule": "ZBVZeroBubble", "compile.enable": True},
        PIN,
        "torch.compile",
    ),
    (
        "llama3.1-8b",
        1,
        {**PP, "parallelism.pipeline_parallel_schedule": "Interleaved1F1B", "training.local_batch_size": 5},
        {**PIN, "training.global_batch_size": 20},
        "multiple of the round count",
    ),
    ("llama3.1-8b", 1, {**PP, "parallelism.pipeline_parallel_schedule": "Zigzag"}, PIN, "unknown schedule"),
    ("llama3.1-8b", 1, {"parallelism.tensor_parallel_degree": "two"}, PIN, "expected an integer"),
    ("llama3.1-8b", 1, {"compile.enable": "yes"}, PIN, "expected true or false"),
    ("llama3.1-8b", 1, {"activation_checkpoint": "partial"}, PIN, "is not one of"),
    ("llama3.1-8b", 1, {"sim.turbo": True}, PIN, "unknown simulator setting"),
]


@pytest.mark.parametrize(("model", "nodes", "levers", "pinned", "reason"), INVALID)
def test_refused_layouts_are_invalid_with_reason(model, nodes, levers, pinned, reason):
    res = simulate(model, "h100-sxm-80gb", nodes, 8, levers, pinned, seed=0)
    assert res.outcome == "invalid"
    assert reason in res.reason
    assert res.tokens_per_s_per_device == 0.0 and res.step_time_s is None


def test_defaults_fill_leftover_fsdp_and_batch():
    lay, ignored = resolve_layout(
        get_model("llama3.1-8b"),
        get_hardware("h100-sxm-80gb"),
        2,
        8,
        {"metrics.log_freq": 10, "dataloader.num_workers": 2},
        {},
    )
    assert lay.dp_shard == 16 and lay.tp == lay.pp == lay.cp == 1
    assert lay.local_batch_size == 8 and lay.global_batch_size == 128 and lay.grad_accum == 1  # gbs -1 = lbs*dp
    assert lay.ac == "selective" and lay.cuda_graphs and not lay.compile  # torchtitan 0.3.0 defaults
    assert lay.seq_len == 2048
    assert ignored == ["dataloader.num_workers"]


def test_expert_fsdp_degree_and_reshard_default():
    lay, _ = resolve_layout(
        get_model("glm-4.5"),
        get_hardware("h100-sxm-80gb"),
        16,
        8,
        {
            "parallelism.tensor_parallel_degree": 2,
            "parallelism.pipeline_parallel_degree": 8,
            "parallelism.expert_parallel_degree": 16,
            "training.disable_cuda_graphs": True,
            "training.local_batch_size": 256,
        },
        {"training.global_batch_size": 2048, "training.seq_len": 4096},
    )
    assert lay.dp_shard == 8 and lay.efsdp == 1  # dp_shard*cp*tp = 16 = efsdp*ep
    assert not lay.reshard_after_forward  # default under PP = never
    assert lay.n_microbatches == 256 and lay.grad_accum == 1


def test_pipeline_split_follows_torchtitan_weights():
    # 126 layers + 1 (embedding) + 1 (head) = 128 units over 16 stages = 8 each; first/last give one up.
    lay, _ = resolve_layout(
        get_model("llama3.1-405b"),
        get_hardware("h200"),
        16,
        8,
        {
            "parallelism.tensor_parallel_degree": 8,
            "parallelism.pipeline_parallel_degree": 8,
            "parallelism.pipeline_parallel_schedule": "Interleaved1F1B",
            "training.disable_cuda_graphs": True,
            "training.local_batch_size": 32,
        },
        {"training.global_batch_size": 256, "training.seq_len": 8192},
    )
    assert lay.stages_per_rank == 2 and lay.n_stages == 16
    assert [r.layers for r in lay.ranks] == [7 + 8, 8 + 8, 8 + 8, 8 + 8, 8 + 8, 8 + 8, 8 + 8, 8 + 7]
    assert lay.ranks[0].has_embedding and lay.ranks[-1].has_head
