"""bot/inrank/workloads/moe_tiny.py: the MoE CPU workload is torchtitan's own Qwen3-MoE code at tiny sizes."""

from __future__ import annotations

from pathlib import Path

from torchtitan.components.optimizer import register_moe_load_balancing_hook
from torchtitan.models.common.moe import MoE, TokenChoiceTopKRouter
from torchtitan.models.common.token_dispatcher import AllToAllTokenDispatcher, LocalTokenDispatcher
from torchtitan.models.qwen3 import parallelize_qwen3
from torchtitan.models.qwen3.model import Qwen3Model

from bot.core.recipe import load_recipe
from bot.inrank.workloads import moe_tiny
from bot.sim.flops import total_params
from bot.sim.zoo import get_model

REPO = Path(__file__).resolve().parents[2]


def test_the_model_is_torchtitans_qwen3_moe_with_eight_experts_top_two() -> None:
    spec = moe_tiny.moe_model_spec()
    assert spec.name == "qwen3" and spec.parallelize_fn is parallelize_qwen3
    assert spec.post_optimizer_build_fn is register_moe_load_balancing_hook  # aux-loss-free balancing is wired
    assert isinstance(spec.model, Qwen3Model.Config) and len(spec.model.layers) == 4
    for layer in spec.model.layers:
        moe = layer.moe
        assert isinstance(moe, MoE.Config) and isinstance(moe.router, TokenChoiceTopKRouter.Config)
        assert (moe.num_experts, moe.router.top_k, moe.router.score_func, moe.router.route_norm) == (
            8,
            2,
            "softmax",
            True,
        )
        assert moe.load_balance_coeff == 1e-3 and moe.shared_experts is None
        assert type(moe.routed_experts.token_dispatcher) is AllToAllTokenDispatcher.Config


def test_the_local_dispatch_config_swaps_only_the_dispatcher_class() -> None:
    base, local = moe_tiny.moe_tiny_cpu(), moe_tiny.moe_tiny_cpu_local_dispatch()
    for a, b in zip(base.model_spec.model.layers, local.model_spec.model.layers, strict=True):
        assert type(b.moe.routed_experts.token_dispatcher) is LocalTokenDispatcher.Config
        for cfg in (lambda layer: layer.moe.router, lambda layer: layer.moe.routed_experts.inner_experts):
            # param_init partials compare by identity: compare everything else
            fields = [f for f in cfg(a).__dataclass_fields__ if f not in ("param_init", "gate")]
            assert [getattr(cfg(a), f) for f in fields] == [getattr(cfg(b), f) for f in fields]
        assert a.moe.load_balance_coeff == b.moe.load_balance_coeff


def test_the_zoo_entry_matches_the_workload() -> None:
    m = get_model("moe-tiny")
    w = moe_tiny
    assert (m.n_layers, m.hidden, m.n_heads, m.n_kv_heads, m.head_dim) == (
        w.N_LAYERS,
        w.DIM,
        w.N_HEADS,
        w.N_KV_HEADS,
        w.HEAD_DIM,
    )
    assert (m.n_experts, m.top_k, m.ffn_expert, m.vocab) == (
        w.NUM_EXPERTS,
        w.TOP_K,
        w.MOE_HIDDEN,
        moe_tiny.CharTokenizerCore().vocab_size,
    )
    model = moe_tiny.moe_model_spec().model.build()
    built = sum(p.numel() for p in model.parameters())
    qk_norms = 2 * w.HEAD_DIM * w.N_LAYERS  # the zoo's FLOP model has no QK-norm weights
    assert total_params(m) + qk_norms == built


def test_both_recipes_resolve_with_torchtitan_and_keep_the_objective() -> None:
    from bot.runner.resolve import resolve_recipe

    one, two = (load_recipe(REPO / "recipes" / "moe-tiny" / name) for name in ("cpu.yaml", "cpu-2rank.yaml"))
    assert one.pinned == two.pinned and one.workload == two.workload and (one.devices, two.devices) == (1, 2)
    flat = resolve_recipe(one)
    assert flat["model_spec.model.layers.0.moe.num_experts"] == 8
    assert flat["activation_checkpoint.mode"] == "full" and flat["training.local_batch_size"] == 2
    assert flat["training.disable_cuda_graphs"] is True and flat["parallelism.expert_parallel_degree"] == 1
