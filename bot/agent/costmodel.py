"""A first-principles cost model of one training step -- NOT the calibrated simulator (an import-linter contract
keeps this module from importing ``bot.sim`` beyond the model and hardware facts).

What a cost-model tuner ranks layouts with, from textbook formulas and datasheet figures, no fitted factor: compute
(FLOPs per token, recompute, a GEMM roofline at GEMM_EFF), communication (α-β, ring collectives at LINK_EFF; TP and
EP exposed, EP hidden under DualPipeV, FSDP and CP up to compute), the pipeline bubble and memory (FSDP2 states,
Korthikanti activations, MEMORY_MARGIN). Formulas and sources: docs/agent-evidence.md, docs/reference/performance-model.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from bot.core import levers as catalog
from bot.core.recipe import Recipe
from bot.core.records import Scalar
from bot.sim.hardware import HardwareSpec, get_hardware
from bot.sim.models import model_for
from bot.sim.zoo import ModelSpec

GIB = 2.0**30
TP, PP, CP, EP = catalog.PARALLEL_DEGREES
LBS, MB, SCHED, AC = (
    "training.local_batch_size",
    "parallelism.pipeline_parallel_microbatch_size",
    "parallelism.pipeline_parallel_schedule",
    "activation_checkpoint",
)
GEMM_EFF = 0.5  # llm-analysis: flops efficiency <= 0.5 for training (docs/reference/performance-model.md#46-open-calculators-and-simulators-with-claimed-accuracy)
LINK_EFF = 0.8  # bus bandwidth reached by large NCCL collectives relative to the link (nccl-tests PERFORMANCE.md)
ALPHA_S = 20e-6  # per-collective latency, order of NCCL ring latency at these scales (alpha of the α-β model)
MEMORY_MARGIN = 0.10  # Primus memory pre-filter margin (docs/reference/performance-model.md#11-estimate-first-then-run)
ZERO_BUBBLE = ("InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV")
MULTI_STAGE = ("Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV")
# all forwards of a flush before any backward: every microbatch's activations are held at once (torch's ScheduleGPipe,
# ScheduleLoopedBFS; Narayanan et al. 2021 section 2.2: 1F1B bounds the in-flight microbatches by p, GPipe does not)
EVERY_MICROBATCH = ("GPipe", "LoopedBFS")
# a forward and a backward chunk run together, each one's EP all-to-all under the other's computation (DeepSeek-V3
# technical report §3.2.1, "DualPipe"; torchtitan's DualPipeV is its V-shaped two-stages-per-rank form)
OVERLAPS_EP_COMM = ("DualPipeV",)


@dataclass(frozen=True)
class Shape:
    """The levers the cost model has terms for."""

    tp: int
    pp: int
    cp: int
    ep: int
    local_batch: int
    microbatch: int  # PP microbatch size (ignored without PP)
    schedule: str
    ac: str  # none | selective | full | memory_budget
    sp: bool = True
    async_tp: bool = False
    reshard: str = "default"
    loss_chunks: int = 8


@dataclass(frozen=True)
class Estimate:
    step_s: float
    compute_s: float
    comm_s: float
    bubble_s: float
    memory_gib: float
    fits: bool

    @property
    def summary(self) -> str:
        return (
            f"estimated step {self.step_s:.2f}s (compute {self.compute_s:.2f}, exposed comm {self.comm_s:.2f}, "
            f"bubble {self.bubble_s:.2f}), memory {self.memory_gib:.0f} GiB"
        )


def _attn_params(m: ModelSpec) -> float:
    return m.hidden * m.q_dim + 2 * m.hidden * m.kv_dim + m.q_dim * m.hidden


def counts(m: ModelSpec) -> tuple[float, float, float, float]:
    """(dense params per model excluding routed experts, routed-expert params, active params per token, layers)."""
    attn = _attn_params(m)
    dense_ffn = 3 * m.hidden * m.ffn_dense
    expert = 3 * m.hidden * m.ffn_expert
    shared = 3 * m.hidden * m.ffn_shared * m.n_shared_experts
    router = m.hidden * m.n_experts
    n_moe = m.n_layers - m.n_dense_layers
    embed = m.vocab * m.hidden * (1 if m.tied_embeddings else 2)
    dense = m.n_layers * attn + m.n_dense_layers * dense_ffn + n_moe * (shared + router) + embed
    routed = n_moe * m.n_experts * expert
    active = dense - m.vocab * m.hidden + n_moe * m.top_k * expert  # the input embedding does no matmul
    return dense, routed, active, float(m.n_layers)


def bubble_fraction(pp: int, schedule: str, microbatches: int) -> float:
    """The pipeline bubble as a fraction of the busy time (docs/reference/performance-model.md#43-pipeline-bubbles):
    (p-1)/(v·m) for p stages, v stages per rank (2 for the multi-stage schedules, torchtitan's default) and m
    microbatches per flush; a third of that for the zero-bubble family (ZB-H1 ≈ 1/3 of 1F1B); 0 without pipeline
    parallelism."""
    if pp <= 1:
        return 0.0
    frac = (pp - 1) / ((2 if schedule in MULTI_STAGE else 1) * max(microbatches, 1))
    return frac / 3 if schedule in ZERO_BUBBLE else frac


def dualpipe_exposed(comm: float, compute: float, pp: int, microbatches: int) -> float:
    """The EP all-to-all left exposed under DualPipeV: a forward and a backward chunk that run together hide each
    other's all-to-all up to their computation (DeepSeek-V3 report §3.2.1), but the warm-up forwards and cool-down
    backwards run unpaired -- about p of the m microbatches' chunks on a rank (the report's Figure 5) -- and expose
    theirs in full."""
    unpaired = min(1.0, pp / max(microbatches, 1))
    return comm * unpaired + max(0.0, (comm - compute) * (1.0 - unpaired))


def _coll(bytes_: float, n: int, bw_gbs: float) -> float:
    """One ring collective (all-gather / reduce-scatter / all-to-all) over n ranks: α + (n-1)/n·M / BW."""
    if n <= 1 or bytes_ <= 0:
        return 0.0
    return ALPHA_S + (n - 1) / n * bytes_ / (bw_gbs * 1e9 * LINK_EFF)


def ep_layer_comm(m: ModelSpec, hw: HardwareSpec, s: Shape, tokens: float) -> float:
    """One MoE layer's EP all-to-alls (dispatch + combine, forward and backward) for a microbatch of ``tokens`` per
    TP group. EP borrows its ranks from FSDP and TP (dp_shard*cp*tp = efsdp*ep, TP innermost), so a group is ep
    consecutive ranks -- NVLink while it fits a node -- and each TP rank dispatches a different 1/tp of the tokens
    (torchtitan's ReordererSequenceParallel); 0 for a dense model or EP 1."""
    if m.n_experts <= 0 or s.ep <= 1:
        return 0.0
    bw = hw.nvlink_gbs if s.ep <= hw.gpus_per_node else hw.internode_gbs
    return 4 * _coll(tokens / s.tp * m.top_k * m.hidden * 2, s.ep, bw)


def estimate(m: ModelSpec, hw: HardwareSpec, world: int, gbs: int, seq: int, s: Shape) -> Estimate:
    """The estimated step time and peak memory of one layout (no legality check: callers filter first)."""
    dp = max(world // (s.tp * s.pp * s.cp), 1)
    pp = s.pp
    mb = s.microbatch if pp > 1 else s.local_batch
    m_flush = max(s.local_batch // mb, 1)  # microbatches per pipeline flush
    accum = max(gbs // (s.local_batch * dp), 1)
    tokens_mb = mb * seq / s.cp  # tokens per microbatch on one rank
    dense, routed, active, layers = counts(m)
    moe = m.n_experts > 0
    # ---- compute
    fpt = 6 * active + 12 * layers * m.q_dim * seq
    recompute = {"none": 0.0, "selective": 1 / 6, "memory_budget": 1 / 6, "full": 1 / 3}.get(s.ac, 1 / 3)
    width = (m.ffn_expert if moe else m.ffn_dense) / (1 if moe else s.tp)
    # tokens one expert (or the FFN) sees: with EP, each TP rank routes its own 1/tp of the tokens (below)
    gm = tokens_mb * (m.top_k / max(m.n_experts, 1) * s.ep / s.tp if moe else 1.0)
    k, n = m.hidden, max(width, 1)
    intensity = 2 * gm * n * k / (2 * (gm * k + k * n + gm * n))  # FLOP per byte (bf16)
    flops = min(hw.bf16_tflops * 1e12, intensity * hw.hbm_tbs * 1e12) * GEMM_EFF
    compute = fpt * gbs * seq / world / flops * (1 + recompute)
    # ---- communication (per step, on one rank)
    intra = hw.nvlink_gbs
    inter = hw.internode_gbs
    tp_bw = intra if s.tp <= hw.gpus_per_node else inter
    layers_rank = layers / pp
    n_mb = accum * m_flush
    tp_msgs = 8 + (4 if s.ac == "full" else 0)
    tp_comm = n_mb * layers_rank * tp_msgs * _coll(tokens_mb * m.hidden * 2, s.tp, tp_bw)
    if s.async_tp:
        tp_comm *= 0.5  # async TP overlaps the collectives with the matmuls they feed (torchtitan AsyncTP)
    ep_comm = n_mb * ep_layer_comm(m, hw, s, tokens_mb) * (m.n_layers - m.n_dense_layers) / pp
    if pp > 1 and s.schedule in OVERLAPS_EP_COMM:
        ep_comm = dualpipe_exposed(ep_comm, compute, pp, m_flush)
    shard = dp * s.cp
    spans_nodes = s.tp * s.cp * dp > hw.gpus_per_node or pp == 1 and world > hw.gpus_per_node
    dp_bw = inter if spans_nodes else intra
    params_rank = (dense / s.tp + routed / s.ep) / pp
    syncs = 1 if pp > 1 else accum  # FSDP2 reduces every microstep without PP; once per step under PP
    gathers = 1 if (pp > 1 or s.reshard == "never") else 2
    fsdp = syncs * (gathers * _coll(2 * params_rank, shard, dp_bw) + _coll(4 * params_rank, shard, dp_bw))
    fsdp_exposed = max(0.0, fsdp - compute) + fsdp / max(layers_rank, 1)  # the first gather and last reduce
    cp_comm = 0.0
    if s.cp > 1:
        kv = 2 * tokens_mb * m.kv_dim * 2
        cp_comm = (
            n_mb * layers_rank * 3 * (s.cp - 1) * _coll(kv, 2, intra if s.cp * s.tp <= hw.gpus_per_node else inter)
        )
        attn = compute * (12 * layers * m.q_dim * seq) / fpt
        cp_comm = max(0.0, cp_comm - attn)
    v = 2 if s.schedule in MULTI_STAGE else 1
    pp_comm = 0.0
    if pp > 1:
        pp_comm = n_mb * 2 * v * _coll(tokens_mb * m.hidden * 2 / (s.tp if s.sp else 1), 2, inter)
    comm = tp_comm + ep_comm + fsdp_exposed + cp_comm + pp_comm
    # ---- pipeline bubble
    bubble = bubble_fraction(pp, s.schedule, m_flush) * (compute + tp_comm + ep_comm)
    step = compute + comm + bubble
    # ---- memory
    efsdp = max(dp * s.cp * s.tp // s.ep, 1) if moe else shard
    states = 16 * ((dense / s.tp) / pp / shard + (routed / s.ep) / pp / efsdp)
    layer_u = (
        _attn_params(m) + (3 * m.hidden * m.ffn_dense if not moe else m.n_experts * 3 * m.hidden * m.ffn_expert / s.ep)
    ) / s.tp
    held = 2 * params_rank if (pp > 1 or s.reshard == "never") else 2 * 2 * layer_u
    grads = 4 * params_rank if pp > 1 else 0.0
    f_width = (m.top_k * m.ffn_expert + m.n_shared_experts * m.ffn_shared) if moe else m.ffn_dense
    per_tok_none = m.hidden * (18 + 6 * f_width / m.hidden) / s.tp
    per_tok = {"none": per_tok_none, "selective": per_tok_none / 2, "memory_budget": per_tok_none / 2}.get(
        s.ac, 2 * m.hidden / s.tp
    )
    interleave = 1 + (pp - 1) / (pp * v) if v > 1 else 1.0
    inflight = (m_flush if s.schedule in EVERY_MICROBATCH else min(m_flush, pp) * interleave) if pp > 1 else 1.0
    acts = tokens_mb * per_tok * 2 * layers_rank * inflight  # bf16
    acts += tokens_mb * per_tok_none * 2 * (2 if s.ac == "full" else 1)  # the layer being back-propagated
    logits = 6 * tokens_mb * m.vocab / s.tp / max(s.loss_chunks, 1)
    mem = (states + held + grads + acts + logits) * (1 + MEMORY_MARGIN) / GIB
    fits = mem <= hw.hbm_gib
    return Estimate(
        step_s=step, compute_s=compute, comm_s=comm, bubble_s=bubble, memory_gib=mem, fits=fits and math.isfinite(step)
    )


def shape_of(eff: dict[str, Scalar]) -> Shape:
    """The cost model's view of a layout: its modelled levers, from effective lever values (defaults filled in)."""
    return Shape(
        tp=int(eff[TP]),
        pp=int(eff[PP]),
        cp=int(eff[CP]),
        ep=int(eff[EP]),
        local_batch=int(eff[LBS]),
        microbatch=int(eff[MB]),
        schedule=str(eff[SCHED]),
        ac=str(eff[AC]),
        sp=bool(eff["parallelism.enable_sequence_parallel"]),
        async_tp=bool(eff["compile.enable_async_tensor_parallel"]),
        reshard=str(eff["parallelism.fsdp_reshard_after_forward"]),
        loss_chunks=int(eff["loss.num_chunks"]),
    )


def global_batch(recipe: Recipe, levers: dict[str, Scalar]) -> int:
    """The sequences one step of ``recipe`` trains with ``levers``: the pinned global batch, else local batch x DP."""
    eff = catalog.effective(levers)
    dp = recipe.devices // (int(eff[TP]) * int(eff[PP]) * int(eff[CP]))
    return int(recipe.pinned.get("training.global_batch_size", 0) or 0) or int(eff[LBS]) * max(dp, 1)


def estimate_of(recipe: Recipe, levers: dict[str, Scalar]) -> Estimate:
    """The cost model's estimate for ``recipe`` run with ``levers`` (KeyError: a model or hardware it does not know)."""
    eff = catalog.effective(levers)
    m, hw = model_for(recipe.workload), get_hardware(recipe.cluster.hardware)
    return estimate(
        m,
        hw,
        recipe.devices,
        global_batch(recipe, levers),
        int(recipe.pinned.get("training.seq_len", 2048)),
        shape_of(eff),
    )
