"""Whether a valid recipe can run on its launcher, decided before anything starts (no run, no file, no branch).

A recipe can pass validation and still not run: ``launcher: sim`` needs hardware and a model the simulator's zoo
knows (:data:`bot.sim.hardware.HARDWARE`, :data:`bot.sim.zoo.ZOO`), and ``launcher: local`` runs one node. Each
problem is one line pointing at the field's own line in the recipe file
(:func:`bot.core.recipe.field_error`), raised as a :class:`~bot.core.recipe.RecipeError` (the CLI's exit 2).
What only a run can tell (a layout torchtitan refuses, a device that is missing) is left to the run.
"""

from __future__ import annotations

from pathlib import Path

from bot.core.recipe import Recipe, RecipeError, field_error

Problem = tuple[tuple[str, ...], str]  # (the field's path in the recipe, what is wrong with it)


def _sim_problem(recipe: Recipe) -> Problem | None:
    from bot.sim.hardware import HARDWARE
    from bot.sim.zoo import ZOO

    if recipe.cluster.hardware not in HARDWARE:
        return ("cluster", "hardware"), f"{recipe.cluster.hardware!r} is unknown to the simulator; known: {', '.join(sorted(HARDWARE))}"
    model = recipe.workload.model
    if not model:
        return ("workload", "model"), f"required by the simulator (launcher: sim); known: {', '.join(sorted(ZOO))}"
    if model not in ZOO:
        return ("workload", "model"), f"{model!r} is unknown to the simulator; known: {', '.join(sorted(ZOO))}"
    return None


def _local_problem(recipe: Recipe) -> Problem | None:
    if recipe.cluster.nodes != 1:
        return ("cluster", "nodes"), f"the local launcher runs one node; got {recipe.cluster.nodes} (use launcher: slurm for more)"
    return None


def runnable_problem(recipe: Recipe) -> Problem | None:
    """What keeps ``recipe`` from running on its launcher, found without running it (None: nothing found).
    ``slurm``: nothing is checked here (the cluster answers; ``attune doctor`` asks it)."""
    if recipe.cluster.launcher == "sim":
        return _sim_problem(recipe)
    if recipe.cluster.launcher == "local":
        return _local_problem(recipe)
    return None


def check_runnable(recipe: Recipe, path: str | Path) -> None:
    """Raise :class:`~bot.core.recipe.RecipeError` (``file:line: field: problem``) when ``recipe``, read from
    ``path``, cannot run on its launcher; see the module docstring."""
    problem = runnable_problem(recipe)
    if problem is not None:
        raise RecipeError(field_error(path, *problem))
