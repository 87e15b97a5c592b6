"""The exact torchrun command for a recipe, with overrides in the order tyro needs.

``torchrun … -m torchtitan.train --module M --config C`` then every global ``--section.field``
flag (pins first, then levers, then the runner's own), then the positional
``activation-checkpoint:<mode>`` subcommand, then the AC-specific flags. Booleans are
``--x`` / ``--no-x``. Source: docs/reference/torchtitan.md §0 ("Tyro requires global options to precede union
subcommands", https://github.com/pytorch/torchtitan/pull/3559).
"""

from __future__ import annotations

from pydantic import BaseModel

from bot.core import levers as lever_catalog
from bot.core.recipe import PIN_ALIASES, Recipe, global_overrides
from bot.core.records import Scalar

V_SCHEDULES = ("ZBVZeroBubble", "DualPipeV")
AC_TOKEN = {"none": "none", "selective": "selective", "full": "full", "memory_budget": "memory-budget"}


class Launch(BaseModel):
    argv: list[str]  # the whole command, torchrun first
    titan_args: list[str]  # what follows ``-m torchtitan.train`` (what ConfigManager parses)
    env: dict[str, str]


def flag(name: str, value: Scalar) -> list[str]:
    """One override as tyro spells it: ``--a-b.c-d V``; booleans ``--a-b.c-d`` / ``--a-b.no-c-d``."""
    section, _, fld = name.rpartition(".")
    dashed = fld.replace("_", "-")
    prefix = f"--{section.replace('_', '-')}." if section else "--"
    if isinstance(value, bool):
        return [f"{prefix}{dashed}" if value else f"{prefix}no-{dashed}"]
    return [f"{prefix}{dashed}", str(value)]


def titan_args(recipe: Recipe, *, steps: int, dump_folder: str, extra: list[str] | None = None) -> list[str]:
    """torchtitan's arguments for this recipe (without the torchrun prefix); ``extra``: the runner's own global flags
    (a seed checkpoint's, :mod:`bot.runner.seed`), placed before the activation-checkpoint subcommand."""
    args = ["--module", recipe.workload.module, "--config", recipe.workload.config]
    args += global_overrides(recipe.workload.overrides)
    for key, value in recipe.pinned.items():
        if key not in PIN_ALIASES:
            args += flag(key, value)
    ac_mode: str | None = None
    ac_flags: list[str] = []
    for key, value in recipe.levers.items():
        lever = lever_catalog.get(key)
        if key == "activation_checkpoint":
            ac_mode = str(value)
        elif not lever.cli or lever.env_by_value:
            continue  # set by the config function only (the resolver checks it), or by the runner's environment
        elif lever.ac_flag:
            ac_flags += flag("activation_checkpoint." + key.rpartition(".")[2], value)
        else:
            args += flag(key, value)
    args += flag("training.steps", steps)
    args += flag("dump_folder", dump_folder)
    if "metrics.log_freq" not in recipe.levers:
        args += flag("metrics.log_freq", 1)  # the loss curve needs every step
    args += list(extra or [])
    if ac_mode is not None:
        args.append(f"activation-checkpoint:{AC_TOKEN[ac_mode]}")
    # AC flags without an AC mode are still passed (never dropped): torchtitan then refuses them
    args += ac_flags
    return args


def metrics_rank(recipe: Recipe) -> int:
    """The local rank whose log carries the loss: rank 0, or with PP the first rank of the last pipeline stage (PP is
    the outermost mesh dimension, so the last stage holds the last ``world / pp`` ranks; torchtitan warns "Pipeline
    Parallel loss is not visible" otherwise, ``torchtitan/distributed/pipeline_parallel.py`` ``ensure_pp_loss_visible``)."""
    pp = int(recipe.levers.get("parallelism.pipeline_parallel_degree", 1))
    if str(recipe.levers.get("parallelism.pipeline_parallel_schedule", "")) in V_SCHEDULES:
        return 0  # V-shaped schedules put the last stage back on the first PP rank (measured: ZBVZeroBubble)
    nproc = recipe.cluster.devices_per_node
    return nproc - nproc // pp if pp > 1 and nproc % pp == 0 else 0


def build_launch(
    recipe: Recipe,
    *,
    steps: int,
    dump_folder: str,
    torchrun: str | list[str] = "torchrun",
    extra: list[str] | None = None,
    log_dir: str | None = None,
) -> Launch:
    """``torchrun``: the launcher's command — a path, or a prefix such as ``[python, -m, torch.distributed.run]``;
    ``log_dir``: where torchrun keeps every rank's log (:mod:`.rank_logs`)."""
    nproc = recipe.cluster.devices_per_node
    targs = titan_args(recipe, steps=steps, dump_folder=dump_folder, extra=extra)
    argv = [
        *([torchrun] if isinstance(torchrun, str) else torchrun),
        "--standalone",
        "--nnodes=1",
        f"--nproc_per_node={nproc}",
        f"--local-ranks-filter={metrics_rank(recipe)}",
        "--role=rank",
        "--tee=3",
        *([f"--log-dir={log_dir}"] if log_dir else []),
        "-m",
        "torchtitan.train",
        *targs,
    ]
    return Launch(argv=argv, titan_args=targs, env=recipe.launch_env)
