"""Per-rank peak memory (docs/reference/performance-model.md §4.2): model states, unsharded parameters, activations, logits, overhead.

Model states under torchtitan FSDP2 are fp32 parameters + fp32 gradients + two fp32 AdamW moments = 16 B per
parameter (12 B counted as states, the 4 B of gradients under "grads"), sharded over the FSDP group (dense weights: ``dp_shard*cp`` after TP; routed experts: ``efsdp`` after
EP). Unsharded bf16 weights live for the whole stage when FSDP does not reshard after forward (the default under
PP), otherwise for about two FSDP units (the current and the prefetched layer). Under PP the gradients of all
microbatches accumulate unsharded (in the fp32 reduce dtype) until the reduce-scatter at the end of the pipeline
step.

Activations per token per layer are counted in bf16 elements from the tensors autograd saves in a SwiGLU / GQA /
MoE block with flash attention (no s^2 score matrix), then reduced by the activation-checkpointing mode; the
pipeline schedule decides how many microbatch-chunks are in flight (``bot.sim.pipeline``). Framework buffers and
fragmentation are a fixed overhead plus a proportional margin (the Megatron estimator and Primus make the same
allowance, docs/reference/performance-model.md §4.2).
"""

from __future__ import annotations

from pydantic import BaseModel

from bot.facts.activation import layer_elems_per_token
from bot.facts.legality import Layout, StageLoad
from bot.sim.efficiency import EfficiencyFactors
from bot.sim.flops import param_counts
from bot.sim.pipeline import inflight_chunks
from bot.sim.zoo import ModelSpec

GIB = 2.0**30
COMPILE_ACTIVATION = 0.9  # torch.compile fuses pointwise ops and saves fewer intermediates (8B: 82.4 -> 77.0 GiB)


class MemoryBreakdown(BaseModel):
    """Peak memory of the most loaded pipeline rank, GiB."""

    model_states: float
    unsharded_params: float
    unsharded_grads: float
    activations: float
    logits: float
    buffers: float
    overhead: float
    total: float
    rank: int  # pipeline rank where the peak occurs


class RankParams(BaseModel):
    """Parameters one rank holds before and after FSDP sharding."""

    dense_unsharded: float  # after TP, before FSDP
    expert_unsharded: float  # after EP, before FSDP
    local: float  # after FSDP sharding (what the optimizer updates)
    max_layer_unsharded: float  # biggest FSDP unit after TP/EP
    layer_unsharded: float  # a typical transformer-layer unit after TP/EP


def rank_params(m: ModelSpec, lay: Layout, load: StageLoad) -> RankParams:
    p = param_counts(m)
    dense = load.dense_layers * p.dense_layer() + load.moe_layers * p.moe_layer_nonexpert()
    dense += p.embedding if load.has_embedding else 0
    dense += (p.head + p.final_norm) if load.has_head else 0
    expert = load.moe_layers * m.n_experts * p.expert_each
    dense_u = dense / lay.tp
    expert_u = expert / lay.ep
    local = dense_u / (lay.dp_shard * lay.cp) + expert_u / lay.efsdp
    layer_units = [0.0]
    if load.dense_layers:
        layer_units.append(p.dense_layer() / lay.tp)
    if load.moe_layers:
        layer_units.append(p.moe_layer_nonexpert() / lay.tp + m.n_experts * p.expert_each / lay.ep)
    units = list(layer_units)
    if load.has_embedding:
        units.append(p.embedding / lay.tp)
    if load.has_head:
        units.append(p.head / lay.tp)
    return RankParams(
        dense_unsharded=dense_u,
        expert_unsharded=expert_u,
        local=local,
        max_layer_unsharded=max(units),
        layer_unsharded=max(layer_units),
    )


def activation_elems_per_token(m: ModelSpec, lay: Layout, moe: bool) -> float:
    """bf16 elements autograd saves per token for one layer with no activation checkpointing (one TP rank)."""
    e = layer_elems_per_token(m, moe=moe, tp=lay.tp, sp=lay.sp)
    e *= 2.0 if lay.param_fp32 else 1.0  # fp32 compute dtype doubles every saved tensor (counted in bf16 units)
    return e * (COMPILE_ACTIVATION if lay.compile else 1.0)


def layer_input_elems(m: ModelSpec, lay: Layout) -> float:
    return m.hidden / (lay.tp if lay.sp else 1)


def saved_elems_per_token(m: ModelSpec, lay: Layout, moe: bool, f: EfficiencyFactors) -> float:
    """Elements kept per token per layer between forward and backward under the layout's AC mode."""
    none = activation_elems_per_token(m, lay, moe)
    keep = layer_input_elems(m, lay)
    if lay.ac == "none":
        return none
    if lay.ac == "selective":
        return max(keep, f.sac_memory * none)
    if lay.ac == "full":
        return keep
    return keep + lay.memory_budget * (none - keep)


def peak_memory(m: ModelSpec, lay: Layout, f: EfficiencyFactors) -> MemoryBreakdown:
    """Peak memory over pipeline ranks (the rank with the largest total)."""
    best: MemoryBreakdown | None = None
    tokens = lay.microbatch_size * lay.seq_len / lay.cp  # tokens of one microbatch on one rank
    # fp32 master weights + two AdamW moments (bf16 moments with fused_opt_states_bf16); gradients separately.
    state_bytes = 0.0 if lay.cpu_offload else (8.0 if lay.optimizer == "fused_opt_states_bf16" else 12.0)
    for r, load in enumerate(lay.ranks):
        rp = rank_params(m, lay, load)
        unsharded = rp.dense_unsharded + rp.expert_unsharded
        states = state_bytes * rp.local
        if lay.reshard_after_forward:
            params_held = 2.0 * (rp.max_layer_unsharded + rp.layer_unsharded)  # current + prefetched unit
        else:
            params_held = 2.0 * unsharded
        params_held *= 2.0 if lay.param_fp32 else 1.0
        if lay.pp > 1:
            # FSDP2 accumulates unsharded grads in the fp32 reduce dtype while unsynced; the sharded fp32 grads
            # replace them unit by unit at the end-of-step reduce-scatter.
            grads_held = 4.0 * unsharded
        else:
            # sharded fp32 grads of the layers already reduced + bf16 grads and fp32 reduce buffer of two units
            grads_held = 4.0 * rp.local + (2.0 + 4.0) * (rp.max_layer_unsharded + rp.layer_unsharded)
        if lay.cpu_offload:
            grads_held -= 4.0 * rp.local if lay.pp == 1 else 0.0
        per_layer = {
            True: saved_elems_per_token(m, lay, True, f),
            False: saved_elems_per_token(m, lay, False, f),
        }
        rank_saved = load.dense_layers * per_layer[False] + load.moe_layers * per_layer[True]
        chunks = inflight_chunks(lay, r)
        act = 2.0 * tokens * rank_saved * chunks / lay.stages_per_rank
        # Working set of the layer being back-propagated: under full AC its recomputed activations plus their
        # gradients; otherwise the transient gradients of one layer.
        work = 2.0 * tokens * max(activation_elems_per_token(m, lay, load.moe_layers > 0), 0.0)
        act += 2.0 * work if lay.ac in ("full", "memory_budget") else 0.5 * work
        logits = 0.0
        if load.has_head:
            per_logit = 8.0 if lay.compile_loss else 10.0  # bf16 logits + fp32 log-softmax + grad; compile fuses
            logits = per_logit * tokens * m.vocab / lay.tp / lay.loss_chunks
        buffers = 0.0
        if load.moe_layers and lay.ep > 1:
            buffers += 2.0 * 2.0 * tokens / lay.tp * m.top_k * m.hidden  # all-to-all send + receive buffers
        modelled = states + params_held + grads_held + act + logits + buffers
        total = modelled * (1.0 + f.fragmentation) + f.memory_overhead_gib * GIB
        mb = MemoryBreakdown(
            model_states=states / GIB,
            unsharded_params=params_held / GIB,
            unsharded_grads=grads_held / GIB,
            activations=act / GIB,
            logits=logits / GIB,
            buffers=buffers / GIB,
            overhead=(total - modelled) / GIB,
            total=total / GIB,
            rank=r,
        )
        if best is None or mb.total > best.total:
            best = mb
    assert best is not None
    return best
