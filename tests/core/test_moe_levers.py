"""MoE levers (bot/core/levers.py, bot/agent/space.py): legality as torchtitan 0.3.0 has it, the CUDA-only
features it names, and the layout checker (bot.facts.legality) agreeing for the moe-tiny model."""

from __future__ import annotations

import importlib.util
import inspect
from pathlib import Path

import pytest

from bot.agent.space import lever_values, make_space
from bot.core import levers as catalog
from bot.core.recipe import load_recipe
from bot.facts.legality import LayoutError, resolve_layout
from bot.sim.hardware import get_hardware
from bot.sim.zoo import get_model

REPO = Path(__file__).resolve().parents[2]
MOE = get_model("moe-tiny")
PINNED = {"training.global_batch_size": 8, "training.seq_len": 256}


def facts(devices: int) -> catalog.ModelFacts:
    return catalog.ModelFacts(
        n_heads=MOE.n_heads,
        n_kv_heads=MOE.n_kv_heads,
        n_layers=MOE.n_layers,
        num_experts=MOE.n_experts,
        devices=devices,
    )


OFF = {"training.disable_cuda_graphs": True}


def test_ep_two_needs_two_ranks_and_a_divisor_of_the_experts() -> None:
    assert catalog.prerequisite_problems({**OFF, "parallelism.expert_parallel_degree": 2}, facts(2)) == []
    one_rank = catalog.prerequisite_problems({**OFF, "parallelism.expert_parallel_degree": 2}, facts(1))
    assert one_rank == ["parallelism.expert_parallel_degree 2 must divide dp_shard*cp*tp = 1"]
    three = catalog.prerequisite_problems({**OFF, "parallelism.expert_parallel_degree": 3}, facts(3))
    assert three == ["parallelism.expert_parallel_degree 3 must divide num_experts 8"]


def test_on_a_gpu_ep_needs_cuda_graphs_off_and_on_the_cpu_there_are_none() -> None:
    problems = catalog.prerequisite_problems({"parallelism.expert_parallel_degree": 2}, facts(2), "h200")
    assert any(p.startswith("parallelism.expert_parallel_degree > 1 with the standard dispatcher") for p in problems)
    assert catalog.prerequisite_problems({"parallelism.expert_parallel_degree": 2}, facts(2), "cpu") == []


def test_the_cpu_space_never_turns_cuda_graphs_on_and_knows_the_experts() -> None:
    recipe = load_recipe(REPO / "recipes" / "moe-tiny" / "cpu-2rank.yaml")
    assert lever_values(recipe, "training.disable_cuda_graphs") == [True]
    space = make_space(recipe)
    assert space.model == facts(2)
    assert space.values["parallelism.expert_parallel_degree"] == [1, 2]
    assert space.values["training.local_batch_size"] == [1, 2, 4, 8]


@pytest.mark.parametrize("ep", [1, 2, 4])
@pytest.mark.parametrize("devices", [1, 2])
def test_the_simulator_agrees_with_the_catalog_on_ep_legality_on_the_cpu(ep: int, devices: int) -> None:
    levers = {**OFF, "parallelism.expert_parallel_degree": ep, "training.local_batch_size": 1}
    legal = not catalog.prerequisite_problems(levers, facts(devices), "cpu")
    try:
        resolve_layout(MOE, get_hardware("cpu"), 1, devices, levers, PINNED)
        sim_legal = True
    except LayoutError:
        sim_legal = False
    assert legal == sim_legal == (ep <= devices)


def test_the_moe_features_named_cuda_only_are_cuda_only_here() -> None:
    from torchtitan.distributed.minimal_async_ep import api

    assert set(catalog.MOE_CUDA_ONLY) >= {
        "moe_comm_backend=deepep",
        "moe_comm_backend=hybridep",
        "moe_comm_backend=minimal_async_ep",
    }
    assert all(src.startswith("https://github.com/pytorch/torchtitan/") for src in catalog.MOE_CUDA_ONLY.values())
    assert 'device_types="cuda"' in inspect.getsource(api)  # MinimalAsyncEP registers CUDA kernels only
    from torchtitan.overrides import fused_swiglu

    assert 'device_types="cuda"' in inspect.getsource(fused_swiglu)  # fused_grouped_experts: a Triton kernel for CUDA
    assert importlib.util.find_spec("deep_ep") is None  # DeepEP / HybridEP need the DeepEP CUDA library
