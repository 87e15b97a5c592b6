"""Step time of one training step on the slowest pipeline rank: compute, recompute, exposed communication, bubble.

Per microbatch, each rank runs its share of the linear, expert, attention and output-head FLOPs (``bot.sim.flops``)
at ``peak x hw_eff x stack x efficiency`` where GEMM efficiency falls for small token counts (small microbatches,
few tokens per expert) and thin TP-split weights; attention runs on causal FLOPs (half the counted ones), with
its own hardware multiplier where the GEMM-fitted one does not carry over (``attn_hw_eff``: B200); pointwise
work is HBM-bound and mostly fused away by torch.compile. Recompute adds a forward (full AC), every second forward
GEMM (per-op SAC, torchtitan's policy), or a budget-dependent share. TP collectives sit on the critical path unless
async TP hides part of them; EP all-to-alls are exposed (the default dispatcher also syncs with the host); FSDP
collectives overlap with compute except for what does not fit and the first/last unit. Megatron-Bridge 25.11's
dropless host-synced dispatch (``sim.moe_dispatch``) puts a per-routed-token floor under each MoE layer's EP
time (``dropless_dispatch_floor``). A pipeline step is
``(m + bubble) * T_mb`` on the slowest rank; without PP a microstep is one microbatch. Gradient accumulation repeats
microsteps, each with its own FSDP traffic (and, under PP, its own fill and drain).
"""

from __future__ import annotations

import math

from pydantic import BaseModel

from bot.facts.legality import Layout
from bot.sim.comm import all_gather, all_reduce, all_to_all, groups, p2p
from bot.sim.efficiency import EfficiencyFactors
from bot.sim.flops import attention_flops_per_token_per_layer, param_counts
from bot.sim.hardware import HardwareSpec
from bot.sim.memory import rank_params
from bot.sim.pipeline import bubble_units
from bot.sim.zoo import ModelSpec

CPU_ADAM_PARAMS_PER_S = 3e8  # CPU AdamW throughput per rank with enable_cpu_offload (FSDP2 CPUOffloadPolicy)
PCIE_BYTES_PER_S = 20e9  # effective host<->device copy bandwidth per GPU under offload
OPTIMIZER_SLOWDOWN = {"fused": 1.0, "foreach": 1.4, "for-loop": 6.0, "fused_opt_states_bf16": 0.8}


class StepBreakdown(BaseModel):
    """Seconds per training step on the bottleneck rank; the parts sum to ``step_time_s``."""

    compute_s: float
    exposed_comm_s: float
    bubble_s: float
    recompute_s: float
    other_s: float

    @property
    def step_time_s(self) -> float:
        return self.compute_s + self.exposed_comm_s + self.bubble_s + self.recompute_s + self.other_s


class MicrobatchTime(BaseModel):
    """One microbatch forward+backward through one pipeline rank's layers."""

    compute: float
    forward_compute: float
    recompute: float
    tp: float
    ep: float
    cp: float
    pp: float

    @property
    def total(self) -> float:
        return self.compute + self.recompute + self.tp + self.ep + self.cp + self.pp


def _gemm_eff(tokens: float, dim: float, f: EfficiencyFactors) -> float:
    return f.gemm_eff * tokens / (tokens + f.gemm_m0) * dim / (dim + f.gemm_d0)


def _fp8_speedup(recipe: str, lay: Layout, f: EfficiencyFactors) -> float:
    if recipe == "none":
        return 1.0
    s = f.fp8_tensorwise if recipe == "tensorwise" else f.fp8_rowwise
    return s if lay.compile else 1.0 + (s - 1.0) * f.fp8_eager


def attn_hw_eff(hw: HardwareSpec, f: EfficiencyFactors) -> float:
    """Achieved-efficiency multiplier of the attention kernel on ``hw``, relative to a 700 W H100.

    ``f.hw_eff`` is fitted on GEMM-dominated rows. It carries over to attention where it stands for a clock (the
    500 W H100 96GB), but not where it stands for faster tensor cores: from H100 to B200 the bf16 tensor-core
    rate grows 2.25x while the exponential units and shared-memory bandwidth that bound attention do not
    (``f.attn_hw_eff``), so such hardware keeps its own entry there.
    """
    return f.attn_hw_eff.get(hw.id, f.hw_eff.get(hw.id, 1.0))


def dropless_dispatch_floor(m: ModelSpec, lay: Layout, f: EfficiencyFactors, tokens_on_rank: float) -> float:
    """Seconds one MoE layer's dispatch takes at least (fwd+bwd) on a dropless, host-synchronised dispatcher.

    Modelling assumption: each routed token copy (``tokens_on_rank * top_k``) costs ``f.dropless_dispatch_s``
    of serialised dispatch work (host sync on the per-expert counts, variable-size permute, padding and per-expert
    casts); the layer's dispatch phase lasts the longer of that and its modelled all-to-all, so a layout whose
    all-to-all is already slow (large EP across nodes) pays nothing extra. Zero unless ``sim.moe_dispatch`` is
    ``dropless-hostsync``.
    """
    if lay.moe_dispatch != "dropless-hostsync" or lay.ep <= 1:
        return 0.0
    return tokens_on_rank * m.top_k * f.dropless_dispatch_s


def microbatch_time(m: ModelSpec, hw: HardwareSpec, lay: Layout, f: EfficiencyFactors, rank: int) -> MicrobatchTime:
    load = lay.ranks[rank]
    p = param_counts(m)
    g = groups(lay, hw, f)
    h, t, c = m.hidden, lay.tp, lay.cp
    tokens = lay.microbatch_size * lay.seq_len  # tokens of the microbatch (whole DP replica)
    share = t * c  # ranks sharing that microbatch's work inside a stage
    peak = hw.bf16_tflops * 1e12 * f.hw_eff.get(hw.id, 1.0) * f.stack.get(lay.stack, 1.0)
    if lay.param_fp32:
        peak /= 2.0  # fp32 compute dtype: TF32 tensor cores at half the bf16 rate
    n_layers = load.layers

    # Linear GEMMs: M = the microbatch's tokens on this CP rank (SP all-gathers the sequence), thinnest dim after TP.
    lin_flops = 6.0 * tokens * (load.dense_layers * p.dense_layer() + load.moe_layers * p.moe_layer_nonexpert())
    lin_dim = min(h, m.q_dim / t, (m.ffn_dense or m.q_dim) / t)
    t_lin = lin_flops / share / (peak * _gemm_eff(tokens / c, lin_dim, f)) / _fp8_speedup(lay.fp8_linear, lay, f)
    hbm = hw.hbm_tbs * 1e12 * f.hbm_eff * f.stack.get(lay.stack, 1.0)
    cast_scale = f.fp8_cast_bytes * (f.compile_elem if lay.compile else 1.0) / hbm
    if lay.fp8_linear != "none":
        # Float8 casts of GEMM inputs and grad-outputs (and their transposes for wgrad); full-width tensors are
        # all-gathered on every TP rank, so casting does not shrink with TP while the GEMMs do.
        attn_w = 2 * h + (2 * m.q_dim + 2 * m.kv_dim) / t
        ffn_w = 2 * h + 3 * m.ffn_dense / t
        shared_w = (2 * h + 3 * m.n_shared_experts * m.ffn_shared / t) if m.n_shared_experts else 0.0
        width = load.dense_layers * (attn_w + ffn_w) + load.moe_layers * (attn_w + shared_w)
        t_lin += (tokens / c) * 2 * width * cast_scale
    # Routed experts: grouped GEMMs with M = tokens routed to each local expert.
    t_exp = 0.0
    if load.moe_layers:
        exp_flops = 6.0 * tokens * load.moe_layers * m.top_k * p.expert_each
        per_expert = tokens / share * m.top_k * lay.ep / m.n_experts
        width = min(h, m.ffn_expert)
        eff = f.gemm_eff * per_expert / (per_expert + f.gemm_m0) * width / (width + f.grouped_d0)
        t_exp = exp_flops / share / (peak * eff) / _fp8_speedup("tensorwise" if lay.fp8_grouped else "none", lay, f)
        if lay.fp8_grouped:
            routed_w = load.moe_layers * m.top_k * (2 * h + 3 * m.ffn_expert)
            t_exp += tokens / share * 2 * routed_w * cast_scale
    # Attention: torchtitan counts full QK^T/AV; a causal kernel does half of it.
    attn_flops = tokens * n_layers * attention_flops_per_token_per_layer(m, lay.seq_len)
    attn_eff = f.attn_stack.get(lay.stack, f.attn_eff) / (1.0 + f.cp_attn_penalty * math.log2(c))
    peak_attn = hw.bf16_tflops * 1e12 * attn_hw_eff(hw, f) / (3.0 if lay.param_fp32 else 1.0)
    t_attn = 0.5 * attn_flops / share / (peak_attn * attn_eff)
    t_head = 0.0
    if load.has_head:
        t_head = 6.0 * tokens * p.head / share / (peak * _gemm_eff(tokens / c, min(h, m.vocab / t), f))
    # Pointwise / memory-bound work (norms, RoPE, SwiGLU, casts, residuals, MoE permutes).
    t_sp = t if lay.sp else 1
    width_dense = h / t_sp + (m.ffn_dense + m.q_dim) / t
    width_moe = h / t_sp + (m.top_k * (m.ffn_expert + h) + m.n_shared_experts * m.ffn_shared + m.q_dim) / t
    elem_bytes = 2.0 * f.elem_passes * (load.dense_layers * width_dense + load.moe_layers * width_moe)
    elem_bytes *= f.compile_elem if lay.compile else 1.0
    t_elem = (tokens / c) * elem_bytes / (hw.hbm_tbs * 1e12 * f.hbm_eff) / f.stack.get(lay.stack, 1.0)

    compute = t_lin + t_exp + t_attn + t_head + t_elem
    fwd = compute / 3.0
    gemm_fwd = (t_lin + t_exp) / 3.0
    if lay.ac == "full":
        recompute = (t_lin + t_exp + t_attn) / 3.0 + t_elem / 3.0
    elif lay.ac == "selective":
        recompute = f.sac_recompute * gemm_fwd + t_elem / 6.0
    elif lay.ac == "memory_budget":
        recompute = (1.0 - lay.memory_budget) ** 2 * ((t_lin + t_exp + t_attn) / 3.0 + t_elem / 3.0)
    else:
        recompute = 0.0
    if lay.schedule in ("InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV") and lay.ac != "none":
        recompute *= 2.0  # split backward (B / W) replays the checkpointed forward twice (torchtitan #773)

    # TP: 2 all-gathers + 2 reduce-scatters (or 2 all-reduces) of the residual stream per layer per direction.
    fwd_colls = 4.0
    n_colls = 2 * fwd_colls + (fwd_colls if lay.ac == "full" else fwd_colls / 2 if lay.ac == "selective" else 0.0)
    act = 4.0 if lay.param_fp32 else 2.0  # bytes per activation element on the wire
    tp_time = n_layers * n_colls * all_gather(tokens / c * h * act, g["tp"])
    tp_time *= (1.0 - f.async_tp_hidden) if lay.async_tp else 1.0

    # EP: dispatch + combine forward and backward (+ forward again under full AC); SAC saves all-to-all outputs.
    ep_time = 0.0
    if load.moe_layers and lay.ep > 1:
        n_a2a = 4 + (2 if lay.ac == "full" else 0)
        fast = lay.moe_backend in ("deepep", "hybridep")
        one = all_to_all(tokens / share * m.top_k * h * act, lay, hw, f, f.fast_ep_bw if fast else 1.0)
        one += f.ep_sync_s if lay.moe_backend == "standard" else 0.0
        ep_time = load.moe_layers * n_a2a * one
        ep_time *= 1.0 - f.ep_overlap.get(lay.stack, 0.0)
        ep_time *= 0.3 if lay.schedule == "DualPipeV" else 1.0  # DualPipe overlaps EP with the other direction
        ep_time = max(ep_time, load.moe_layers * dropless_dispatch_floor(m, lay, f, tokens / share))

    # CP: all-gather K,V forward; all-gather again + reduce-scatter dK,dV backward (+1 under full AC).
    cp_time = 0.0
    if c > 1:
        kv_bytes = tokens * 2 * (m.kv_dim / t) * act
        n = 3 + (1 if lay.ac == "full" else 0)
        cp_time = n_layers * n * all_gather(kv_bytes, g["cp"]) * f.cp_exposed

    # PP: activation forward and gradient backward across each of the rank's stage boundaries.
    pp_time = 0.0
    if lay.pp > 1:
        act_bytes = tokens / c * h * act / t_sp
        pp_time = 2 * lay.stages_per_rank * p2p(act_bytes, g["pp"]) * f.pp_p2p_exposed

    return MicrobatchTime(
        compute=compute, forward_compute=fwd, recompute=recompute, tp=tp_time, ep=ep_time, cp=cp_time, pp=pp_time
    )


def _fsdp_times(m: ModelSpec, hw: HardwareSpec, lay: Layout, f: EfficiencyFactors, rank: int) -> tuple[float, float]:
    """(all-gather, reduce-scatter) seconds for one full pass over the rank's FSDP units."""
    g = groups(lay, hw, f)
    rp = rank_params(m, lay, lay.ranks[rank])
    ag_bytes = 1.0 if lay.fp8_all_gather else (4.0 if lay.param_fp32 else 2.0)
    ag = all_gather(ag_bytes * rp.dense_unsharded, g["fsdp"]) + all_gather(2.0 * rp.expert_unsharded, g["efsdp"])
    rs = all_gather(4.0 * rp.dense_unsharded, g["fsdp"]) + all_gather(4.0 * rp.expert_unsharded, g["efsdp"])
    if lay.dp_replicate > 1:
        rs += all_reduce(4.0 * rp.local, g["dp_replicate"])
    if lay.cpu_offload:
        ag += 4.0 * rp.local / PCIE_BYTES_PER_S
        rs += 4.0 * rp.local / PCIE_BYTES_PER_S
    return ag, rs


def step_time(m: ModelSpec, hw: HardwareSpec, lay: Layout, f: EfficiencyFactors) -> StepBreakdown:
    """Seconds per optimizer step, split into compute / recompute / exposed comm / bubble / other."""
    times = [microbatch_time(m, hw, lay, f, r) for r in range(lay.pp)]
    r = max(range(lay.pp), key=lambda i: times[i].total)
    mb = times[r]
    m_count = lay.n_microbatches
    bubble = bubble_units(lay) * mb.total

    # FSDP: per microstep. Without PP: all-gather in forward (and again in backward when resharding) and a
    # reduce-scatter in backward. With PP: one all-gather and one reduce-scatter per pipeline step.
    ag, rs = _fsdp_times(m, hw, lay, f, r)
    units = lay.ranks[r].layers + 1
    fwd = mb.forward_compute
    bwd = mb.compute + mb.recompute - mb.forward_compute
    if lay.pp == 1:
        ag_bwd = ag if lay.reshard_after_forward else 0.0
        fsdp = max(0.0, ag - f.fsdp_overlap * fwd) + max(0.0, ag_bwd + rs - f.fsdp_overlap * bwd)
    elif lay.reshard_after_forward:
        # PP with resharding: every microbatch re-gathers the stage in forward and again in backward.
        busy = m_count * (mb.compute + mb.recompute)
        fsdp = max(0.0, 2 * m_count * ag - f.fsdp_overlap * busy) + max(0.0, rs - f.fsdp_overlap * bwd)
    else:
        fsdp = max(0.0, ag - f.fsdp_overlap * fwd) + max(0.0, rs - f.fsdp_overlap * bwd)
    # Overlapped collectives are not free: NCCL kernels take SMs and HBM bandwidth from compute.
    n_ag = 2 * m_count if (lay.pp > 1 and lay.reshard_after_forward) else (2 if lay.reshard_after_forward else 1)
    hidden = max(0.0, n_ag * ag + rs - fsdp)
    fsdp += f.overlap_interference * hidden
    fsdp += (ag + rs) / units  # first all-gather and last reduce-scatter cannot overlap

    # Kernel launches without CUDA graphs: exposed when the CPU is slower than the GPU.
    launch = 0.0
    if not lay.cuda_graphs:
        cpu = lay.ranks[r].layers * f.kernels_per_layer * f.launch_s * (0.4 if lay.compile else 1.0)
        launch = max(0.0, cpu - mb.total) * m_count

    ga = lay.grad_accum
    rp = rank_params(m, lay, lay.ranks[r])
    if lay.cpu_offload:
        optimizer = rp.local / CPU_ADAM_PARAMS_PER_S
    else:
        optimizer = rp.local * 28.0 / (hw.hbm_tbs * 1e12 * f.hbm_eff) * OPTIMIZER_SLOWDOWN[lay.optimizer]

    # Housekeeping: GC pauses (~50 ms every gc_freq steps), logging syncs (~20 ms every log_freq steps),
    # profiler trace capture and structured per-rank logging as a share of the step.
    busy = ga * (m_count * mb.total + bubble)
    housekeeping = 0.05 / lay.gc_freq + 0.02 / lay.log_freq
    housekeeping += busy * ((0.02 if lay.profiler else 0.0) + (0.003 if lay.structured_logging else 0.0))

    return StepBreakdown(
        compute_s=ga * m_count * mb.compute,
        recompute_s=ga * m_count * mb.recompute,
        exposed_comm_s=ga * (m_count * (mb.tp + mb.ep + mb.cp + mb.pp) + fsdp),
        bubble_s=ga * bubble,
        other_s=ga * launch + optimizer + f.step_fixed_s + housekeeping,
    )
