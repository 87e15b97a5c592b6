"""Config-function variants of :func:`bot.inrank.workloads.moe_tiny.moe_tiny_cpu` (gate tests and benchmark only).

torchtitan 0.3.0 reaches its MoE settings only through a config function (the CLI is frozen), so these are
the edits a careless MoE config refactor makes; each must be rejected by the config check from the resolved
config alone, by its own named rule (``gate/rules/objective.yaml``, ids ``moe-*``). The legitimate dispatcher
change lives in the workload module itself (``moe_tiny_cpu_local_dispatch``). Use as
``--module bot.inrank.workloads.moe_variants --config <name>``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torchtitan.models.common.token_dispatcher import HybridEPTokenDispatcher
from torchtitan.trainer import Trainer

from bot.inrank.workloads.moe_tiny import NUM_EXPERTS, TOP_K, moe_model_spec, moe_tiny_cpu


def _each_moe(change: Callable[[Any], None]) -> Trainer.Config:
    config = moe_tiny_cpu()
    for layer in config.model_spec.model.layers:
        change(layer.moe)
    return config


def _respec(**kwargs) -> Trainer.Config:
    config = moe_tiny_cpu()
    config.model_spec = moe_model_spec(**kwargs)
    return config


def experts_4() -> Trainer.Config:
    """Routed experts 8 -> 4 (rule moe-num-experts)."""
    return _respec(num_experts=4)


def top_k_1() -> Trainer.Config:
    """Experts per token 2 -> 1 (rule moe-top-k)."""
    return _respec(top_k=1)


def sigmoid_router() -> Trainer.Config:
    """Router scores softmax -> sigmoid (rule moe-router-score-func)."""
    return _each_moe(lambda moe: setattr(moe.router, "score_func", "sigmoid"))


def no_route_norm() -> Trainer.Config:
    """Top-k gating weights no longer renormalised (rule moe-router-score-scaling)."""
    return _each_moe(lambda moe: setattr(moe.router, "route_norm", False))


def bias_rate_10x() -> Trainer.Config:
    """Aux-loss-free expert-bias update rate 1e-3 -> 1e-2 (rule moe-router-bias-update-rate)."""
    return _each_moe(lambda moe: setattr(moe, "load_balance_coeff", 1e-2))


def load_balance_off() -> Trainer.Config:
    """Load balancing off: ``load_balance_coeff`` None (rule moe-router-bias-update-rate)."""
    return _each_moe(lambda moe: setattr(moe, "load_balance_coeff", None))


def capacity_half() -> Trainer.Config:
    """HybridEP dispatcher with a non-blocking capacity factor 0.5: drops tokens (rule moe-capacity-factor)."""

    def change(moe) -> None:
        moe.routed_experts.token_dispatcher = HybridEPTokenDispatcher.Config(
            num_experts=NUM_EXPERTS, top_k=TOP_K, non_blocking_capacity_factor=0.5
        )

    return _each_moe(change)


def forced_balance() -> Trainer.Config:
    """Round-robin routing instead of learned routing (torchtitan#1670; rule moe-forced-balanced-routing)."""
    return _each_moe(lambda moe: setattr(moe.router, "_debug_force_load_balance", True))
