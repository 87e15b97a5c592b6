"""The lever catalog for torchtitan 0.3.0: what the tuner may change, and how.

Each lever has its override path (the recipe key is torchtitan's dotted config name), a type and
domain, a tier (B bit-identical, R reduction-order only, N numerics-changing but commonly
accepted, X objective-changing) and prerequisites. Source for every row:
``docs/reference/torchtitan.md`` §1 (flags verified against the 0.3.0 wheel with
``ConfigManager().parse_args``) — https://github.com/pytorch/torchtitan/tree/release/0.3 .

Activation checkpointing is the key ``activation_checkpoint`` (``none|selective|full|memory_budget``):
torchtitan spells it as the positional tyro subcommand ``activation-checkpoint:<mode>``; flags
of the AC subcommand (``ac_flag=True``) must come after that token.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from bot.core.records import Scalar, Tier

Kind = Literal["int", "float", "bool", "choice"]

PP_SCHEDULES = [
    "1F1B",
    "GPipe",
    "Interleaved1F1B",
    "LoopedBFS",
    "InterleavedZeroBubble",
    "ZBVZeroBubble",
    "DualPipeV",
]
MULTI_STAGE_SCHEDULES = {"Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV"}
# the V-shaped schedules crash under torch.compile (https://github.com/pytorch/pytorch/issues/161904; the gate's
# defect rule zbv-dualpipev-with-compile); InterleavedZeroBubble fills the bubble with the split backward the same
# way, two stages per rank in a loop instead of a V (Qi et al., https://arxiv.org/abs/2401.10241, ZB-H2 vs ZB-V),
# and runs under compile: the schedule a compiled pipeline keeps its zero-bubble property with
V_SCHEDULES = ("ZBVZeroBubble", "DualPipeV")
COMPILE_SAFE_ZERO_BUBBLE = "InterleavedZeroBubble"
# the four parallel degrees besides data parallelism: the levers that change a layout
PARALLEL_DEGREES = (
    "parallelism.tensor_parallel_degree",
    "parallelism.pipeline_parallel_degree",
    "parallelism.context_parallel_degree",
    "parallelism.expert_parallel_degree",
)


class LeverError(ValueError):
    """A lever name or value the catalog refuses."""


@dataclass(frozen=True)
class Lever:
    name: str
    kind: Kind
    tier: Tier
    doc: str
    choices: tuple[Scalar, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    cli: bool = True  # False: only a config function can set it (frozen CLI in 0.3.0)
    ac_flag: bool = False  # belongs after the activation-checkpoint subcommand
    precision: bool = False  # changes numeric precision: never a plain gate pass
    tier_by_value: dict[Scalar, Tier] = field(default_factory=dict)
    # a runner lever: never a torchtitan flag; each value sets these environment variables on the ranks
    env_by_value: dict[Scalar, dict[str, str]] = field(default_factory=dict)

    def flag(self) -> str:
        """The tyro flag for this lever (``--section.field``)."""
        return "--" + self.name.replace("_", "-")

    def tier_of(self, value: Scalar) -> Tier:
        return self.tier_by_value.get(value, self.tier)

    def parse(self, raw: Scalar | str) -> Scalar:
        """Parse and check a value; raise :class:`LeverError` with what was expected."""
        value = _coerce(self, raw)
        if self.kind == "choice" and value not in self.choices:
            raise LeverError(f"{self.name}: expected one of {', '.join(map(str, self.choices))}; got {raw!r}")
        if self.kind in ("int", "float"):
            if self.minimum is not None and value < self.minimum:  # type: ignore[operator]
                raise LeverError(f"{self.name}: expected a value >= {_num(self.minimum)}; got {raw!r}")
            if self.maximum is not None and value > self.maximum:  # type: ignore[operator]
                raise LeverError(f"{self.name}: expected a value <= {_num(self.maximum)}; got {raw!r}")
        return value


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def _coerce(lever: Lever, raw: Scalar | str) -> Scalar:
    kind = lever.kind
    if kind == "bool":
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in ("true", "yes", "on", "1"):
            return True
        if text in ("false", "no", "off", "0"):
            return False
        raise LeverError(f"{lever.name}: expected true or false; got {raw!r}")
    if kind == "int":
        if isinstance(raw, bool):
            raise LeverError(f"{lever.name}: expected an integer; got {raw!r}")
        try:
            if isinstance(raw, float) and not raw.is_integer():
                raise ValueError
            return int(str(raw).strip()) if not isinstance(raw, int | float) else int(raw)
        except ValueError:
            raise LeverError(f"{lever.name}: expected an integer; got {raw!r}") from None
    if kind == "float":
        if isinstance(raw, bool):
            raise LeverError(f"{lever.name}: expected a number; got {raw!r}")
        try:
            number = float(raw)
        except (TypeError, ValueError):  # TypeError: a list, a mapping or null from YAML
            raise LeverError(f"{lever.name}: expected a number; got {raw!r}") from None
        if not math.isfinite(number):  # nan passes every range check
            raise LeverError(f"{lever.name}: expected a finite number; got {raw!r}")
        return number
    # choice: match case-insensitively, return the catalog's spelling
    text = str(raw).strip()
    for choice in lever.choices:
        if str(choice).lower() == text.lower():
            return choice
    return text


# glibc's malloc serves blocks above its mmap threshold with mmap and unmaps them when freed, and trims the heap's
# top once it is over its trim threshold: a training step frees and reallocates the same large activation buffers
# every step, so every step pays fresh page faults. These tunables keep freed memory in the process instead
# (mallopt(3), https://man7.org/linux/man-pages/man3/mallopt.3.html: M_MMAP_THRESHOLD's ceiling on 64-bit is
# 32 MiB; M_TRIM_THRESHOLD, M_TOP_PAD). Other C libraries ignore them. Measured: docs/recipes.md, "The runner's lever".
HOST_ALLOCATOR = "host.allocator"
RETAIN_FREED_MEMORY = {
    "MALLOC_MMAP_THRESHOLD_": "33554432",
    "MALLOC_TRIM_THRESHOLD_": "4294967296",
    "MALLOC_TOP_PAD_": "268435456",
}


def _levers() -> dict[str, Lever]:
    rows = [
        # --- parallelism (docs/reference/torchtitan.md §1a) ---
        Lever(
            "parallelism.data_parallel_shard_degree",
            "int",
            "R",
            "FSDP degree (-1 = leftover ranks). Pin the global batch.",
            minimum=-1,
        ),
        Lever("parallelism.data_parallel_replicate_degree", "int", "R", "DDP/HSDP replicate degree.", minimum=1),
        Lever(
            "parallelism.fsdp_reshard_after_forward",
            "choice",
            "B",
            "Reshard params after forward (never = ZeRO-2-like).",
            choices=("default", "always", "never"),
        ),
        Lever(
            "parallelism.tensor_parallel_degree",
            "int",
            "R",
            "Tensor parallel degree; must divide attention and KV heads.",
            minimum=1,
        ),
        Lever("parallelism.enable_sequence_parallel", "bool", "R", "Sequence parallel (with TP>1)."),
        Lever(
            "parallelism.pipeline_parallel_degree",
            "int",
            "R",
            "Pipeline parallel degree; needs training.disable_cuda_graphs.",
            minimum=1,
        ),
        Lever(
            "parallelism.pipeline_parallel_schedule", "choice", "R", "Pipeline schedule.", choices=tuple(PP_SCHEDULES)
        ),
        Lever(
            "parallelism.pipeline_parallel_microbatch_size",
            "int",
            "R",
            "PP microbatch size; must divide local batch.",
            minimum=1,
        ),
        Lever("parallelism.context_parallel_degree", "int", "R", "Context parallel degree.", minimum=1),
        Lever(
            "parallelism.expert_parallel_degree",
            "int",
            "R",
            "Expert parallel degree (MoE): routed experts sharded over EP ranks borrowed from dp_shard*cp*tp, all-to-all "
            "dispatch/combine; the standard (all-to-all, host-synced) dispatcher needs CUDA graphs off. On the CPU the "
            "standard dispatcher runs over gloo (the only one there: MOE_CUDA_ONLY).",
            minimum=1,
        ),
        # --- activation checkpointing (§1b) ---
        Lever(
            "activation_checkpoint",
            "choice",
            "B",
            "Activation checkpointing mode (tyro subcommand).",
            choices=("none", "selective", "full", "memory_budget"),
            tier_by_value={"memory_budget": "R"},
        ),
        Lever(
            "activation_checkpoint.memory_budget",
            "float",
            "R",
            "Memory budget for memory_budget AC (0..1).",
            minimum=0.0,
            maximum=1.0,
            ac_flag=True,
        ),
        # --- compile, graphs (§1c) ---
        Lever("compile.enable", "bool", "R", "torch.compile each TransformerBlock and the loss."),
        Lever("compile.enable_async_tensor_parallel", "bool", "R", "Async TP (needs compile with model)."),
        Lever("compile.components", "choice", "R", "What is compiled.", choices=("model,loss", "model", "loss")),
        Lever(
            "training.disable_cuda_graphs",
            "bool",
            "R",
            "Turn CUDA graphs off (needed by PP and blocking EP dispatchers).",
        ),
        Lever("loss.num_chunks", "int", "R", "Chunked cross-entropy chunk count.", minimum=1),
        # --- batch, memory, optimizer, misc (§1e) ---
        Lever(
            "training.local_batch_size",
            "int",
            "B",
            "Per-rank microbatch; with a pinned global batch it only changes grad-accumulation.",
            minimum=1,
        ),
        Lever("training.enable_cpu_offload", "bool", "R", "FSDP CPU offload of params/grads/optimizer state."),
        Lever(
            "optimizer.implementation",
            "choice",
            "R",
            "Optimizer kernel implementation.",
            choices=("for-loop", "foreach", "fused", "fused_opt_states_bf16"),
            tier_by_value={"fused_opt_states_bf16": "N"},
        ),
        Lever("training.gc_freq", "int", "B", "Python GC every N steps.", minimum=1),
        Lever("metrics.log_freq", "int", "B", "Metric logging cadence (host syncs on log steps).", minimum=1),
        Lever("profiler.enable_profiling", "bool", "B", "Profiler on/off (distorts timing)."),
        Lever("debug.enable_structured_logging", "bool", "B", "Per-rank JSONL spans."),
        Lever(
            "training.mixed_precision_param",
            "choice",
            "N",
            "FSDP param compute dtype.",
            choices=("bfloat16", "float32"),
            precision=True,
        ),
        Lever(
            "quantize.linear",
            "choice",
            "N",
            "Low-precision linear converter (config function only in 0.3.0).",
            choices=("none", "float8"),
            cli=False,
            precision=True,
            tier_by_value={"none": "B"},
        ),
        # --- the runner's own: set as environment variables, never passed to torchtitan ---
        Lever(
            HOST_ALLOCATOR,
            "choice",
            "B",
            "glibc malloc on the host: return freed memory to the kernel (default) or keep it (retain).",
            choices=("default", "retain"),
            env_by_value={"default": {}, "retain": RETAIN_FREED_MEMORY},
        ),
    ]
    return {lv.name: lv for lv in rows}


CATALOG: dict[str, Lever] = _levers()

DEFAULTS: dict[str, Scalar] = {
    "parallelism.data_parallel_shard_degree": -1,
    "parallelism.data_parallel_replicate_degree": 1,
    "parallelism.fsdp_reshard_after_forward": "default",
    "parallelism.tensor_parallel_degree": 1,
    "parallelism.enable_sequence_parallel": True,
    "parallelism.pipeline_parallel_degree": 1,
    "parallelism.pipeline_parallel_schedule": "1F1B",
    "parallelism.pipeline_parallel_microbatch_size": 1,
    "parallelism.context_parallel_degree": 1,
    "parallelism.expert_parallel_degree": 1,
    "activation_checkpoint": "selective",
    "activation_checkpoint.memory_budget": 0.5,
    "compile.enable": False,
    "compile.enable_async_tensor_parallel": False,
    "compile.components": "model,loss",
    "training.disable_cuda_graphs": False,
    "loss.num_chunks": 8,
    "training.local_batch_size": 8,
    "training.enable_cpu_offload": False,
    "optimizer.implementation": "fused",
    "training.gc_freq": 50,
    "metrics.log_freq": 10,
    "profiler.enable_profiling": False,
    "debug.enable_structured_logging": True,
    "training.mixed_precision_param": "bfloat16",
    "quantize.linear": "none",
    HOST_ALLOCATOR: "default",
}


def get(name: str) -> Lever:
    try:
        return CATALOG[name]
    except KeyError:
        raise LeverError(f"unknown lever {name!r}; known levers: {', '.join(sorted(CATALOG))}") from None


def parse_value(name: str, raw: Scalar | str) -> Scalar:
    return get(name).parse(raw)


def runner_env(levers: Mapping[str, Scalar]) -> dict[str, str]:
    """The environment variables the runner levers among ``levers`` set on every rank."""
    out: dict[str, str] = {}
    for name, value in levers.items():
        lever = CATALOG.get(name)
        if lever is not None and lever.env_by_value:
            out.update(lever.env_by_value.get(value, {}))
    return out


# MoE features of torchtitan 0.3.0 that exist only on CUDA (none is a lever on the CPU). The dispatcher is a
# config-function choice (``model_registry(moe_comm_backend=...)``; the CLI is frozen), so on the CPU the only
# token dispatcher is "standard": ``AllToAllTokenDispatcher`` over gloo at EP > 1, its local fallback at EP 1
# (``LocalTokenDispatcher``). Each claim is checked against the installed torchtitan by tests/core/test_moe_levers.py.
_TT = "https://github.com/pytorch/torchtitan/blob/release/0.3/torchtitan/"
MOE_CUDA_ONLY: dict[str, str] = {
    "moe_comm_backend=deepep": _TT + "distributed/deepep/deepep.py (DeepEP kernels: NVLink/RDMA, CUDA only)",
    "moe_comm_backend=hybridep": _TT + "distributed/deepep/hybridep.py (HybridEP: TMA kernels for GB200/NVL72)",
    "moe_comm_backend=minimal_async_ep": _TT
    + "distributed/minimal_async_ep/api.py (symmetric memory + Triton; ops registered for device_types='cuda')",
    "override fused_grouped_experts": _TT
    + "overrides/fused_swiglu.py (Triton silu_and_mul kernel, device_types='cuda')",
    "Float8/MXFP8 grouped experts": _TT + "components/quantization/float8.py (torchao, SM89+ / SM100+)",
    "CUDA graphs (training.disable_cuda_graphs false)": _TT + "distributed/cudagraph.py",
    "parallelism.enable_fsdp_symm_mem": _TT + "config/configs.py (checks the CUDA capability at parse time)",
}


@dataclass(frozen=True)
class ModelFacts:
    """What the prerequisite checks need to know about the model (heads, layers, experts) and its world size
    (``devices``: expert parallelism borrows ranks from dp_shard*cp*tp)."""

    n_heads: int | None = None
    n_kv_heads: int | None = None
    n_layers: int | None = None
    num_experts: int | None = None
    devices: int | None = None


def effective(levers: dict[str, Scalar]) -> dict[str, Scalar]:
    """Lever values with torchtitan defaults filled in."""
    return {**DEFAULTS, **levers}


def compiles_model(levers: dict[str, Scalar]) -> bool:
    """Whether torch.compile is on for the model (compile.enable with 'model' in compile.components): what async TP
    and memory_budget activation checkpointing need."""
    v = effective(levers)
    return bool(v["compile.enable"]) and "model" in str(v["compile.components"])


def prerequisite_problems(
    levers: dict[str, Scalar], model: ModelFacts | None = None, hardware: str | None = None
) -> list[str]:
    """Every prerequisite a lever set violates (empty when the set is legal); with ``hardware``, also what torchtitan
    0.3.0 cannot run on it (:func:`bot.core.layouts.layout_problems`)."""
    from bot.core.layouts import layout_problems

    v = effective(levers)
    problems: list[str] = []
    tp, pp, ep = (
        int(v["parallelism.tensor_parallel_degree"]),
        int(v["parallelism.pipeline_parallel_degree"]),
        int(v["parallelism.expert_parallel_degree"]),
    )
    if v["compile.enable_async_tensor_parallel"] and not compiles_model(v):
        problems.append("compile.enable_async_tensor_parallel needs compile.enable with 'model' in compile.components")
    if v["activation_checkpoint"] == "memory_budget" and not compiles_model(v):
        problems.append("activation_checkpoint memory_budget needs compile.enable with 'model' in compile.components")
    if v["compile.enable"] and pp > 1 and str(v["parallelism.pipeline_parallel_schedule"]) in V_SCHEDULES:
        problems.append(
            f"compile.enable with parallelism.pipeline_parallel_schedule {v['parallelism.pipeline_parallel_schedule']} "
            "crashes (pytorch#161904): needs a schedule that is not V-shaped"
        )
    graphs = not v["training.disable_cuda_graphs"] and hardware != "cpu"  # a CPU host has no CUDA graphs
    if pp > 1 and graphs:
        problems.append("parallelism.pipeline_parallel_degree > 1 needs training.disable_cuda_graphs true")
    if ep > 1 and graphs:
        problems.append(
            "parallelism.expert_parallel_degree > 1 with the standard dispatcher needs training.disable_cuda_graphs true"
        )
    if pp > 1 and int(v["training.local_batch_size"]) % int(v["parallelism.pipeline_parallel_microbatch_size"]):
        problems.append("training.local_batch_size must be divisible by parallelism.pipeline_parallel_microbatch_size")
    if model is not None:
        for attr in ("n_heads", "n_kv_heads"):
            heads = getattr(model, attr)
            if heads and heads % tp:
                problems.append(f"parallelism.tensor_parallel_degree {tp} must divide {attr} {heads}")
        if model.n_layers and pp > model.n_layers:
            problems.append(f"parallelism.pipeline_parallel_degree {pp} exceeds the {model.n_layers} layers")
        if model.devices and ep > 1:
            rep, cp = (
                int(v["parallelism.data_parallel_replicate_degree"]),
                int(v["parallelism.context_parallel_degree"]),
            )
            shard = int(v["parallelism.data_parallel_shard_degree"])
            if shard == -1:
                shard = max(model.devices // max(rep * tp * pp * cp, 1), 1)
            if (shard * cp * tp) % ep:
                # torchtitan parallel_dims.py: EP borrows ranks from FSDP/CP/TP (dp_shard*cp*tp = efsdp*ep)
                problems.append(
                    f"parallelism.expert_parallel_degree {ep} must divide dp_shard*cp*tp = {shard * cp * tp}"
                )
        if ep > 1 and not model.num_experts:
            problems.append("parallelism.expert_parallel_degree > 1 needs a MoE model")
        elif ep > 1 and model.num_experts and model.num_experts % ep:
            problems.append(f"parallelism.expert_parallel_degree {ep} must divide num_experts {model.num_experts}")
    if hardware is not None:
        problems += layout_problems(v, hardware, model.n_layers if model else None)
    return problems


# A missing prerequisite is fixed by proposing this lever change first.
PREREQUISITE_FIX: dict[str, tuple[str, Scalar]] = {
    "compile.enable_async_tensor_parallel": ("compile.enable", True),
    "activation_checkpoint memory_budget": ("compile.enable", True),
    "parallelism.pipeline_parallel_degree > 1": ("training.disable_cuda_graphs", True),
    "parallelism.expert_parallel_degree > 1 with": ("training.disable_cuda_graphs", True),
    "compile.enable with parallelism.pipeline_parallel_schedule": (
        "parallelism.pipeline_parallel_schedule",
        COMPILE_SAFE_ZERO_BUBBLE,
    ),
}


def with_prerequisites(levers: dict[str, Scalar], model: ModelFacts | None, space: set[str]) -> dict[str, Scalar]:
    """``levers`` with every missing prerequisite whose fix is known (PREREQUISITE_FIX) set, where the fix's lever is
    in ``space`` (the levers a tuner may change): expert or pipeline parallel with CUDA graphs off, async TP with
    compile on."""
    out = dict(levers)
    for _ in range(len(PREREQUISITE_FIX)):
        fixes = [
            fix
            for problem in prerequisite_problems(out, model)
            for prefix, fix in PREREQUISITE_FIX.items()
            if problem.startswith(prefix) and fix[0] in space and out.get(fix[0]) != fix[1]
        ]
        if not fixes:
            break
        out[fixes[0][0]] = fixes[0][1]
    return out


def prerequisite_for(
    levers: dict[str, Scalar], lever: str, value: Scalar, model: ModelFacts | None = None
) -> tuple[str, Scalar] | None:
    """If setting ``lever=value`` needs another lever changed first, that (lever, value). A fix of the lever being
    set is none (a V-shaped schedule under compile: the fix would undo the change itself)."""
    before = set(prerequisite_problems(levers, model))
    after = prerequisite_problems({**levers, lever: value}, model)
    for problem in after:
        if problem in before:
            continue
        for prefix, fix in PREREQUISITE_FIX.items():
            if problem.startswith(prefix) and fix[0] != lever:
                return fix
    return None


# Levers that do nothing in some layouts: torchtitan reads them only when another lever enables the feature they
# tune, so changing them there changes nothing a run can measure (a trial of one would only measure the noise).
# (the lever, the lever it depends on, the value at which it is inert, where torchtitan reads it)
INERT_UNLESS: tuple[tuple[str, str, Scalar, str], ...] = (
    (
        "parallelism.pipeline_parallel_microbatch_size",
        "parallelism.pipeline_parallel_degree",
        1,
        _TT + "distributed/pipeline_parallel.py (n_microbatches = local batch / microbatch size, read only under PP)",
    ),
    (
        "parallelism.pipeline_parallel_schedule",
        "parallelism.pipeline_parallel_degree",
        1,
        _TT + "distributed/pipeline_parallel.py (read only when building the pipeline schedule)",
    ),
    (
        "compile.enable_async_tensor_parallel",
        "parallelism.tensor_parallel_degree",
        1,
        "docs/reference/torchtitan.md section 1, Async TP: micro-pipelines the TP collectives, does nothing unless TP>1",
    ),
    (
        "parallelism.enable_sequence_parallel",
        "parallelism.tensor_parallel_degree",
        1,
        "docs/reference/torchtitan.md section 1, Sequence parallel: shards along the sequence inside the TP plan, needs TP>1",
    ),
)


def inert(levers: dict[str, Scalar], lever: str) -> str | None:
    """Why changing ``lever`` does nothing in the layout ``levers`` (INERT_UNLESS), or None where it can matter."""
    v = effective(levers)
    for name, depends, value, source in INERT_UNLESS:
        if name == lever and v.get(depends) == value:
            return f"{lever} does nothing with {depends} = {value} ({source})"
    return None
