"""Runners: a recipe in, a run record out (:class:`~bot.runner.base.Runner`).

The launcher registry lives here, at the package's face, and is the only importer of the backends:
``local`` (torchrun on this machine, :mod:`.local`), ``slurm`` (sbatch + ``srun torchrun`` from a Slurm login node,
:mod:`.slurm`) and ``sim`` (the calibrated simulator, :mod:`.sim`). What every backend shares is in :mod:`.base`; the
torchrun command line in :mod:`.command`; torchtitan's resolved config in :mod:`.resolve`; the rank-0 log parser in
:mod:`.logparse`; the batch script in :mod:`.slurmscript`; what Slurm's commands print in :mod:`.slurmtext`; the
runs' torch.compile cache, never left half-written by a killed run, in :mod:`.compilecache`.
Whether a recipe can run on its launcher at all, before anything starts, is :func:`check_runnable` (:mod:`.check`).
"""

from __future__ import annotations

from bot.core.recipe import RecipeError
from bot.runner.base import EarlyStop, Runner
from bot.runner.check import check_runnable

LAUNCHERS = ("local", "slurm", "sim")

__all__ = ["LAUNCHERS", "EarlyStop", "Runner", "check_runnable", "get_runner"]


def get_runner(launcher: str, **options: object) -> Runner:
    """The backend for a recipe's ``cluster.launcher``."""
    if launcher == "local":
        from bot.runner.local import LocalRunner

        return LocalRunner(**options)  # type: ignore[arg-type]
    if launcher == "sim":
        from bot.runner.sim import SimRunner

        return SimRunner(**options)  # type: ignore[arg-type]
    if launcher == "slurm":
        from bot.runner.slurm import SlurmRunner

        return SlurmRunner(**options)  # type: ignore[arg-type]
    raise RecipeError(f"cluster.launcher: unknown launcher {launcher!r}; expected local, slurm or sim")
