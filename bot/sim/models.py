"""The model a workload trains, as the simulator, cost model, legality check and screens read it.

The source is the built torchtitan model (:mod:`bot.facts`). The zoo (:mod:`bot.sim.zoo`) answers only where
torchtitan 0.3.0 cannot build the workload here (a model only its experimental HF backend runs), or where the recipe's
``workload.model`` names a published model whose parameter count differs from what the config builds by more than 1 %
(a flavour torchtitan registers without a config function, tuned through a sibling config).
"""

from __future__ import annotations

import functools
from pathlib import Path

from bot.core.recipe import Workload
from bot.facts import FactsError, ModelSpec, model_facts
from bot.facts.flops import total_params
from bot.sim.zoo import ZOO

PARAMS_TOLERANCE = 0.01


class UnknownModel(KeyError):
    """Neither torchtitan nor the zoo knows the workload's model; ``str()`` is one line naming the field."""

    def __str__(self) -> str:
        return str(self.args[0])


def model_label(workload: Workload) -> str:
    """The id records and the leaderboard use: ``workload.model`` where the recipe names one, else the config."""
    return workload.model or workload.config


@functools.lru_cache(maxsize=512)
def _spec(module: str, config: str, overrides: tuple[str, ...], model: str, root: str) -> ModelSpec:
    label = model or config
    try:
        facts = model_facts(module, config, list(overrides), root=Path(root) if root else None, model_id=label)
    except FactsError as exc:
        if model in ZOO:
            return ZOO[model]
        known = f"; workload.model may name one the simulator knows: {', '.join(sorted(ZOO))}"
        raise UnknownModel(f"{exc}{known}") from None
    spec = facts.spec
    zoo = ZOO.get(model)
    if zoo is not None and abs(total_params(zoo) - spec.n_params) > PARAMS_TOLERANCE * spec.n_params:
        return zoo
    return spec


def model_for(workload: Workload, root: Path | str | None = None) -> ModelSpec:
    """The workload's model (see the module docstring); ``root``: the tuning repository (default: the working
    directory), where a model module of the user's own is imported from. Raises :class:`UnknownModel`."""
    base = str(Path(root).resolve()) if root else str(Path.cwd())
    return _spec(
        workload.module, workload.config, tuple(getattr(workload, "overrides", []) or []), workload.model or "", base
    )
