"""Adapter from a recipe (parsed YAML mapping or a ``bot.core.recipe.Recipe``) to ``simulate`` (results are simulated).

Reads ``workload.model`` (zoo id), ``cluster.hardware / nodes / devices_per_node``, ``levers`` and ``pinned``;
nothing else of the recipe matters to the simulator.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from bot.sim.simulate import SimResult, simulate


def _as_mapping(recipe: Any) -> Mapping[str, Any]:
    if isinstance(recipe, Mapping):
        return recipe
    if hasattr(recipe, "model_dump"):
        return recipe.model_dump()
    raise TypeError(f"expected a recipe mapping or pydantic Recipe, got {type(recipe).__name__}")


def simulate_recipe(recipe: Any, seed: int = 0, levers: Mapping[str, Any] | None = None) -> SimResult:
    """Simulate one bench run of ``recipe`` (optionally with ``levers`` overriding the recipe's levers)."""
    r = _as_mapping(recipe)
    workload, cluster = r["workload"], r["cluster"]
    model = workload.get("model")
    if not model:
        raise ValueError("recipe workload.model must name a simulator zoo model")
    merged = {**(r.get("levers") or {}), **(levers or {})}
    return simulate(
        model,
        cluster["hardware"],
        int(cluster["nodes"]),
        int(cluster["devices_per_node"]),
        merged,
        dict(r.get("pinned") or {}),
        seed,
    )


def load_recipe_yaml(path: str | Path) -> dict[str, Any]:
    """Plain YAML load of a recipe file (no validation; ``bot.core.recipe.load_recipe`` validates)."""
    return yaml.safe_load(Path(path).read_text())
