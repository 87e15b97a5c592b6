"""Resolve a recipe's full torchtitan config in-process on the CPU, with torchtitan's own ConfigManager.

Used before any launch (a config torchtitan refuses costs no device time) and by the gate's
config check (every field of the resolved configs is diffed). The result is flat:
``section.field`` -> value, lists indexed (``optimizer.param_groups.0.optimizer_kwargs.lr``),
plus ``activation_checkpoint.mode`` (the AC policy, which ``to_dict`` does not carry).
"""

from __future__ import annotations

import contextlib
import importlib
import io
import math
import re
from pathlib import Path
from typing import Any

from bot.core.layouts import layout_problems
from bot.core.recipe import PIN_ALIASES, Recipe
from bot.core.records import Scalar
from bot.runner.command import titan_args
from bot.runner.workdir import importable

AC_MODES = {
    "NoneType": "none",
    "NoAC": "none",
    "SelectiveAC": "selective",
    "FullAC": "full",
    "MemoryBudgetAC": "memory_budget",
}


class ResolveError(Exception):
    """torchtitan refused the configuration (message is torchtitan's own, trimmed). ``field``: the recipe field the
    refusal is about when torchtitan's own error says so (``("workload", "module")`` for a module it cannot import,
    ``("workload", "config")`` for a config function the module lacks); None: the layout or another setting."""

    def __init__(self, message: str, field: tuple[str, ...] | None = None) -> None:
        super().__init__(message)
        self.field = field


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    if isinstance(value, dict):
        for k, v in value.items():
            out.update(flatten(v, f"{prefix}{k}."))
    elif isinstance(value, list | tuple) and value and any(isinstance(v, dict | list | tuple) for v in value):
        for i, v in enumerate(value):
            out.update(flatten(v, f"{prefix}{i}."))
    else:
        out[prefix[:-1]] = list(value) if isinstance(value, tuple) else value
    return out


NOISE = re.compile(r"Failed to load \S+: Could not load this library: \S+|For full helptext, run .*$")


def resolve_args(args: list[str], *, capability: tuple[int, int] | None = None) -> dict[str, Any]:
    """Parse torchtitan arguments with ConfigManager (all validators run); flat dict or ResolveError. ``capability``:
    the CUDA capability of the GPU the run is for, answered to torchtitan's converter checks on a host without a GPU."""
    import torch
    from torchtitan.config import ConfigManager

    from bot.facts.build import converters_as_on

    as_gpu = converters_as_on(capability) if capability and not torch.cuda.is_available() else contextlib.nullcontext()
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()), as_gpu:
            config = ConfigManager().parse_args(list(args))
    except SystemExit:
        text = err.getvalue().strip()
        lines = [ln.strip("│ ").strip() for ln in text.splitlines() if ln.strip("│╭╰─ ").strip()]
        lines = [
            ln for ln in lines if not set(ln) <= set("─-") and "has no effect" not in ln and "does not exist" not in ln
        ]
        lines = [ln for ln in lines if ln.lower() not in ("value error", "parsing error")]
        lines = [ln for i, ln in enumerate(lines) if not (i + 1 < len(lines) and lines[i + 1].startswith(ln))]
        # less what else wrote to stderr meanwhile (an optional torchao kernel library that does not load on this
        # host) and tyro's pointer to a help text that is not ours
        said = NOISE.sub(" ", " ".join(lines)).split()
        raise ResolveError("torchtitan refused the arguments: " + " ".join(said)[:600]) from None
    except ImportError as exc:  # the module (ConfigManager imports ``--module``, or ``<module>.config_registry``)
        raise ResolveError(
            f"torchtitan cannot import it: {type(exc).__name__}: {exc}"[:600], ("workload", "module")
        ) from None
    except Exception as exc:  # torchtitan's validators raise ValueError, AssertionError, ImportError...
        field = ("workload", "config") if str(exc).startswith("Config function ") else None
        raise ResolveError(f"torchtitan refused the configuration: {type(exc).__name__}: {exc}"[:600], field) from None
    flat = flatten(config.to_dict())
    ac_cls = type(config.activation_checkpoint).__qualname__.split(".")[0]  # AC none is a None config: "NoneType"
    flat["activation_checkpoint.mode"] = AC_MODES.get(ac_cls, ac_cls)
    return flat


def resolve_recipe(
    recipe: Recipe,
    *,
    steps: int | None = None,
    dump_folder: str = "./outputs",
    extra: list[str] | None = None,
    check_layout: bool = True,
    workdir: Path | None = None,
) -> dict[str, Any]:
    """The recipe's resolved torchtitan config; checks that pins hold, config-only levers match and (``check_layout``)
    that torchtitan 0.3.0 can run the parallel layout on the recipe's hardware (``bot.core.layouts``). ``workdir``:
    the root its ranks start in (:mod:`.workdir`; default the working directory), importable while it resolves."""
    if recipe.cluster.launcher == "sim":
        raise ResolveError("a simulated recipe has no torchtitan config to resolve")
    root = (workdir if workdir is not None else Path.cwd()).resolve()
    with importable(root):
        try:
            flat = resolve_args(
                titan_args(recipe, steps=steps or recipe.bench.steps, dump_folder=dump_folder, extra=extra),
                capability=_capability(recipe.cluster.hardware),
            )
        except ResolveError as exc:
            if exc.field != ("workload", "module"):
                raise
            module = recipe.workload.module
            why = _import_failure(module)
            raise ResolveError(
                f"torchtitan cannot import {module!r} from the repository root {root} or the installed "
                f"packages{f' ({why})' if why else ''}"[:600],
                exc.field,
            ) from None
    problems = pin_mismatches(recipe.pinned, flat)
    if "quantize.linear" in recipe.levers and recipe.levers["quantize.linear"] != "none":
        problems.append(
            "quantize.linear is set by a config function only in torchtitan 0.3.0; choose a config that applies it"
        )
    problems += batch_problems(recipe, flat)
    if check_layout and not problems:
        problems += layout_problems(_layout_values(flat), recipe.cluster.hardware)
    if problems:
        raise ResolveError("; ".join(problems))
    return flat


def _import_failure(module: str) -> str:
    """Why ``module`` does not import (torchtitan's own message drops the reason: a missing package inside it, a
    folder that is not there), or "" when it does."""
    try:
        importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001 - any error of the user's module is the reason to show
        return f"{type(exc).__name__}: {exc}"[:300]
    return ""


def _capability(hardware: str) -> tuple[int, int] | None:
    from bot.sim.hardware import HARDWARE

    spec = HARDWARE.get(hardware)
    return spec.cuda_capability if spec is not None else None


LAYOUT_FIELDS = (
    "parallelism.context_parallel_degree",
    "parallelism.pipeline_parallel_degree",
    "parallelism.pipeline_parallel_schedule",
    "parallelism.pipeline_parallel_microbatch_size",
    "training.local_batch_size",
)


def _layout_values(flat: dict[str, Any]) -> dict[str, Any]:
    return {k: flat[k] for k in LAYOUT_FIELDS if k in flat}


def dp_degree(flat: dict[str, Any], world_size: int) -> int:
    """Data-parallel degree (replicate x shard), resolving ``dp_shard = -1`` against the world size."""
    rep = int(flat["parallelism.data_parallel_replicate_degree"])
    shard = int(flat["parallelism.data_parallel_shard_degree"])
    if shard == -1:
        other = (
            rep * int(flat["parallelism.tensor_parallel_degree"]) * int(flat["parallelism.pipeline_parallel_degree"])
        )
        other *= int(flat["parallelism.context_parallel_degree"])
        shard = max(world_size // other, 1)
    return rep * shard


def batch_problems(recipe: Recipe, flat: dict[str, Any]) -> list[str]:
    """Layout checks torchtitan only makes at start-up: world size and grad-accumulation divisibility."""
    world = recipe.devices
    par = [
        int(flat[f"parallelism.{k}"])
        for k in ("tensor_parallel_degree", "pipeline_parallel_degree", "context_parallel_degree")
    ]
    dp = dp_degree(flat, world)
    if dp * par[0] * par[1] * par[2] != world:
        return [
            f"parallel degrees (dp {dp} x tp {par[0]} x pp {par[1]} x cp {par[2]}) must multiply to the {world} devices"
        ]
    gbs, lbs = int(flat["training.global_batch_size"]), int(flat["training.local_batch_size"])
    if gbs > 0 and gbs % (lbs * dp):
        return [f"training.global_batch_size {gbs} is not divisible by local batch {lbs} x data-parallel degree {dp}"]
    return []


def pin_mismatches(pinned: dict[str, Scalar], flat: dict[str, Any]) -> list[str]:
    problems = []
    for key, want in pinned.items():
        path = PIN_ALIASES.get(key, key)
        if path not in flat:
            problems.append(f"pinned {key}: no such field in the resolved torchtitan config")
            continue
        got = flat[path]
        same = math.isclose(float(got), float(want), rel_tol=1e-9) if _numeric(got) and _numeric(want) else got == want
        if not same:
            problems.append(f"pinned {key}: recipe says {want!r}, the resolved config has {got!r}")
    return problems


def _numeric(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)
