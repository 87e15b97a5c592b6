"""Exhaustive lever-grid sweeps over the simulator (for headroom studies and tuner baselines; simulated).

``sweep`` evaluates the cartesian product of a lever grid on top of base levers and returns every point sorted by
modelled tokens/s/device (invalid and OOM points last). ``one_lever_neighbours`` lists the single-lever changes of
a recipe, the moves a one-lever-per-step tuner can make.
"""

from __future__ import annotations

import itertools
from typing import Any

from pydantic import BaseModel

from bot.facts.legality import LEVER_DEFAULTS
from bot.sim.simulate import SimResult, simulate


class SweepPoint(BaseModel):
    """One grid point: the lever values that differ from the base, and the simulated result."""

    changes: dict[str, Any]
    result: SimResult


def sweep(
    model: str,
    hardware: str,
    nodes: int,
    devices_per_node: int,
    base_levers: dict[str, Any],
    pinned: dict[str, Any],
    grid: dict[str, list[Any]],
    seed: int = 0,
) -> list[SweepPoint]:
    """Simulate every combination of ``grid`` values over ``base_levers``; best modelled throughput first."""
    names = list(grid)
    points = []
    for values in itertools.product(*(grid[n] for n in names)):
        changes = dict(zip(names, values, strict=True))
        levers = {**base_levers, **changes}
        points.append(
            SweepPoint(changes=changes, result=simulate(model, hardware, nodes, devices_per_node, levers, pinned, seed))
        )
    return sorted(points, key=lambda p: -p.result.tokens_per_s_per_device)


def one_lever_neighbours(
    model: str,
    hardware: str,
    nodes: int,
    devices_per_node: int,
    levers: dict[str, Any],
    pinned: dict[str, Any],
    domains: dict[str, list[Any]],
    seed: int = 0,
) -> list[SweepPoint]:
    """Every recipe reachable by changing exactly one lever to another value of its domain; best first."""
    points = []
    for name, values in domains.items():
        for value in values:
            current = levers.get(name, LEVER_DEFAULTS.get(name, (None, None))[1])
            if current == value:
                continue
            changed = {**levers, name: value}
            points.append(
                SweepPoint(
                    changes={name: value},
                    result=simulate(model, hardware, nodes, devices_per_node, changed, pinned, seed),
                )
            )
    return sorted(points, key=lambda p: -p.result.tokens_per_s_per_device)
