"""Config-function variants of :func:`bot.inrank.workloads.llama3_tiny.llama3_tiny_cpu` (gate benchmark only).

torchtitan 0.3.0 freezes its CLI: optimizer hyperparameters, parameter groups and the model
config can only be changed in a config function. These variants are the objective-changing
edits a careless refactor of such a function makes; the gate's fault-injection benchmark
(``bot/bench/gate_faults.py``) points a candidate recipe at one of them (``workload.config``) and the
config check must reject it from the resolved config alone. Use as
``--module bot.inrank.workloads.variants --config <name>``.
"""

from __future__ import annotations

from torchtitan.components.optimizer import default_adamw
from torchtitan.components.optimizer.optimizer import ParamGroupConfig
from torchtitan.trainer import Trainer

from bot.inrank.workloads.llama3_tiny import llama3_tiny_cpu

BASE_LR = 3e-3


def _with_adamw(**kwargs) -> Trainer.Config:
    config = llama3_tiny_cpu()
    config.optimizer = default_adamw(lr=kwargs.pop("lr", BASE_LR), **kwargs)
    return config


def lr_up_10pct() -> Trainer.Config:
    """Learning rate +10% (3e-3 -> 3.3e-3)."""
    return _with_adamw(lr=BASE_LR * 1.1)


def weight_decay_off() -> Trainer.Config:
    """AdamW weight decay 0.1 -> 0."""
    return _with_adamw(weight_decay=0.0)


def eps_1e6() -> Trainer.Config:
    """AdamW eps 1e-8 -> 1e-6."""
    return _with_adamw(eps=1e-6)


def beta2_0999() -> Trainer.Config:
    """AdamW betas (0.9, 0.95) -> (0.9, 0.999)."""
    return _with_adamw(betas=(0.9, 0.999))


def no_decay_on_norms() -> Trainer.Config:
    """A parameter group that exempts norms and embeddings from weight decay."""
    config = llama3_tiny_cpu()
    decay = dict(config.optimizer.param_groups[0].optimizer_kwargs)
    config.optimizer.param_groups = [
        ParamGroupConfig(
            pattern=r"(norm|tok_embeddings)", optimizer_name="AdamW", optimizer_kwargs={**decay, "weight_decay": 0.0}
        ),
        ParamGroupConfig(pattern=r".*", optimizer_name="AdamW", optimizer_kwargs=decay),
    ]
    return config


def sgd_optimizer() -> Trainer.Config:
    """AdamW replaced by SGD with the same learning rate."""
    config = llama3_tiny_cpu()
    config.optimizer.param_groups = [
        ParamGroupConfig(pattern=r".*", optimizer_name="SGD", optimizer_kwargs={"lr": BASE_LR})
    ]
    return config


def tied_embeddings() -> Trainer.Config:
    """Input embedding and output projection share one weight."""
    config = llama3_tiny_cpu()
    config.model_spec.model.enable_weight_tying = True
    return config


def three_layers() -> Trainer.Config:
    """One transformer block fewer (4 -> 3)."""
    config = llama3_tiny_cpu()
    config.model_spec.model.layers = config.model_spec.model.layers[:3]
    return config


def rope_theta_500k() -> Trainer.Config:
    """RoPE theta 1e4 -> 5e5 (a long-context setting copied into a short-context recipe)."""
    config = llama3_tiny_cpu()
    for layer in config.model_spec.model.layers:
        layer.attention.rope.theta = 500000
    return config


def clipping_off() -> Trainer.Config:
    """Gradient clipping effectively off (max_norm 1.0 -> 1e9)."""
    config = llama3_tiny_cpu()
    config.training.max_norm = 1e9
    return config


def bf16_training() -> Trainer.Config:
    """Parameters, gradients and optimizer state in bfloat16 (training.dtype)."""
    config = llama3_tiny_cpu()
    config.training.dtype = "bfloat16"
    return config


def spmd_types_backend() -> Trainer.Config:
    """torchtitan's default spmd_types backend (torch 2.13's FSDP2 cannot convert its params for dp > 1)."""
    config = llama3_tiny_cpu()
    config.parallelism.spmd_backend = "spmd_types"
    return config
