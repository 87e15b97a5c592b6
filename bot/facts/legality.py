"""Layout legality for every launcher: torchtitan 0.3.0 dotted overrides -> a resolved, checked ``Layout``.

``resolve_layout`` applies torchtitan's defaults to missing levers, derives the leftover FSDP degree, the gradient
accumulation count and the pipeline stage split, and refuses layouts that torchtitan (or PyTorch pipelining) would
refuse at parse or build time, returning the reason (docs/reference/torchtitan.md §0, §1a-1e). It never estimates speed
or memory. Real runs are checked with it before they start (``bot.runner.check``), policies keep to it
(``bot.agent.space``), and the simulator reads the layout it resolves (``bot.sim``); it knows only the model's facts
and the few hardware facts of :class:`Host`.

Levers named ``sim.*`` are calibration-only extensions (not torchtitan config) used to describe published runs of
other stacks: ``sim.stack`` (torchtitan | megatron | meta) and ``sim.virtual_stages`` (Megatron-style virtual
pipeline size, embedding/head not counted as layers). ``quantize.linear: float8_tensorwise`` is likewise only for
pre-0.3.0 / Megatron calibration rows: 0.3.0's converter offers rowwise only; ``sim.fp8_all_gather`` (float8
FSDP all-gather) likewise is not offered by 0.3.0. ``sim.moe_dispatch: dropless-hostsync`` marks a Megatron-Bridge
25.11 run on its dropless, host-synchronised token dispatcher (see ``bot.sim.steptime.dropless_dispatch_floor``);
the default ``default`` leaves the EP model as it is (torchtitan's dispatchers are modelled by ``moe.comm_backend``).
"""

from __future__ import annotations

import math
from typing import Any, Literal, Protocol

from pydantic import BaseModel

from bot.facts.spec import ModelSpec

AcMode = Literal["none", "selective", "full", "memory_budget"]

SINGLE_STAGE_SCHEDULES = ("1F1B", "GPipe")
MULTI_STAGE_SCHEDULES = ("Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV")
V_SCHEDULES = ("ZBVZeroBubble", "DualPipeV")
MB_GE_STAGES = ("1F1B", "DualPipeV")  # torch refuses fewer microbatches than stages (schedules.py L1020, L3439)
_SCHEDULES = {s.lower(): s for s in SINGLE_STAGE_SCHEDULES + MULTI_STAGE_SCHEDULES}

# name -> (kind, default). Defaults are torchtitan 0.3.0 framework defaults (docs/reference/torchtitan.md §1).
LEVER_DEFAULTS: dict[str, tuple[str, Any]] = {
    "parallelism.data_parallel_shard_degree": ("int", -1),
    "parallelism.data_parallel_replicate_degree": ("int", 1),
    "parallelism.tensor_parallel_degree": ("int", 1),
    "parallelism.enable_sequence_parallel": ("bool", True),
    "parallelism.pipeline_parallel_degree": ("int", 1),
    "parallelism.pipeline_parallel_schedule": ("str", "1F1B"),
    "parallelism.pipeline_parallel_microbatch_size": ("int", 1),
    "parallelism.pipeline_parallel_layers_per_stage": ("int?", None),
    "parallelism.pipeline_parallel_first_stage_less_layers": ("int", 1),
    "parallelism.pipeline_parallel_last_stage_less_layers": ("int", 1),
    "parallelism.context_parallel_degree": ("int", 1),
    "parallelism.expert_parallel_degree": ("int", 1),
    "parallelism.fsdp_reshard_after_forward": ("str", "default"),
    "compile.enable": ("bool", False),
    "compile.enable_async_tensor_parallel": ("bool", False),
    "compile.components": ("str", "model,loss"),
    "training.local_batch_size": ("int", 8),
    "training.disable_cuda_graphs": ("bool", False),
    "training.enable_cpu_offload": ("bool", False),
    "activation_checkpoint": ("str", "selective"),
    "activation_checkpoint.memory_budget": ("float", 0.5),
    "quantize.linear": ("str", "none"),
    "quantize.grouped_mm": ("str", "none"),
    "moe.comm_backend": ("str", "standard"),
    "optimizer.implementation": ("str", "fused"),
    "loss.num_chunks": ("int", 8),
    "training.mixed_precision_param": ("str", "bfloat16"),
    "training.gc_freq": ("int", 50),
    "metrics.log_freq": ("int", 10),
    "profiler.enable_profiling": ("bool", False),
    "debug.enable_structured_logging": ("bool", True),
    "sim.stack": ("str", "torchtitan"),
    "sim.virtual_stages": ("int?", None),
    "sim.fp8_all_gather": ("bool", False),
    "sim.moe_dispatch": ("str", "default"),
}
PINNED_DEFAULTS: dict[str, tuple[str, Any]] = {
    "training.global_batch_size": ("int", -1),
    "training.seq_len": ("int", 2048),
}
# Older spellings accepted as aliases.
ALIASES = {
    "parallelism.enable_async_tensor_parallel": "compile.enable_async_tensor_parallel",
    "activation_checkpoint.mode": "activation_checkpoint",
}
_CHOICES: dict[str, tuple[str, ...]] = {
    "parallelism.fsdp_reshard_after_forward": ("default", "always", "never"),
    "activation_checkpoint": ("none", "selective", "full", "memory_budget"),
    "quantize.linear": ("none", "float8", "float8_rowwise", "float8_tensorwise"),
    "quantize.grouped_mm": ("none", "float8"),
    "moe.comm_backend": ("standard", "deepep", "hybridep", "minimal_async_ep"),
    "optimizer.implementation": ("fused", "foreach", "for-loop", "fused_opt_states_bf16"),
    "compile.components": ("model,loss", "model", "loss", "loss,model"),
    "training.mixed_precision_param": ("bfloat16", "float32"),
    "sim.stack": ("torchtitan", "megatron", "meta"),
    "sim.moe_dispatch": ("default", "dropless-hostsync"),
}


class Host(Protocol):
    """The hardware facts legality reads (``bot.sim.hardware.HardwareSpec`` has them): its id, GPUs per node, and
    whether it is a GPU or a CPU host."""

    @property
    def id(self) -> str: ...

    @property
    def gpus_per_node(self) -> int: ...

    @property
    def kind(self) -> str: ...


class LayoutError(ValueError):
    """A lever value or combination torchtitan would refuse; the message is the reason."""


class StageLoad(BaseModel):
    """What one pipeline rank holds: its layers by kind, and whether it owns the embedding / output head."""

    dense_layers: int
    moe_layers: int
    has_embedding: bool
    has_head: bool

    @property
    def layers(self) -> int:
        return self.dense_layers + self.moe_layers


class Layout(BaseModel):
    """A resolved, legal layout: every degree explicit, batch arithmetic done, pipeline split computed."""

    world: int
    gpus_per_node: int
    dp_shard: int
    dp_replicate: int
    tp: int
    sp: bool
    cp: int
    pp: int
    ep: int
    efsdp: int  # FSDP degree of the routed experts: dp_shard * cp * tp / ep
    schedule: str
    stages_per_rank: int
    n_stages: int
    ranks: list[StageLoad]  # one entry per pipeline rank
    microbatch_size: int  # tokens-rows per forward: PP microbatch size, or the local batch without PP
    n_microbatches: int  # per pipeline step (1 without PP)
    local_batch_size: int
    global_batch_size: int
    grad_accum: int
    seq_len: int
    compile: bool
    async_tp: bool
    cuda_graphs: bool
    ac: AcMode
    memory_budget: float
    fp8_linear: Literal["none", "rowwise", "tensorwise"]
    fp8_grouped: bool
    moe_backend: str
    optimizer: str
    cpu_offload: bool
    reshard_after_forward: bool
    loss_chunks: int
    stack: str
    fp8_all_gather: bool = False
    moe_dispatch: str = "default"
    compile_loss: bool = False
    param_fp32: bool = False
    gc_freq: int = 50
    log_freq: int = 10
    profiler: bool = False
    structured_logging: bool = True

    @property
    def dp(self) -> int:
        return self.dp_shard * self.dp_replicate


def _coerce(name: str, kind: str, value: Any) -> Any:
    if kind == "int?" and value in (None, "none", "None", "null"):
        return None
    if kind in ("int", "int?"):
        if isinstance(value, bool):
            raise LayoutError(f"{name}: expected an integer, got {value!r}")
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            return int(value)
        raise LayoutError(f"{name}: expected an integer, got {value!r}")
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise LayoutError(f"{name}: expected true or false, got {value!r}")
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise LayoutError(f"{name}: expected a number, got {value!r}")
        try:
            return float(value)
        except ValueError:
            raise LayoutError(f"{name}: expected a number, got {value!r}") from None
    text = str(value).strip()
    if name == "activation_checkpoint":
        text = text.replace("-", "_").lower()
    if name == "parallelism.pipeline_parallel_schedule":
        if text.lower() not in _SCHEDULES:
            raise LayoutError(f"{name}: unknown schedule {text!r}; known: {sorted(_SCHEDULES.values())}")
        return _SCHEDULES[text.lower()]
    choices = _CHOICES.get(name)
    if choices and text not in choices:
        raise LayoutError(f"{name}: {text!r} is not one of {list(choices)}")
    return text


def read_settings(levers: dict[str, Any], pinned: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Merge levers and pinned values over torchtitan defaults; return (settings, names the simulator ignores)."""
    settings = {k: v for k, (_, v) in {**LEVER_DEFAULTS, **PINNED_DEFAULTS}.items()}
    ignored: list[str] = []
    for source in (levers, pinned):
        for raw_name, value in source.items():
            name = ALIASES.get(raw_name, raw_name)
            spec = LEVER_DEFAULTS.get(name) or PINNED_DEFAULTS.get(name)
            if spec is None:
                if name.startswith("sim."):
                    raise LayoutError(f"{raw_name}: unknown simulator setting")
                ignored.append(raw_name)
                continue
            settings[name] = _coerce(name, spec[0], value)
    return settings, ignored


def _stage_split(m: ModelSpec, n_stages: int, first_less: int, last_less: int, megatron: bool) -> list[int]:
    """Transformer layers per pipeline stage, following torchtitan's ``generate_llm_fqn_per_model_part``.

    The embedding and the output head count as ``first_less`` / ``last_less`` layers' worth of work; the remaining
    units are spread evenly, extra units going to the earliest stages. Megatron-style splits ignore that weighting.
    """
    if n_stages == 1:
        return [m.n_layers]
    if megatron:
        base, extra = divmod(m.n_layers, n_stages)
        return [base + (1 if i < extra else 0) for i in range(n_stages)]
    effective = m.n_layers + first_less + last_less
    base, extra = divmod(effective, n_stages)
    if base < max(first_less, last_less, 1):
        raise LayoutError(
            f"{n_stages} pipeline stages for {m.n_layers} layers (+{first_less}+{last_less} for embedding/head) "
            "leave a stage without a transformer layer"
        )
    units = [base + (1 if i < extra else 0) for i in range(n_stages)]
    units[0] -= first_less
    units[-1] -= last_less
    # Put any rounding surplus/deficit on the middle stages so the total is exact.
    diff = m.n_layers - sum(units)
    i = 1
    while diff != 0 and n_stages > 2:
        step = 1 if diff > 0 else -1
        units[i] += step
        diff -= step
        i = i + 1 if i + 1 < n_stages - 1 else 1
    units[-1] += diff
    return units


def _rank_loads(m: ModelSpec, stage_layers: list[int], pp: int, v_shape: bool) -> list[StageLoad]:
    n_stages = len(stage_layers)
    if v_shape:
        owner = [s if s < pp else 2 * pp - 1 - s for s in range(n_stages)]
    else:
        owner = [s % pp for s in range(n_stages)]
    loads = [{"dense": 0, "moe": 0, "emb": False, "head": False} for _ in range(pp)]
    layer = 0
    for s, count in enumerate(stage_layers):
        r = loads[owner[s]]
        for _ in range(count):
            r["dense" if layer < m.n_dense_layers else "moe"] += 1
            layer += 1
        r["emb"] = r["emb"] or s == 0
        r["head"] = r["head"] or s == n_stages - 1
    return [
        StageLoad(dense_layers=r["dense"], moe_layers=r["moe"], has_embedding=r["emb"], has_head=r["head"])
        for r in loads
    ]


def resolve_layout(
    m: ModelSpec, hw: Host, nodes: int, devices_per_node: int, levers: dict[str, Any], pinned: dict[str, Any]
) -> tuple[Layout, list[str]]:
    """Resolve and check a layout. Raises ``LayoutError`` with torchtitan's reason for refusing it."""
    s, ignored = read_settings(levers, pinned)
    if nodes < 1 or devices_per_node < 1:
        raise LayoutError(f"cluster: nodes ({nodes}) and devices_per_node ({devices_per_node}) must be >= 1")
    if devices_per_node > hw.gpus_per_node:
        raise LayoutError(f"cluster: {hw.id} nodes have {hw.gpus_per_node} GPUs, not {devices_per_node}")
    world = nodes * devices_per_node
    tp = s["parallelism.tensor_parallel_degree"]
    pp = s["parallelism.pipeline_parallel_degree"]
    cp = s["parallelism.context_parallel_degree"]
    ep = s["parallelism.expert_parallel_degree"]
    rep = s["parallelism.data_parallel_replicate_degree"]
    shard = s["parallelism.data_parallel_shard_degree"]
    for name, val in (
        ("tensor_parallel_degree", tp),
        ("pipeline_parallel_degree", pp),
        ("context_parallel_degree", cp),
        ("expert_parallel_degree", ep),
        ("data_parallel_replicate_degree", rep),
    ):
        if val < 1:
            raise LayoutError(f"parallelism.{name} must be >= 1, got {val}")
    if shard == 0 or shard < -1:
        raise LayoutError(f"parallelism.data_parallel_shard_degree must be -1 or >= 1, got {shard}")
    others = rep * cp * tp * pp
    if shard == -1:
        if world % others:
            raise LayoutError(
                f"world size {world} is not divisible by dp_replicate*cp*tp*pp = {rep}*{cp}*{tp}*{pp} = {others} "
                "(dp_shard=-1 cannot take the leftover)"
            )
        shard = world // others
    if shard * others != world:
        raise LayoutError(
            f"product of degrees dp_replicate*dp_shard*cp*tp*pp = {rep}*{shard}*{cp}*{tp}*{pp} = {shard * others} "
            f"!= world size {world}"
        )

    seq = s["training.seq_len"]
    if seq < 1:
        raise LayoutError(f"training.seq_len must be >= 1, got {seq}")
    if m.n_heads % tp or m.n_kv_heads % tp:
        raise LayoutError(
            f"tensor_parallel_degree {tp} must divide n_heads ({m.n_heads}) and n_kv_heads ({m.n_kv_heads})"
        )
    sp = s["parallelism.enable_sequence_parallel"] and tp > 1
    if cp > 1 and seq % (2 * cp * tp):
        raise LayoutError(f"training.seq_len {seq} must be divisible by 2*cp*tp = {2 * cp * tp} with context parallel")
    if sp and seq % tp:
        raise LayoutError(f"training.seq_len {seq} must be divisible by tp={tp} with sequence parallel")
    if cp > 1 and hw.kind == "cpu":
        # torchtitan's CP shards a FlexAttention BlockMask (distributed/context_parallel/api.py cp_shard asserts one);
        # FlexAttention has no CPU backward in torch 2.13, so CPU runs use SDPA with a dense mask
        raise LayoutError(
            "context_parallel_degree > 1 needs FlexAttention's backward, which torch 2.13 lacks on the CPU"
        )

    components = s["compile.components"]
    compile_on = s["compile.enable"] and "model" in components
    compile_loss = s["compile.enable"] and "loss" in components
    cuda_graphs = not s["training.disable_cuda_graphs"] and hw.kind == "gpu"  # a CPU host has no CUDA graphs
    async_tp = s["compile.enable_async_tensor_parallel"]
    if async_tp and not compile_on:
        raise LayoutError(
            "compile.enable_async_tensor_parallel requires compile.enable with 'model' in compile.components"
        )
    ac = s["activation_checkpoint"]
    budget = s["activation_checkpoint.memory_budget"]
    if ac == "memory_budget" and not compile_on:
        raise LayoutError(
            "activation_checkpoint memory_budget requires compile.enable with 'model' in compile.components"
        )
    if not 0.0 <= budget <= 1.0:
        raise LayoutError(f"activation_checkpoint.memory_budget must be in [0, 1], got {budget}")
    if pp > 1 and cuda_graphs:
        raise LayoutError(
            "pipeline parallel requires training.disable_cuda_graphs: true (CUDA graphs are on by default)"
        )

    # Expert parallel: borrows ranks from dp_shard*cp*tp.
    moe_backend = s["moe.comm_backend"]
    if ep > 1:
        if not m.is_moe:
            raise LayoutError(f"expert_parallel_degree {ep} > 1 but {m.id} has no experts")
        if m.n_experts % ep:
            raise LayoutError(f"expert_parallel_degree {ep} does not divide the {m.n_experts} experts")
        if (shard * cp * tp) % ep:
            raise LayoutError(f"expert_parallel_degree {ep} must divide dp_shard*cp*tp = {shard * cp * tp}")
        if cuda_graphs and moe_backend in ("standard", "deepep"):
            raise LayoutError(
                f"expert parallel with the host-synced '{moe_backend}' dispatcher requires "
                "training.disable_cuda_graphs: true (or the hybridep / minimal_async_ep backend)"
            )
    efsdp = (shard * cp * tp) // ep

    fp8 = s["quantize.linear"]
    fp8_linear = {"none": "none", "float8": "rowwise", "float8_rowwise": "rowwise"}.get(fp8, "tensorwise")
    fp8_grouped = s["quantize.grouped_mm"] == "float8"
    if fp8_grouped and not m.is_moe:
        raise LayoutError(f"quantize.grouped_mm float8 but {m.id} has no grouped experts")

    # Batch arithmetic.
    lbs = s["training.local_batch_size"]
    if lbs < 1:
        raise LayoutError(f"training.local_batch_size must be >= 1, got {lbs}")
    dp = shard * rep
    gbs = s["training.global_batch_size"]
    if gbs == -1:
        gbs = lbs * dp
    if gbs < 1 or gbs % (lbs * dp):
        raise LayoutError(
            f"training.global_batch_size {gbs} is not divisible by local_batch_size*dp = {lbs}*{dp} = {lbs * dp}"
        )
    grad_accum = gbs // (lbs * dp)

    # Pipeline.
    schedule = s["parallelism.pipeline_parallel_schedule"]
    mbs = s["parallelism.pipeline_parallel_microbatch_size"]
    stack = s["sim.stack"]
    if pp > m.n_layers:
        raise LayoutError(f"pipeline_parallel_degree {pp} exceeds the {m.n_layers} layers of {m.id}")
    if pp > 1:
        if mbs < 1:
            raise LayoutError(f"pipeline_parallel_microbatch_size must be >= 1, got {mbs}")
        if lbs % mbs:
            raise LayoutError(
                f"training.local_batch_size {lbs} is not divisible by pipeline_parallel_microbatch_size {mbs}"
            )
        n_mb = lbs // mbs
        single = schedule in SINGLE_STAGE_SCHEDULES
        megatron_v = s["sim.virtual_stages"]
        lps = s["parallelism.pipeline_parallel_layers_per_stage"]
        first_less = s["parallelism.pipeline_parallel_first_stage_less_layers"]
        last_less = s["parallelism.pipeline_parallel_last_stage_less_layers"]
        if megatron_v is not None:
            n_stages = pp * megatron_v
        elif lps is not None:
            if lps < 1:
                raise LayoutError(f"pipeline_parallel_layers_per_stage must be >= 1, got {lps}")
            n_stages = math.ceil((m.n_layers + first_less + last_less) / lps)
            if n_stages % pp:
                raise LayoutError(
                    f"pipeline_parallel_layers_per_stage {lps} gives {n_stages} stages, not divisible by pp={pp}"
                )
        else:
            n_stages = pp * (1 if single else 2)
        v = n_stages // pp
        if single and v != 1:
            raise LayoutError(f"single-stage schedule {schedule} needs exactly 1 stage per rank, got {v}")
        if not single and v < 2:
            raise LayoutError(f"multi-stage schedule {schedule} needs >= 2 stages per rank, got {v}")
        if schedule in V_SCHEDULES and v != 2:
            raise LayoutError(f"{schedule} needs exactly 2 stages per rank (V shape), got {v}")
        if schedule in V_SCHEDULES and compile_on:
            raise LayoutError(f"{schedule} fails with torch.compile (pytorch#161904)")
        if schedule in MB_GE_STAGES and n_mb < n_stages:
            # torch/distributed/pipelining/schedules.py: Schedule1F1B and ScheduleDualPipeV refuse fewer microbatches
            raise LayoutError(
                f"{schedule} needs at least as many microbatches ({n_mb} = training.local_batch_size/microbatch size) "
                f"as stages ({n_stages}; pipeline_parallel_degree {pp} x {v} per rank)"
            )
        if schedule in ("Interleaved1F1B", "InterleavedZeroBubble"):
            rounds = max(1, n_mb // pp)
            if n_mb % rounds:
                raise LayoutError(
                    f"{schedule} needs n_microbatches ({n_mb} = local_batch_size/microbatch_size) to be a multiple "
                    f"of the round count max(1, n_microbatches // pp) = {rounds}"
                )
        stage_layers = _stage_split(m, n_stages, first_less, last_less, megatron=megatron_v is not None)
        if min(stage_layers) < 0 or (megatron_v is not None and min(stage_layers) < 1):
            raise LayoutError(
                f"{n_stages} pipeline stages (pipeline_parallel_degree {pp} x {v} per rank) leave a stage without layers ({stage_layers})"
            )
        ranks = _rank_loads(m, stage_layers, pp, v_shape=schedule in V_SCHEDULES)
    else:
        n_mb, v, n_stages, mbs = 1, 1, 1, lbs
        ranks = _rank_loads(m, [m.n_layers], 1, v_shape=False)

    reshard = s["parallelism.fsdp_reshard_after_forward"]
    reshard_after_forward = reshard == "always" or (reshard == "default" and pp == 1)

    layout = Layout(
        world=world,
        gpus_per_node=devices_per_node,
        dp_shard=shard,
        dp_replicate=rep,
        tp=tp,
        sp=sp,
        cp=cp,
        pp=pp,
        ep=ep,
        efsdp=efsdp,
        schedule=schedule if pp > 1 else "none",
        stages_per_rank=v,
        n_stages=n_stages,
        ranks=ranks,
        microbatch_size=mbs,
        n_microbatches=n_mb,
        local_batch_size=lbs,
        global_batch_size=gbs,
        grad_accum=grad_accum,
        seq_len=seq,
        compile=compile_on,
        async_tp=async_tp and tp > 1,
        cuda_graphs=cuda_graphs,
        ac=ac,
        memory_budget=budget,
        fp8_linear=fp8_linear,
        fp8_grouped=fp8_grouped,
        moe_backend=moe_backend,
        optimizer=s["optimizer.implementation"],
        cpu_offload=s["training.enable_cpu_offload"],
        reshard_after_forward=reshard_after_forward,
        loss_chunks=max(1, s["loss.num_chunks"]),
        stack=stack,
        fp8_all_gather=s["sim.fp8_all_gather"],
        moe_dispatch=s["sim.moe_dispatch"],
        compile_loss=compile_loss,
        param_fp32=s["training.mixed_precision_param"] == "float32",
        gc_freq=max(1, s["training.gc_freq"]),
        log_freq=max(1, s["metrics.log_freq"]),
        profiler=s["profiler.enable_profiling"],
        structured_logging=s["debug.enable_structured_logging"],
    )
    return layout, ignored
