"""Runners: a recipe in, a run record out (:class:`~bot.runner.base.Runner`).

The launcher registry lives here, at the package's face, and is the only importer of the backends:
``local`` (torchrun on this machine, :mod:`.local`) and ``sim`` (the calibrated simulator, :mod:`.sim`). What every
backend shares is in :mod:`.base`; the torchrun command line in :mod:`.command`; torchtitan's resolved config in
:mod:`.resolve`; the rank-0 log parser in :mod:`.logparse`.
"""

from __future__ import annotations

from bot.core.recipe import RecipeError
from bot.runner.base import EarlyStop, Runner

LAUNCHERS = ("local", "sim")

__all__ = ["LAUNCHERS", "EarlyStop", "Runner", "get_runner"]


def get_runner(launcher: str, **options: object) -> Runner:
    """The backend for a recipe's ``cluster.launcher``."""
    if launcher == "local":
        from bot.runner.local import LocalRunner

        return LocalRunner(**options)  # type: ignore[arg-type]
    if launcher == "sim":
        from bot.runner.sim import SimRunner

        return SimRunner(**options)  # type: ignore[arg-type]
    if launcher == "slurm":
        # no Slurm backend ships yet: one cannot be tested here against a real Slurm, and a fake would not do
        raise RecipeError("cluster.launcher: slurm is not supported yet; expected local (torchrun on this machine) or sim (the simulator)")
    raise RecipeError(f"cluster.launcher: unknown launcher {launcher!r}; expected local or sim")
