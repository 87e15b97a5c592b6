"""Policies: they propose the next one-lever change of a campaign (or stop).

The registry, the only importer of the concrete policies: ``heuristic`` (cited lessons, :mod:`.heuristic`),
``ranked`` (the same moves, opportunities ranked by one score), ``claude`` (:mod:`.claude`), and the baselines ``random``, ``tpe``, ``gp`` (:mod:`.samplers`), ``cmaes``
(:mod:`.cma`), ``greedy`` (:mod:`.greedy`) and ``costmodel`` (:mod:`.costmodel_tuner`). The protocol and the lever
space are :mod:`.policy`, the search space :mod:`.space`, the lessons :mod:`.lessons`. A policy reads the campaign
and its run records; it never runs anything.
"""

from __future__ import annotations

from typing import Any

from bot.agent.policy import LeverSpace, Policy

POLICIES = ("heuristic", "ranked", "claude", "random", "tpe", "gp", "cmaes", "greedy", "costmodel")

__all__ = ["POLICIES", "LeverSpace", "Policy", "get_policy"]


def get_policy(name: str, **options: Any) -> Policy:
    """The policy called ``name`` (``options``: e.g. a sampler's seed)."""
    if name in ("heuristic", "ranked"):
        from bot.agent.heuristic import HeuristicPolicy

        return HeuristicPolicy(ranked=name == "ranked")
    if name == "claude":
        from bot.agent.claude import ClaudePolicy

        return ClaudePolicy(**options)
    if name == "random":
        from bot.agent.samplers import RandomPolicy

        return RandomPolicy(**options)
    if name in ("tpe", "gp"):
        from bot.agent.samplers import OptunaPolicy

        return OptunaPolicy(sampler=name, **options)
    if name == "cmaes":
        from bot.agent.cma import CmaEsPolicy

        return CmaEsPolicy(**options)
    if name == "greedy":
        from bot.agent.greedy import GreedyPolicy

        return GreedyPolicy()
    if name == "costmodel":
        from bot.agent.costmodel_tuner import CostModelPolicy

        return CostModelPolicy()
    raise ValueError(f"unknown policy {name!r}; expected {', '.join(POLICIES)}")
