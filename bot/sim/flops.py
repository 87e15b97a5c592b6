"""Parameter counts and training FLOPs per token: re-exported from :mod:`bot.facts.flops`, where they live."""

from bot.facts.flops import (
    FlopsPerToken,
    ParamCounts,
    active_params,
    attention_flops_per_token_per_layer,
    flops_per_token,
    param_counts,
    total_params,
)

__all__ = [
    "FlopsPerToken",
    "ParamCounts",
    "active_params",
    "attention_flops_per_token_per_layer",
    "flops_per_token",
    "param_counts",
    "total_params",
]
