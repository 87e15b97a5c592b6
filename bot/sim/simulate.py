"""The simulator's entry point: ``simulate(model, hardware, nodes, devices_per_node, levers, pinned, seed)``.

A pure function from a workload, a cluster and torchtitan 0.3.0 dotted overrides to a ``SimResult``: outcome
(``ok`` | ``oom`` | ``invalid``), modelled and noisy-measured tokens/s per device, step-time breakdown, per-rank
peak memory, MFU. All numbers are *simulated* (the result says so) and must never be reported as measurements.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from bot.facts.legality import Layout, LayoutError, resolve_layout
from bot.sim.efficiency import DEFAULT_FACTORS, EfficiencyFactors
from bot.sim.flops import flops_per_token
from bot.sim.hardware import get_hardware
from bot.sim.memory import MemoryBreakdown, peak_memory
from bot.sim.noise import SimulatedSeries, measured_throughput, stable_seed, step_throughputs
from bot.sim.steptime import StepBreakdown, step_time
from bot.sim.zoo import ModelSpec, get_model

Outcome = Literal["ok", "oom", "invalid"]


class Breakdown(BaseModel):
    """Seconds per step on the bottleneck rank (simulated)."""

    compute_s: float
    exposed_comm_s: float
    bubble_s: float
    recompute_s: float
    other_s: float


class SimResult(BaseModel):
    """Outcome of one simulated trial. ``label`` is always "simulated"."""

    label: Literal["simulated"] = "simulated"
    outcome: Outcome
    reason: str = ""
    model: str
    hardware: str
    world_size: int
    seed: int
    run_key: str = Field(description="stable key of (model, hardware, cluster, levers, pinned) for the noise stream")
    tokens_per_s_per_device: float = Field(0.0, description="noiseless model value (0 unless ok)")
    tokens_per_s_per_device_measured: float = Field(0.0, description="seeded noisy median a 20-step bench reports")
    step_time_s: float | None = None
    breakdown: Breakdown | None = None
    peak_memory_gib: float | None = None
    memory_capacity_gib: float | None = None
    memory: MemoryBreakdown | None = None
    mfu: float | None = Field(
        None,
        description="flops_per_token * tps / bf16 peak (torchtitan definition; "
        "computed even with float8, where torchtitan prints N/A)",
    )
    flops_per_token: float | None = None
    tokens_per_step: int | None = None
    layout: dict[str, Any] | None = None
    ignored_levers: list[str] = Field(default_factory=list, description="levers the simulator does not model")
    notes: list[str] = Field(default_factory=list)

    def step_tps(self, n_steps: int, seed: int | None = None) -> SimulatedSeries:
        """Per-step noisy tokens/s/device for ``n_steps`` steps, deterministic in (seed, run_key) (simulated)."""
        if self.outcome != "ok":
            return SimulatedSeries([0.0] * n_steps)
        return step_throughputs(
            self.tokens_per_s_per_device, n_steps, self.seed if seed is None else seed, self.run_key
        )


def _notes(lay: Layout) -> list[str]:
    notes = []
    if lay.pp > 1 and lay.n_microbatches < lay.pp:
        notes.append(f"n_microbatches {lay.n_microbatches} < pp {lay.pp}: large pipeline bubble (torchtitan warns)")
    if lay.schedule in ("InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV") and lay.ac != "none":
        notes.append("zero-bubble schedule with activation checkpointing replays recompute (torchtitan #773)")
    if lay.tp > lay.gpus_per_node:
        notes.append(f"tp {lay.tp} spans nodes: TP collectives run over the NIC")
    if lay.fp8_linear != "none" and not lay.compile:
        notes.append("float8 without torch.compile keeps only part of its speedup")
    if lay.cpu_offload:
        notes.append("CPU offload: optimizer step on CPU and host<->device copies every all-gather")
    return notes


def evaluate(
    model: str | ModelSpec,
    hardware: str,
    nodes: int,
    devices_per_node: int,
    levers: dict[str, Any],
    pinned: dict[str, Any],
    seed: int,
    factors: EfficiencyFactors = DEFAULT_FACTORS,
    check_memory: bool = True,
) -> SimResult:
    """``simulate`` with explicit efficiency factors; ``check_memory=False`` reports speed even when it would OOM."""
    m = model if isinstance(model, ModelSpec) else get_model(model)
    model = m.id
    hw = get_hardware(hardware)
    world = nodes * devices_per_node
    key = str(stable_seed(model, hardware, nodes, devices_per_node, levers, pinned))
    base = {"model": model, "hardware": hardware, "world_size": world, "seed": seed, "run_key": key}
    try:
        lay, ignored = resolve_layout(m, hw, nodes, devices_per_node, levers, pinned)
    except LayoutError as exc:
        return SimResult(outcome="invalid", reason=str(exc), **base)
    mem = peak_memory(m, lay, factors)
    capacity = hw.hbm_gib
    common = {
        **base,
        "peak_memory_gib": mem.total,
        "memory_capacity_gib": capacity,
        "memory": mem,
        "layout": lay.model_dump(exclude={"ranks"}),
        "ignored_levers": ignored,
        "notes": _notes(lay),
        "tokens_per_step": lay.global_batch_size * lay.seq_len,
    }
    fpt = flops_per_token(m, lay.seq_len).total
    if check_memory and mem.total > capacity:
        return SimResult(
            outcome="oom",
            flops_per_token=fpt,
            reason=f"peak memory {mem.total:.1f} GiB on pipeline rank {mem.rank} exceeds {capacity:.1f} GiB",
            **common,
        )
    st: StepBreakdown = step_time(m, hw, lay, factors)
    step = st.step_time_s
    tps = lay.global_batch_size * lay.seq_len / (step * world)
    return SimResult(
        outcome="ok",
        tokens_per_s_per_device=tps,
        tokens_per_s_per_device_measured=measured_throughput(tps, seed, key),
        step_time_s=step,
        breakdown=Breakdown(**st.model_dump()),
        flops_per_token=fpt,
        mfu=fpt * tps / (hw.bf16_tflops * 1e12),
        **common,
    )


def simulate(
    model: str | ModelSpec,
    hardware: str,
    nodes: int,
    devices_per_node: int,
    levers: dict[str, object],
    pinned: dict[str, object],
    seed: int,
) -> SimResult:
    """Simulate one benchmark run of a torchtitan recipe (pure, deterministic in ``seed``; results are simulated).

    ``model``: a zoo id or the workload's spec (:func:`bot.sim.models.model_for`). ``levers`` and ``pinned`` use torchtitan 0.3.0 dotted names (missing ones take torchtitan defaults);
    see ``bot.facts.legality.LEVER_DEFAULTS``. Unknown names are listed in ``ignored_levers``.
    """
    return evaluate(model, hardware, nodes, devices_per_node, dict(levers), dict(pinned), seed)
