"""Whether a valid recipe can run on its launcher, decided before anything starts (no run, no file, no branch).

A recipe can pass validation and still not run: ``launcher: sim`` needs hardware the simulator knows
(:data:`bot.sim.hardware.HARDWARE`) and a model torchtitan builds here or the zoo holds (:func:`bot.sim.models.model_for`), and ``launcher: local`` runs one node. Nor
can a layout torchtitan refuses (TP 16 on 8 devices, a global batch the data-parallel degree does not divide): a
simulated recipe is resolved by ATTUNE's own model of torchtitan's checks (:func:`bot.facts.legality.resolve_layout`),
a local or Slurm one by torchtitan's own ConfigManager, in-process on the CPU, as its runner does before a launch
(:func:`bot.runner.resolve.resolve_recipe`). A campaign whose baseline cannot start would otherwise spend its
first step finding that out, then finish with nothing to compare against.

Each problem is one line pointing at the field's own line in the recipe file (the first lever or pin the reason
names; :func:`bot.core.recipe.field_error`), raised as a :class:`~bot.core.recipe.RecipeError` (the CLI's exit 2).
What only a run can tell (memory, a device that is missing, hardware a Slurm node reports) is left to the run.
"""

from __future__ import annotations

import re
from pathlib import Path

from bot.core.recipe import Recipe, RecipeError, field_error

Problem = tuple[tuple[str, ...], str]  # (the field's path in the recipe, what is wrong with it)


def _sim_problem(recipe: Recipe) -> Problem | None:
    from bot.sim.hardware import HARDWARE
    from bot.sim.models import UnknownModel, model_for

    if recipe.cluster.hardware not in HARDWARE:
        return (
            "cluster",
            "hardware",
        ), f"{recipe.cluster.hardware!r} is unknown to the simulator; known: {', '.join(sorted(HARDWARE))}"
    try:
        model_for(recipe.workload)
    except UnknownModel as exc:
        field = "module" if str(exc).startswith("workload.module") else "config"
        return ("workload", field), f"the simulator cannot know this model: {exc}"
    return None


def _local_problem(recipe: Recipe) -> Problem | None:
    if recipe.cluster.nodes != 1:
        return (
            "cluster",
            "nodes",
        ), f"the local launcher runs one node; got {recipe.cluster.nodes} (use launcher: slurm for more)"
    return None


_DEGREES = (
    "parallelism.tensor_parallel_degree",
    "parallelism.pipeline_parallel_degree",
    "parallelism.context_parallel_degree",
    "parallelism.data_parallel_replicate_degree",
    "parallelism.data_parallel_shard_degree",
    "parallelism.expert_parallel_degree",
)


def _field_named(recipe: Recipe, reason: str) -> tuple[str, ...]:
    """The recipe field a layout refusal is about: the first lever or pin whose name (or last part, as the
    simulator words some reasons) the reason mentions; for a product of degrees that misses the world size, the
    first degree the recipe sets above 1; else the cluster's device count."""
    fields = [("levers", k) for k in recipe.levers] + [("pinned", k) for k in recipe.pinned]
    for section, key in fields:
        if key in reason:
            return section, key
    for section, key in fields:
        if re.search(rf"(?<![\w.]){re.escape(key.rsplit('.', 1)[-1])}(?!\w)", reason):
            return section, key
    if "degree" in reason or "world size" in reason or "devices" in reason:
        for name in _DEGREES:
            value = recipe.levers.get(name, recipe.pinned.get(name))
            if isinstance(value, int) and not isinstance(value, bool) and value > 1:
                return ("levers" if name in recipe.levers else "pinned"), name
    return "cluster", "devices_per_node"


def _sim_layout_problem(recipe: Recipe) -> Problem | None:
    from bot.facts.legality import LayoutError, resolve_layout
    from bot.sim.hardware import get_hardware
    from bot.sim.models import model_for

    c = recipe.cluster
    try:
        resolve_layout(
            model_for(recipe.workload),
            get_hardware(c.hardware),
            c.nodes,
            c.devices_per_node,
            dict(recipe.levers),
            dict(recipe.pinned),
        )
    except LayoutError as exc:
        return _field_named(recipe, str(exc)), f"the layout cannot run: {exc}"
    return None


def _titan_layout_problem(recipe: Recipe, path: str | Path | None = None) -> Problem | None:
    """torchtitan's refusal, resolved as the ranks would start: from the recipe's repository root (:mod:`.workdir`).
    A module or config function torchtitan cannot find is the workload's field, not the layout's."""
    try:
        from bot.runner.resolve import ResolveError, resolve_recipe
        from bot.runner.workdir import recipe_root

        resolve_recipe(recipe, workdir=recipe_root(path))
    except ImportError:
        return None  # no torchtitan here: the runner, where it runs, answers
    except ResolveError as exc:
        if exc.field is not None:
            return exc.field, str(exc)
        return _field_named(recipe, str(exc)), f"the layout cannot run: {exc}"
    return None


def runnable_problem(recipe: Recipe, path: str | Path | None = None) -> Problem | None:
    """What keeps ``recipe`` from running on its launcher, found without running it (None: nothing found).
    ``slurm``: its hardware is the cluster's to answer (``attune doctor`` asks it); its layout is checked."""
    launcher = recipe.cluster.launcher
    if launcher == "sim":
        return _sim_problem(recipe) or _sim_layout_problem(recipe)
    if launcher == "local":
        return _local_problem(recipe) or _titan_layout_problem(recipe, path)
    if launcher == "slurm":
        return _titan_layout_problem(recipe, path)
    return None


def check_runnable(recipe: Recipe, path: str | Path) -> None:
    """Raise :class:`~bot.core.recipe.RecipeError` (``file:line: field: problem``) when ``recipe``, read from
    ``path``, cannot run on its launcher; see the module docstring."""
    problem = runnable_problem(recipe, path)
    if problem is not None:
        raise RecipeError(field_error(path, *problem))
