"""A new campaign: its id and its first state (how it measures: :mod:`.measurement_settings`; what its set-up
costs: :mod:`.setupcost`)."""

from __future__ import annotations

import time
from typing import Any

from bot.core.recipe import Recipe
from bot.core.state import Campaign


def new_campaign_id(recipe: Recipe) -> str:
    return f"{recipe.name.replace('/', '-')}-{time.strftime('%Y%m%d-%H%M%S')}"


def new_state(
    recipe: Recipe, recipe_rel: str, *, budget: float, policy: str, campaign_id: str | None = None, **kw: Any
) -> Campaign:
    """A campaign's first state. A simulated recipe's calibration makes no runs (its band is modelled): planned 0."""
    if recipe.cluster.launcher == "sim":
        kw.setdefault("calibration_runs_planned", 0)
    return Campaign(
        id=campaign_id or new_campaign_id(recipe),
        recipe_path=recipe_rel,
        recipe_id=recipe.name,
        policy=policy,
        devices=recipe.devices,
        usd_per_device_hour=recipe.cluster.usd_per_device_hour,
        budget=budget,
        baseline_levers=dict(recipe.levers),
        incumbent_levers=dict(recipe.levers),
        **kw,
    )
