"""Draft a recipe from a working torchtitan command line (``attune recipe init``): data in, recipe text out.

The resolved config (torchtitan's own ConfigManager, :func:`bot.runner.resolve.resolve_args`) gives every catalog
lever that applies at its resolved value and the objective to pin. What torchtitan leaves implicit is made explicit,
and only that: the global batch (``-1`` is local batch x data-parallel degree), the schedule length (unset is the
run's ``training.steps``) and the seed (unset is unseeded; a campaign needs one). ``metrics.log_freq`` stays the
runner's (the gate reads every step's loss).
"""

from __future__ import annotations

import io
from typing import Any

from pydantic import BaseModel
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap

from bot.core import levers as catalog
from bot.core.recipe import PIN_ALIASES
from bot.facts import ModelSpec
from bot.runner.resolve import dp_degree
from bot.sim.hardware import HardwareSpec

DEFAULT_SEED = 0
BENCH = {"steps": 20, "warmup_steps": 5}
CPU_BENCH = {"steps": 10, "warmup_steps": 3}  # a CPU step of a debug config takes seconds: a short benchmark
USD_PER_DEVICE_HOUR = {"h100-sxm-80gb": 2.5, "h100-96gb": 2.5, "h200": 3.5, "b200": 5.0, "cpu": 0.05}
RUNNER_OWNED = ("metrics.log_freq",)  # the runner logs every step for the gate
CUDA_ONLY = (
    "training.disable_cuda_graphs",
    "compile.enable_async_tensor_parallel",
    "training.enable_cpu_offload",
    "training.mixed_precision_param",
)
PARALLEL = ("parallelism.",)
MOE_ONLY = ("parallelism.expert_parallel_degree",)


class Draft(BaseModel):
    """A drafted recipe: its mapping (in file order) and what was made explicit, for the comments and the report."""

    recipe: dict[str, Any]
    made_explicit: dict[str, str]


def _lever_applies(name: str, spec: ModelSpec, hw: HardwareSpec, devices: int) -> bool:
    if name in RUNNER_OWNED or (name in MOE_ONLY and not spec.is_moe):
        return False
    if hw.kind == "cpu" and name in CUDA_ONLY:
        return False
    return not (devices == 1 and name.startswith(PARALLEL))


def draft_recipe(
    *,
    module: str,
    config: str,
    overrides: list[str],
    flat: dict[str, Any],
    spec: ModelSpec,
    hw: HardwareSpec,
    nodes: int,
    devices_per_node: int,
    launcher: str,
    quantized: bool,
) -> Draft:
    """The recipe for ``flat`` (the resolved config of ``--module module --config config *overrides``)."""
    devices = nodes * devices_per_node
    levers: dict[str, Any] = {}
    for name, lever in catalog.CATALOG.items():
        if not _lever_applies(name, spec, hw, devices):
            continue
        if name == "activation_checkpoint":
            levers[name] = flat["activation_checkpoint.mode"]
        elif name == "quantize.linear":
            if not quantized:
                levers[name] = "none"
        elif lever.env_by_value:
            if hw.kind == "cpu":  # the host's allocator matters where the host does the math
                levers[name] = catalog.DEFAULTS[name]
        elif lever.ac_flag:
            if name in flat and flat.get("activation_checkpoint.mode") == "memory_budget":
                levers[name] = flat[name]
        elif name in flat and flat[name] is not None:
            raw = ",".join(map(str, flat[name])) if isinstance(flat[name], list) else flat[name]
            try:
                levers[name] = lever.parse(raw)
            except catalog.LeverError:
                continue  # a value outside the catalog's domain: the lever stays the config's, out of the tuner's reach
    explicit: dict[str, str] = {}
    gbs = int(flat["training.global_batch_size"])
    if gbs == -1:
        gbs = int(flat["training.local_batch_size"]) * dp_degree(flat, devices)
        explicit["training.global_batch_size"] = f"torchtitan's -1: local batch x data-parallel degree = {gbs}"
    total = flat.get("lr_scheduler.total_steps")
    if total is None:
        total = int(flat["training.steps"])
        explicit["lr_scheduler.total_steps"] = f"unset: the config's training.steps = {total}"
    seed = flat.get("debug.seed")
    if seed is None:
        seed = DEFAULT_SEED
        explicit["debug.seed"] = f"unset (unseeded) in the config; a campaign pins {DEFAULT_SEED}"
    pinned = {
        "training.global_batch_size": gbs,
        "training.seq_len": int(flat["training.seq_len"]),
        "optimizer.lr": float(flat[PIN_ALIASES["optimizer.lr"]]),
        "lr_scheduler.warmup_steps": int(flat["lr_scheduler.warmup_steps"]),
        "lr_scheduler.total_steps": int(total),
        "debug.seed": int(seed),
    }
    workload: dict[str, Any] = {"module": module, "config": config}
    if overrides:
        workload["overrides"] = list(overrides)
    recipe = {
        "id": f"{config}/{hw.id}x{devices}",
        "source": f"attune recipe init --module {module} --config {config}",
        "workload": workload,
        "cluster": {
            "hardware": hw.id,
            "nodes": nodes,
            "devices_per_node": devices_per_node,
            "launcher": launcher,
            "usd_per_device_hour": USD_PER_DEVICE_HOUR.get(hw.id, 0.0),
        },
        "levers": levers,
        "pinned": pinned,
        # the cpu profile is a 2-core host: the cores shared among the ranks; OpenMP threads sleep soon when idle
        "env": {"OMP_NUM_THREADS": str(max(1, 2 // devices_per_node)), "GOMP_SPINCOUNT": "10000"}
        if hw.kind == "cpu"
        else {},
        "bench": dict(CPU_BENCH if hw.kind == "cpu" else BENCH),
    }
    return Draft(recipe=recipe, made_explicit=explicit)


def render(draft: Draft) -> str:
    """The drafted recipe as YAML, with a header and a comment on every value made explicit."""

    def mapping(d: dict[str, Any]) -> CommentedMap:
        out = CommentedMap()
        for k, v in d.items():
            out[k] = mapping(v) if isinstance(v, dict) else v
        return out

    doc = mapping(draft.recipe)
    for key, why in draft.made_explicit.items():
        doc["pinned"].yaml_add_eol_comment(why, key)
    cfg = draft.recipe["workload"]["config"]
    doc.yaml_set_start_comment(
        f"{cfg}: drafted by `attune recipe init` from torchtitan's resolved config. Levers: every catalog lever that\n"
        "applies, at its resolved value (what the tuner may change). Pinned: the objective (never changed)."
    )
    yaml = YAML()
    yaml.width = 4096
    yaml.indent(
        mapping=2, sequence=4, offset=2
    )  # as bot.core.recipe edits recipes: a later one-line edit stays one line
    buf = io.StringIO()
    yaml.dump(doc, buf)
    return buf.getvalue()
