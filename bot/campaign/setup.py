"""How a campaign is set up: its id, its first state, and how it measures on each kind of machine."""

from __future__ import annotations

import time
from typing import Any

from bot.core.recipe import Recipe
from bot.core.state import Campaign


def new_campaign_id(recipe: Recipe) -> str:
    return f"{recipe.name.replace('/', '-')}-{time.strftime('%Y%m%d-%H%M%S')}"


DECISIVE_K = 3.0  # a gain above 3x the noise band (6x the baseline runs' spread, or 3x its floor) is not run-to-run noise


def measurement_options(launcher: str) -> dict[str, Any]:
    """How a campaign measures on this kind of machine (``Campaign`` fields).

    ``sim``: the simulated cluster does not drift between runs, so a decisive gain merges without a re-measure
    and a trial that measures clearly slower than the incumbent stops early. ``local`` (this machine): its speed
    drifts with other processes and clocks, so one warm-up run precedes the measured baseline, every gain is
    re-measured (as an A/B pair: ``bot.drive.local.build_executor``) and every trial runs to its end.
    """
    if launcher == "sim":
        return {"decisive_k": DECISIVE_K, "early_stop": True}
    if launcher == "local":
        return {"baseline_warmup_runs": 1}
    return {}


def github_measurement_options() -> dict[str, Any]:
    """How a campaign measures on self-hosted GitHub runners: a trial below the incumbent by twice the noise band
    stops early (twice, because a runner from the label pool may be slower than the one that measured the
    incumbent); every gain is still re-measured before it is merged."""
    return {"early_stop": True, "early_stop_k": 2.0}


def new_state(recipe: Recipe, recipe_rel: str, *, budget: float, policy: str, campaign_id: str | None = None, **kw: Any) -> Campaign:
    return Campaign(
        id=campaign_id or new_campaign_id(recipe), recipe_path=recipe_rel, recipe_id=recipe.name, policy=policy,
        devices=recipe.devices, usd_per_device_hour=recipe.cluster.usd_per_device_hour, budget=budget,
        baseline_levers=dict(recipe.levers), incumbent_levers=dict(recipe.levers), **kw,
    )
