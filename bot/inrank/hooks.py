r"""Test-only workload hooks, installed inside torchtitan ranks when ``ATTUNE_HOOK`` is set.

A hook is ``name`` or ``name:arg``; several are comma-separated. They exist to make real
failures and real faults happen in real torchtitan runs (runner tests, the gate's
fault-injection benchmark ``bot/bench/gate_faults.py``); recipes never set them. Every hook wraps the
attribute it patches as it finds it, so hooks compose and the CPU compatibility layer
(installed first by ``bot/inrank/_site/sitecustomize.py``) stays underneath.

Failure hooks (runner tests):
- ``crash_at:N[@R]``  raise inside ``train_step`` at step N (a real crash; only on rank R if given).
- ``hang_at:N``   stop making progress at step N (sleep forever) — the runner must call it a hang.
- ``oom_at:N``    ask torch for an impossible host allocation at step N (torch's real OOM text).

Fault hooks (silent-correctness faults from ``docs/reference/gate.md`` §2-§3; the run finishes
but trains something different):
- ``loss_per_microbatch``  each microbatch's loss is its own token mean, averaged over
  microbatches and ranks, instead of the global valid-token mean (F13; torchtitan#1842).
- ``label_shift``          labels shifted once more: the model learns to predict t+2 (F22).
- ``ignore_index_off``     prompt and padding labels are trained on (as pad) (F34).
- ``future_leak``          the attention mask lets each token see the next one (F20).
- ``cross_doc``            packed documents attend across document boundaries (plain causal).
- ``rope_restart``         RoPE positions restart at the middle of the sequence (a CP sharding
  bug, F21); the attention mask is untouched.
- ``attn_scale``           attention scores scaled by 1/d instead of 1/sqrt(d) (F33).
- ``dropout:P``            dropout P on every transformer block's output (F23).
- ``drop_grads:REGEX``     gradients of the parameters whose name matches are dropped before
  clipping: those parameters are frozen (F19).
- ``grad_scale:F``         every gradient multiplied by F before clipping (F16/F17).
- ``bf16_grads``           gradients rounded to bfloat16 before clipping (bf16 reduction, F18).
- ``lr_per_microbatch``    the LR schedule is stepped once per microbatch (F12).
- ``skip_step:N[@R]``      the optimizer step of step N is skipped (only on rank R if given).
- ``stale_grads``          ``zero_grad`` is skipped from step 2: gradients leak across steps.
- ``z_loss:C``             a z-loss C * logsumexp(logits)^2 per token is added (F25).
- ``label_smoothing:E``    cross-entropy with label smoothing E (F24).
- ``data_restart:S``       the data stream restarts after S global samples (torchtitan#3907).
- ``dup_rank_data``        every data-parallel rank reads rank 0's samples (F14).

Layout fault hooks (parallel-layout bugs; the run finishes but trains something different):
- ``tp_norm_sharded``      the TP plan shards every per-layer norm weight (``S(0)`` on the TP mesh) instead of
  replicating it (``torchtitan/models/common/decoder_sharding.py`` ``norm_config``). Measured on 2 CPU ranks
  (partial_dtensor backend): a no-op, bitwise equal to the clean TP run — DTensor gathers the sharded weight.
- ``tp_proj_unsharded``    the TP plan leaves each FFN's ``w3`` projection unsharded (replicated) while ``w1`` stays
  column-sharded (``set_dense_ffn_sharding``). Measured: the run crashes ("aten.mm.default got mixed torch.Tensor
  and DTensor"), so the gate rejects it as a crashed candidate, not a silent one.
- ``pp_drop_layer:L``      the PP split leaves layer L (default 1) out of every stage: the model runs without it.
- ``pp_dup_layer:L``       the PP split puts layer L (default 1) in two stages: it runs twice, as two copies.
- ``pp_mb_loss_scale``     each PP microbatch's loss is divided once more by the microbatch count (the
  ``scale_grads=True`` bug, torchtitan#1733).
- ``seed_not_loaded``      the checkpoint load at start-up is skipped: the layout draws its own initial weights
  instead of the seed checkpoint's.

MoE fault hooks (torchtitan's MoE code, ``torchtitan.models.common.moe``; docs/reference/gate.md §2.3):
- ``moe_topk_reduced``     the router silently keeps only each token's top-1 expert: the others get weight 0
  (their outputs and gradients vanish), as a top-k config bug would.
- ``moe_capacity_drop:F``  tokens dropped as a capacity limit would: per expert, the routed tokens beyond
  ``F x tokens x top_k / experts`` (in token order) get weight 0 (HybridEP's non-blocking capacity < 1).
- ``moe_balance_off``      the load-balancing update adds nothing (torchtitan's aux-loss-free balancing: the
  expert-bias update rate set to 0; torchtitan PR #3686: the hook returned early and biases went stale).
- ``moe_unweighted_combine`` the combine sums expert outputs without the routing scores (the router then
  gets no gradient).
  (Expert weights not updated under EP is ``drop_grads:\.moe\.routed_experts\.`` on an EP 2 run.)

Calibration hook (not a fault):
- ``init_perturb:SEED``    every initial weight multiplied by (1 + 1e-6 * N(0, 1)) (a stand-in
  for kernel nondeterminism, docs/reference/gate.md §4.3).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from typing import Any

HOOKS: dict[str, Callable[[str], None]] = {}
IGNORE_INDEX = -100
_STATE: dict[str, Any] = {}


def hook(name: str) -> Callable[[Callable[[str], None]], Callable[[str], None]]:
    def register(fn: Callable[[str], None]) -> Callable[[str], None]:
        HOOKS[name] = fn
        return fn

    return register


# ----------------------------------------------------------------------------- patch helpers


def _trainer_cls():
    from torchtitan.trainer import Trainer

    return Trainer


def _wrap(owner: Any, name: str, make: Callable[[Callable], Callable]) -> None:
    """Replace ``owner.name`` with ``make(current)`` (hooks compose)."""
    setattr(owner, name, make(getattr(owner, name)))


def _track_trainer() -> None:
    """Remember the running Trainer (gradient hooks need its named parameters)."""
    if _STATE.get("tracking"):
        return
    _STATE["tracking"] = True

    def make(original):
        def train_step(self, data_iterator):
            _STATE["trainer"] = self
            return original(self, data_iterator)

        return train_step

    _wrap(_trainer_cls(), "train_step", make)


def _at_step(n: int, action: Callable[[], None]) -> None:
    def make(original):
        def train_step(self, data_iterator):
            if self.step == n:
                action()
            return original(self, data_iterator)

        return train_step

    _wrap(_trainer_cls(), "train_step", make)


def _after_init(action: Callable[[Any], None]) -> None:
    def make(original):
        def __init__(self, *args, **kwargs):
            original(self, *args, **kwargs)
            action(self)

        return __init__

    _wrap(_trainer_cls(), "__init__", make)


def _after_load(action: Callable[[Any], None]) -> None:
    """Run ``action(trainer)`` on the weights a run trains from: after ``Trainer.train`` has called
    ``checkpointer.load`` (a seed checkpoint, when the run has one, replaces the weights ``__init__`` drew)."""

    def wrap(trainer) -> None:
        original = trainer.checkpointer.load

        def load(*args, **kwargs):
            out = original(*args, **kwargs)
            action(trainer)
            return out

        trainer.checkpointer.load = load

    _after_init(wrap)


def _clean_name(name: str) -> str:
    return name.replace("_checkpoint_wrapped_module.", "").replace("_orig_mod.", "")


def _before_clip(transform: Callable[[list[tuple[str, Any]]], None]) -> None:
    """Run ``transform(named_params)`` on the gradients just before clipping (after all reductions)."""
    import torchtitan.distributed.utils as dist_utils

    _track_trainer()

    def make(original):
        def clip_grad_norm_(parameters, *args, **kwargs):
            trainer = _STATE.get("trainer")
            if trainer is not None:
                named = [(_clean_name(n), p) for m in trainer.model_parts for n, p in m.named_parameters()]
                transform(named)
            return original(parameters, *args, **kwargs)

        return clip_grad_norm_

    _wrap(dist_utils, "clip_grad_norm_", make)


def _wrap_post_dataloading(change: Callable[[Any, Any, dict], tuple[Any, Any, dict]]) -> None:
    def make(original):
        def post_dataloading_process(self, input_dict, labels):
            inputs, labels, extra = original(self, input_dict, labels)
            return change(inputs, labels, extra)

        return post_dataloading_process

    _wrap(_trainer_cls(), "post_dataloading_process", make)


def _wrap_ce(make_call: Callable[[Callable], Callable]) -> None:
    from torchtitan.components.loss import CrossEntropyLoss

    _wrap(CrossEntropyLoss, "__call__", make_call)


def _local(t):
    """The plain tensor behind ``t`` (a DTensor's local shard, sharing storage)."""
    return getattr(t, "_local_tensor", t)


# ----------------------------------------------------------------------------- failure hooks


@hook("crash_at")
def crash_at(arg: str) -> None:
    text, _, rank = (arg or "2").partition("@")
    if rank and os.environ.get("RANK", "0") != rank:
        return

    def boom() -> None:
        raise RuntimeError(f"attune test hook: deliberate crash at step {text}")

    _at_step(int(text or 2), boom)


@hook("hang_at")
def hang_at(arg: str) -> None:
    def stall() -> None:
        while True:
            time.sleep(3600)

    _at_step(int(arg or 2), stall)


@hook("oom_at")
def oom_at(arg: str) -> None:
    def allocate() -> None:
        import torch

        torch.empty(1 << 46, dtype=torch.uint8)  # 64 TiB: torch's allocator refuses it

    _at_step(int(arg or 2), allocate)


# ----------------------------------------------------------------------------- loss and labels


@hook("loss_per_microbatch")
def loss_per_microbatch(arg: str) -> None:
    import torch

    def make(original):
        def forward_backward_step(self, *, input_dict, labels, global_valid_tokens):
            dims = self.parallel_dims
            ranks = dims.dp_replicate * dims.dp_shard
            local = (labels != IGNORE_INDEX).sum() * self.gradient_accumulation_steps * ranks
            gvt = torch.as_tensor(local, dtype=global_valid_tokens.dtype).to(global_valid_tokens.device)
            return original(self, input_dict=input_dict, labels=labels, global_valid_tokens=gvt)

        return forward_backward_step

    _wrap(_trainer_cls(), "forward_backward_step", make)


@hook("label_shift")
def label_shift(arg: str) -> None:
    def change(inputs, labels, extra):
        shifted = labels.roll(-1, dims=1)
        shifted[:, -1] = IGNORE_INDEX
        return inputs, shifted, extra

    _wrap_post_dataloading(change)


@hook("ignore_index_off")
def ignore_index_off(arg: str) -> None:
    def change(inputs, labels, extra):
        return inputs, labels.masked_fill(labels == IGNORE_INDEX, 0), extra

    _wrap_post_dataloading(change)


@hook("z_loss")
def z_loss(arg: str) -> None:
    import torch

    coef = float(arg or 1e-4)

    def make(original):
        def __call__(self, pred, labels, global_valid_tokens=None, **kwargs):
            loss, metrics = original(self, pred, labels, global_valid_tokens, **kwargs)
            logits = pred.flatten(0, 1).float()
            valid = (labels.flatten(0, 1) != IGNORE_INDEX).to(logits.dtype)
            extra = coef * (torch.logsumexp(logits, dim=-1) ** 2 * valid).sum()
            if global_valid_tokens is not None:
                extra = extra / global_valid_tokens
            return loss + extra, metrics

        return __call__

    _wrap_ce(make)


@hook("label_smoothing")
def label_smoothing(arg: str) -> None:
    import torch

    eps = float(arg or 0.1)

    def make(original):
        def __call__(self, pred, labels, global_valid_tokens=None, **kwargs):
            loss = torch.nn.functional.cross_entropy(
                pred.flatten(0, 1).float(),
                labels.flatten(0, 1),
                reduction="sum",
                ignore_index=IGNORE_INDEX,
                label_smoothing=eps,
            )
            if global_valid_tokens is not None:
                loss = loss / global_valid_tokens
            return loss, {}

        return __call__

    _wrap_ce(make)


# ----------------------------------------------------------------------------- attention and positions


@hook("future_leak")
def future_leak(arg: str) -> None:
    import torch

    from bot.inrank import cpu_compat

    def leaky_mask(positions):
        doc = torch.cumsum((positions == 0).int(), dim=1)
        seq = positions.shape[1]
        sees_next = torch.ones(seq, seq, dtype=torch.bool, device=positions.device).tril(diagonal=1)
        return ((doc[:, :, None] == doc[:, None, :]) & sees_next)[:, None]

    cpu_compat.doc_causal_mask = leaky_mask


@hook("cross_doc")
def cross_doc(arg: str) -> None:
    import torch

    from bot.inrank import cpu_compat

    def causal_only(positions):
        seq = positions.shape[1]
        causal = torch.ones(seq, seq, dtype=torch.bool, device=positions.device).tril()
        return causal.expand(positions.shape[0], seq, seq)[:, None]

    cpu_compat.doc_causal_mask = causal_only


@hook("rope_restart")
def rope_restart(arg: str) -> None:
    import torch
    from torchtitan.models.common.rope import ComplexRoPE

    def make(original):
        def _reshape_cache(self, query, positions=None):
            if positions is not None and not hasattr(positions, "placements"):
                half = positions.shape[1] // 2
                idx = torch.arange(positions.shape[1], device=positions.device).expand_as(positions)
                straddles = (idx >= half) & (idx - positions < half)
                positions = torch.where(straddles, idx - half, positions)
            return original(self, query, positions)

        return _reshape_cache

    _wrap(ComplexRoPE, "_reshape_cache", make)


@hook("attn_scale")
def attn_scale(arg: str) -> None:
    from torchtitan.models.common.attention import FlexAttention

    def make(original):
        def forward(self, q_BLNH, k_BLNH, v_BLNH, **kwargs):
            kwargs["scale"] = 1.0 / q_BLNH.shape[-1]
            return original(self, q_BLNH, k_BLNH, v_BLNH, **kwargs)

        return forward

    _wrap(FlexAttention, "forward", make)


@hook("dropout")
def dropout(arg: str) -> None:
    import torch

    p = float(arg or 0.1)

    def add_dropout(trainer) -> None:
        for part in trainer.model_parts:
            for layer in part.layers.values():
                layer.register_forward_hook(lambda _m, _i, out: torch.nn.functional.dropout(out, p, training=True))

    _after_init(add_dropout)


# ----------------------------------------------------------------------------- gradients and optimizer


@hook("drop_grads")
def drop_grads(arg: str) -> None:
    pattern = re.compile(arg or r"^layers\.0\.attention\.")

    def transform(named) -> None:
        for name, param in named:
            if pattern.search(name):
                param.grad = None

    _before_clip(transform)


@hook("grad_scale")
def grad_scale(arg: str) -> None:
    factor = float(arg or 2.0)

    def transform(named) -> None:
        for _, param in named:
            if param.grad is not None:
                param.grad.mul_(factor)

    _before_clip(transform)


@hook("bf16_grads")
def bf16_grads(arg: str) -> None:
    import torch

    def transform(named) -> None:
        for _, param in named:
            if param.grad is not None:
                local = _local(param.grad)
                local.copy_(local.to(torch.bfloat16).to(local.dtype))

    _before_clip(transform)


@hook("lr_per_microbatch")
def lr_per_microbatch(arg: str) -> None:
    def make(original):
        def train_step(self, data_iterator):
            out = original(self, data_iterator)
            for _ in range(self.gradient_accumulation_steps - 1):
                self.lr_schedulers.step()
            return out

        return train_step

    _wrap(_trainer_cls(), "train_step", make)


@hook("skip_step")
def skip_step(arg: str) -> None:
    text, _, rank = (arg or "3").partition("@")
    step = int(text)
    if rank and os.environ.get("RANK", "0") != rank:
        return

    def make(original):
        def train_step(self, data_iterator):
            if self.step != step:
                return original(self, data_iterator)
            real = self.optimizers.step
            self.optimizers.step = lambda *a, **k: None
            try:
                return original(self, data_iterator)
            finally:
                self.optimizers.step = real

        return train_step

    _wrap(_trainer_cls(), "train_step", make)


@hook("stale_grads")
def stale_grads(arg: str) -> None:
    def make(original):
        def train_step(self, data_iterator):
            if self.step < 2:
                return original(self, data_iterator)
            real = self.optimizers.zero_grad
            self.optimizers.zero_grad = lambda *a, **k: None
            try:
                return original(self, data_iterator)
            finally:
                self.optimizers.zero_grad = real

        return train_step

    _wrap(_trainer_cls(), "train_step", make)


# ----------------------------------------------------------------------------- data


@hook("data_restart")
def data_restart(arg: str) -> None:
    from bot.inrank.workloads import llama3_tiny

    period = int(arg or 80)

    def make(original):
        def sample_indices(step_chunk, dp_rank, dp_world, local_batch):
            return [i % period for i in original(step_chunk, dp_rank, dp_world, local_batch)]

        return sample_indices

    _wrap(llama3_tiny, "sample_indices", make)


@hook("dup_rank_data")
def dup_rank_data(arg: str) -> None:
    from bot.inrank.workloads import llama3_tiny

    def make(original):
        def sample_indices(step_chunk, dp_rank, dp_world, local_batch):
            return original(step_chunk, 0, dp_world, local_batch)

        return sample_indices

    _wrap(llama3_tiny, "sample_indices", make)


# ----------------------------------------------------------------------------- parallel layouts


def _wrap_layer_sharding(change: Callable[[Any], None]) -> None:
    import torchtitan.models.llama3.sharding as sharding

    def make(original):
        def _set_llama3_layer_sharding(layer_cfg, *, enable_sp):
            original(layer_cfg, enable_sp=enable_sp)
            change(layer_cfg)

        return _set_llama3_layer_sharding

    _wrap(sharding, "_set_llama3_layer_sharding", make)


@hook("tp_norm_sharded")
def tp_norm_sharded(arg: str) -> None:
    import spmd_types as spmd
    from torchtitan.models.common.decoder_sharding import dense_param_placement
    from torchtitan.protocols.sharding import ShardingConfig

    def change(layer_cfg) -> None:
        for norm in (layer_cfg.attention_norm, layer_cfg.ffn_norm):
            old = norm.sharding_config
            norm.sharding_config = ShardingConfig(
                state_shardings={"weight": dense_param_placement(tp=spmd.S(0))},
                in_src_shardings=old.in_src_shardings,
                out_src_shardings=old.out_src_shardings,
            )

    _wrap_layer_sharding(change)


@hook("tp_proj_unsharded")
def tp_proj_unsharded(arg: str) -> None:
    def change(layer_cfg) -> None:
        layer_cfg.feed_forward.w3.sharding_config = None

    _wrap_layer_sharding(change)


def _wrap_pp_split(change: Callable[[list[list[str]]], list[list[str]]]) -> None:
    import torchtitan.distributed.pipeline_parallel as pp

    def make(original):
        def _generate_llm_fqn_per_model_part(*args, **kwargs):
            return change([list(part) for part in original(*args, **kwargs)])

        return _generate_llm_fqn_per_model_part

    _wrap(pp, "_generate_llm_fqn_per_model_part", make)


@hook("pp_drop_layer")
def pp_drop_layer(arg: str) -> None:
    name = f"layers.{int(arg or 1)}"
    _wrap_pp_split(lambda parts: [[m for m in part if m != name] for part in parts])


@hook("pp_dup_layer")
def pp_dup_layer(arg: str) -> None:
    name = f"layers.{int(arg or 1)}"

    def change(parts: list[list[str]]) -> list[list[str]]:
        holder = next(i for i, part in enumerate(parts) if name in part)
        other = holder + 1 if holder + 1 < len(parts) else holder - 1
        parts[other].insert(0 if other > holder else len(parts[other]), name)
        return parts

    _wrap_pp_split(change)


@hook("pp_mb_loss_scale")
def pp_mb_loss_scale(arg: str) -> None:
    def make(original):
        def pp_forward_backward_step(self, *, input_dict_mbs, label_mbs, global_valid_tokens):
            scaled = global_valid_tokens * len(input_dict_mbs)
            return original(self, input_dict_mbs=input_dict_mbs, label_mbs=label_mbs, global_valid_tokens=scaled)

        return pp_forward_backward_step

    _wrap(_trainer_cls(), "pp_forward_backward_step", make)


@hook("seed_not_loaded")
def seed_not_loaded(arg: str) -> None:
    from torchtitan.components.checkpointer.base import BaseCheckpointManager

    _wrap(BaseCheckpointManager, "load", lambda original: lambda self, step=-1: False)


# ----------------------------------------------------------------------------- calibration


@hook("init_perturb")
def init_perturb(arg: str) -> None:
    import torch

    seed = int(arg or 1)

    def perturb(trainer) -> None:
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for part in trainer.model_parts:
                for _, param in sorted(part.named_parameters()):
                    local = _local(param.data)
                    noise = torch.randn(local.shape, generator=gen, dtype=local.dtype)
                    local.mul_(1 + 1e-6 * noise)

    # after the seed checkpoint's load: perturbing the drawn weights that the load then replaces would be a no-op
    _after_load(perturb)


# ----------------------------------------------------------------------------- MoE faults


def _wrap_router(change: Callable[[Any, tuple], tuple]) -> None:
    from torchtitan.models.common.moe import TokenChoiceTopKRouter

    def make(original):
        def forward(self, x_BLD, expert_bias_E=None):
            return change(self, original(self, x_BLD, expert_bias_E))

        return forward

    _wrap(TokenChoiceTopKRouter, "forward", make)


@hook("moe_topk_reduced")
def moe_topk_reduced(arg: str) -> None:
    import torch

    def change(router, out):
        scores, ids, full = out
        if ids.shape[-1] < 2:
            return out
        # keep the ids (the dispatcher's token counts assume K distinct experts per token: duplicated ids would
        # leave grouped_mm rows unwritten, torch#193633) and give every expert but the best weight 0
        best = torch.nn.functional.one_hot(scores.argmax(dim=-1), ids.shape[-1]).to(scores.dtype)
        return scores * best, ids, full

    _wrap_router(change)


@hook("moe_capacity_drop")
def moe_capacity_drop(arg: str) -> None:
    import torch

    factor = float(arg or 1.0)

    def change(router, out):
        scores, ids, full = out
        num_experts = full.shape[-1]
        flat_ids = ids.reshape(-1)  # (T*K,), token-major order
        capacity = int(factor * flat_ids.numel() / num_experts)
        onehot = torch.nn.functional.one_hot(flat_ids, num_experts)
        position = (onehot.cumsum(0) * onehot).sum(-1) - 1  # the assignment's rank within its expert
        kept = (position < capacity).reshape(ids.shape).to(scores.dtype)
        return scores * kept, ids, full

    _wrap_router(change)


@hook("moe_balance_off")
def moe_balance_off(arg: str) -> None:
    def zero_rate(trainer) -> None:
        for part in trainer.model_parts:
            for module in part.modules():
                if getattr(module, "load_balance_coeff", None) is not None and hasattr(module, "expert_bias_E"):
                    module.load_balance_coeff = 0.0

    _after_init(zero_rate)


@hook("moe_unweighted_combine")
def moe_unweighted_combine(arg: str) -> None:
    import dataclasses

    import torch
    from torchtitan.models.common.token_dispatcher import AllToAllTokenDispatcher, LocalTokenDispatcher

    def make(original):
        def combine(self, routed_output_RD, metadata, x_TD):
            ones = torch.ones_like(metadata.topk_scores_experts_sorted_N)
            return original(
                self, routed_output_RD, dataclasses.replace(metadata, topk_scores_experts_sorted_N=ones), x_TD
            )

        return combine

    for cls in (LocalTokenDispatcher, AllToAllTokenDispatcher):
        _wrap(cls, "combine", make)


def install(spec: str) -> None:
    """Install the hooks named in ``spec`` (comma-separated ``name[:arg]``)."""
    for part in filter(None, (p.strip() for p in spec.split(","))):
        name, _, arg = part.partition(":")
        if name not in HOOKS:
            raise SystemExit(f"attune: unknown workload hook {name!r}; known: {', '.join(sorted(HOOKS))}")
        HOOKS[name](arg)
