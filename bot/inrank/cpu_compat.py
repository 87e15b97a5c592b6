"""Make torchtitan 0.3.0 train on the CPU with gloo.

torchtitan 0.3.0 assumes CUDA. Each patch below is small, documented and tested
(`tests/runner/test_cpu_compat.py` fails when torchtitan stops needing a patch or changes the
patched shape). Facts and measurements: ``docs/reference/cpu-torchtitan.md`` §5 and the
"minimal recipe".

The layer is active only when no accelerator is present (``should_apply``), and only inside the
training ranks: ``bot/inrank/_site/sitecustomize.py`` calls :func:`apply` at interpreter start-up
when the runner sets ``ATTUNE_CPU_COMPAT=1``, so the launched command stays the plain
``torchrun … -m torchtitan.train``.

Patches:
1. ``device``: ``torchtitan.tools.utils.device_type/device_module`` point at a CPU namespace
   (torchtitan falls back to ``"cuda"`` when no accelerator is found).
2. ``set_timeout``: torch 2.13 has no ``torch.distributed.set_timeout``; delegate to
   ``ProcessGroup.set_timeout``.
3. ``attention``: FlexAttention has no CPU backward in torch 2.13. Replace
   ``FlexAttention.forward`` by SDPA with an exact dense block-causal (per-document) mask built
   by ``Decoder.get_attention_masks`` from ``positions``.
4. ``gloo_premul_sum``: gloo has no ``ReduceOp.PREMUL_SUM``, which FSDP2 picks when torchtitan
   sets the gradient divide factor to 1.0; force sum reduction (numerically the same).
5. ``pp_microbatch_step``: torchtitan 0.3.0 hands the pipeline schedule ready-made microbatches
   (``pp_schedule.step(arg_mbs=…, kwarg_mbs=…, target_mbs=…)``, ``torchtitan/trainer.py`` L856), an API of the
   torch nightlies it pins; torch 2.13's ``PipelineSchedule{Single,Multi}.step(*args, target=, **kwargs)`` has none
   and every PP run dies with ``ValueError: Expecting 2 arg_mbs but got 1`` (measured, 2 CPU ranks). The patch
   accepts those keywords and runs torch 2.13's own ``_step_microbatches`` on them after the per-iteration set-up
   ``step`` does (stage ``has_backward`` flags, ``clear_runtime_states``). A version skew, not a CPU defect: a
   GPU host with the pinned nightly does not need it (the layer is active only on CPU-only hosts).

6. ``grouped_experts_dtype``: torchtitan's MoE ``GroupedExperts.forward`` casts tokens and expert weights
   to bfloat16 for ``torch._grouped_mm`` whatever the parameter dtype. On this AVX2-only CPU a bf16
   ``_grouped_mm`` forward+backward is ~15x slower than fp32 (measured: 2048x128 @ 8 experts x 256,
   91 ms vs 6 ms), which made a 512-token step of the tiny MoE take 4.5 s. The patch computes the
   experts in the parameters' dtype (fp32 in the CPU workloads, which already run fp32 params for the
   same reason: ``training.mixed_precision_param float32``); bf16 parameters still compute in bf16.
   Numerics: fp32 experts are *more* precise than torchtitan's GPU path; every CPU run (baseline and
   candidate alike) runs the same code, so the gate compares like with like. Under ``torch.compile`` the
   eager fp32 kernel cannot be traced: ``_grouped_mm``'s fake (meta) kernel admits only bf16 ("Expected
   inputs of BF16 type", ``torch/_meta_registrations.py``; a real MoE campaign's compile trial crashed on
   it), so a non-bf16 grouped GEMM goes through the custom ops ``attune::grouped_mm`` (2-D tokens x 3-D
   experts) and ``attune::grouped_mm_wgrad`` (its weight gradient, 2-D x 2-D -> 3-D), each with its own
   shape function and the first with its backward; eager they call the same ``torch._grouped_mm``.

CP cannot be patched the same way: torchtitan's CP shards the FlexAttention ``BlockMask``
(``torchtitan/distributed/context_parallel/api.py`` ``cp_shard`` asserts ``isinstance(attention_masks, (BlockMask,
dict))``), and FlexAttention has no CPU backward in torch 2.13, so the dense SDPA mask of patch 3 is what a CPU run
has. The lever catalog rejects CP on the CPU for that reason (``bot/core/layouts.py``).
"""

from __future__ import annotations

import os
import resource
import types
from collections.abc import Callable

import torch

APPLIED: list[str] = []


def should_apply() -> bool:
    """True when no accelerator is usable (the layer is for CPU-only hosts)."""
    if os.environ.get("ATTUNE_CPU_COMPAT") == "0":
        return False
    return not torch.cuda.is_available()


def _rss_peak_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _host_memory_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def cpu_device_module() -> types.SimpleNamespace:
    """A ``torch.cuda``-shaped namespace backed by the CPU (peak RSS stands in for device memory)."""
    ns = types.SimpleNamespace(**{k: getattr(torch.cpu, k) for k in dir(torch.cpu) if not k.startswith("_")})
    ns.get_device_name = lambda device=None: "cpu"
    ns.current_device = lambda: 0
    ns.device_count = lambda: 1
    ns.is_available = lambda: True
    ns.set_device = lambda device: None
    ns.synchronize = lambda device=None: None
    ns.empty_cache = lambda: None
    ns.reset_peak_memory_stats = lambda device=None: None
    ns.get_device_properties = lambda device=None: types.SimpleNamespace(total_memory=_host_memory_bytes(), name="cpu")

    def memory_stats(device=None) -> dict[str, int]:
        peak = _rss_peak_bytes()
        return {
            "active_bytes.all.peak": peak,
            "reserved_bytes.all.peak": peak,
            "num_alloc_retries": 0,
            "num_ooms": 0,
        }

    ns.memory_stats = memory_stats
    return ns


def patch_device() -> None:
    import torchtitan.tools.utils as tt_utils

    tt_utils.device_type = "cpu"
    tt_utils.device_module = cpu_device_module()


def patch_set_timeout() -> None:
    import torch.distributed as dist

    if hasattr(dist, "set_timeout"):
        return

    def set_timeout(timeout, group=None) -> None:
        (group if group is not None else dist.group.WORLD).set_timeout(timeout)

    dist.set_timeout = set_timeout


def doc_causal_mask(positions: torch.Tensor) -> torch.Tensor:
    """Dense same-document causal mask ``(B, 1, L, L)`` from per-document ``positions``.

    A new document starts where ``positions == 0``; a token attends to earlier tokens of its own
    document only. Elementwise identical to torchtitan's block-causal mask_mod.
    """
    doc = torch.cumsum((positions == 0).int(), dim=1)
    seq = positions.shape[1]
    causal = torch.ones(seq, seq, dtype=torch.bool, device=positions.device).tril()
    return ((doc[:, :, None] == doc[:, None, :]) & causal)[:, None]


def _sdpa_forward(
    self,
    q_BLNH: torch.Tensor,
    k_BLNH: torch.Tensor,
    v_BLNH: torch.Tensor,
    *,
    attention_masks=None,
    score_mod=None,
    scale: float | None = None,
    enable_gqa: bool = False,
    out_transform=None,
    **_: object,
) -> torch.Tensor:
    # Argument names must stay q_BLNH/k_BLNH/v_BLNH: spmd_types maps positional names.
    from torch.distributed.tensor import DTensor

    if score_mod is not None or out_transform is not None:
        # SDPA cannot apply them; dropping them would silently train a different model
        raise NotImplementedError(
            "attune cpu_compat: FlexAttention with score_mod/out_transform (e.g. attention sinks) has no CPU SDPA equivalent"
        )

    mask = attention_masks.to_local() if isinstance(attention_masks, DTensor) else attention_masks
    out = torch.nn.functional.scaled_dot_product_attention(
        q_BLNH.transpose(1, 2),
        k_BLNH.transpose(1, 2),
        v_BLNH.transpose(1, 2),
        attn_mask=mask,
        is_causal=mask is None,
        scale=scale,
        enable_gqa=enable_gqa,
    )
    return out.transpose(1, 2)


def patch_attention() -> None:
    from torchtitan.models.common.attention import FlexAttention
    from torchtitan.models.common.decoder import Decoder

    stock_masks = Decoder.get_attention_masks

    def get_attention_masks(self, positions: torch.Tensor):
        # only flex attention is replaced; other backends keep torchtitan's own masks
        attn = getattr(self.config, "first_attention", None)
        if attn is not None and isinstance(attn.inner_attention, FlexAttention.Config):
            return doc_causal_mask(positions)
        return stock_masks(self, positions)

    FlexAttention.forward = _sdpa_forward
    Decoder.get_attention_masks = get_attention_masks


def patch_gloo_premul_sum() -> None:
    import torchtitan.distributed.fsdp as tt_fsdp
    from torch.distributed.fsdp import FSDPModule

    original: Callable = tt_fsdp.disable_fsdp_gradient_division
    if getattr(original, "_attune_patched", False):
        return

    def disable_fsdp_gradient_division(model: torch.nn.Module) -> None:
        original(model)
        for module in model.modules():
            if isinstance(module, FSDPModule):
                module.set_force_sum_reduction_for_comms(True)

    disable_fsdp_gradient_division._attune_patched = True  # type: ignore[attr-defined]
    tt_fsdp.disable_fsdp_gradient_division = disable_fsdp_gradient_division


def _microbatch_step(original: Callable) -> Callable:
    def step(
        self,
        *args,
        target=None,
        losses=None,
        return_outputs=True,
        loss_kwargs=None,
        arg_mbs=None,
        kwarg_mbs=None,
        target_mbs=None,
        **kwargs,
    ):
        if arg_mbs is None and kwarg_mbs is None and target_mbs is None:
            return original(
                self,
                *args,
                target=target,
                losses=losses,
                return_outputs=return_outputs,
                loss_kwargs=loss_kwargs,
                **kwargs,
            )
        stages = getattr(self, "_stages", None) or [self._stage]
        for stage in stages:  # what torch 2.13's step() does before it splits a whole batch
            stage.has_backward = self._has_backward
            stage.clear_runtime_states()
        n = self._n_microbatches
        self._step_microbatches(
            arg_mbs if arg_mbs is not None else [()] * n,
            kwarg_mbs if kwarg_mbs is not None else [{}] * n,
            target_mbs,
            losses,
            return_outputs,
            loss_kwargs=loss_kwargs,
        )
        if return_outputs and any(stage.is_last for stage in stages):
            return self._merge_outputs(next(s for s in stages if s.is_last).output_chunks)
        return None

    step._attune_patched = True  # type: ignore[attr-defined]
    return step


def torch_step_takes_microbatches() -> bool:
    """True when this torch's pipeline schedules accept ``arg_mbs=`` (then patch 5 is not needed)."""
    import inspect

    from torch.distributed.pipelining.schedules import PipelineScheduleSingle

    step = PipelineScheduleSingle.step
    if getattr(step, "_attune_patched", False):
        return False
    return "arg_mbs" in inspect.signature(step).parameters


def patch_pp_microbatch_step() -> None:
    from torch.distributed.pipelining.schedules import PipelineScheduleMulti, PipelineScheduleSingle

    if torch_step_takes_microbatches():
        return
    for cls in (PipelineScheduleSingle, PipelineScheduleMulti):
        if not getattr(cls.step, "_attune_patched", False):
            cls.step = _microbatch_step(cls.step)


@torch.library.custom_op("attune::grouped_mm", mutates_args=())
def grouped_mm(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """``torch._grouped_mm(a, b, offs=offs)`` for 2-D ``a`` (tokens grouped by ``offs``) and 3-D ``b`` (one matrix per
    group), in any dtype the eager CPU kernel takes, traceable by ``torch.compile`` (patch 6)."""
    return torch._grouped_mm(a, b, offs=offs)


@grouped_mm.register_fake
def _grouped_mm_shape(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    return a.new_empty(a.shape[0], b.shape[-1])


@torch.library.custom_op("attune::grouped_mm_wgrad", mutates_args=())
def grouped_mm_wgrad(a_t: torch.Tensor, grad: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """The per-group ``a_gᵀ @ grad_g`` (2-D x 2-D grouped along the shared dimension by ``offs``): ``b``'s gradient."""
    return torch._grouped_mm(a_t, grad, offs=offs)


@grouped_mm_wgrad.register_fake
def _grouped_mm_wgrad_shape(a_t: torch.Tensor, grad: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    return a_t.new_empty(offs.shape[0], a_t.shape[0], grad.shape[-1])


def _grouped_mm_setup(ctx, inputs, output) -> None:  # noqa: ANN001 - torch.library's signature
    a, b, offs = inputs
    ctx.save_for_backward(a, b, offs)


def _grouped_mm_backward(ctx, grad: torch.Tensor):  # noqa: ANN001, ANN202 - torch.library's signature
    a, b, offs = ctx.saved_tensors
    grad_a = grouped_mm(grad, b.transpose(-2, -1), offs) if ctx.needs_input_grad[0] else None
    grad_b = grouped_mm_wgrad(a.transpose(0, 1), grad, offs) if ctx.needs_input_grad[1] else None
    return grad_a, grad_b, None


grouped_mm.register_autograd(_grouped_mm_backward, setup_context=_grouped_mm_setup)


def _grouped_experts_forward(self, x_RD: torch.Tensor, num_tokens_per_expert_E: torch.Tensor) -> torch.Tensor:
    """torchtitan 0.3.0's ``GroupedExperts.forward`` computing in the weights' dtype instead of bf16."""
    from torch.distributed.tensor import DTensor

    w1, w2, w3 = (w.to_local() if isinstance(w, DTensor) else w for w in (self.w1_EFD, self.w2_EDF, self.w3_EFD))
    dtype = w1.dtype
    offsets_E = torch.cumsum(num_tokens_per_expert_E, dim=0, dtype=torch.int32)
    from torchtitan.distributed.spmd_types import spmd_mesh_size
    from torchtitan.distributed.utils import get_spmd_backend

    if get_spmd_backend() == "spmd_types":
        import spmd_types as spmd

        if spmd.is_type_checking() and spmd_mesh_size("ep") == 1:
            for axis in ("dp", "cp"):  # as the stock forward: offsets P -> V for grouped_mm without EP
                spmd.mutate_type(offsets_E, axis, src=spmd.P, dst=spmd.V)
    x = x_RD.to(dtype)
    if dtype == torch.bfloat16:  # the stock seam (what torchtitan's converters override)

        def mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            return self._grouped_mm(A=a, B_t=b, offs=offsets_E)
    else:  # compile-traceable where the stock fake kernel admits only bf16

        def mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            return grouped_mm(a, b, offsets_E)

    h_RF = torch.nn.functional.silu(mm(x, w1.transpose(-2, -1)))
    h_RF = h_RF * mm(x, w3.transpose(-2, -1))
    return mm(h_RF, w2.transpose(-2, -1)).type_as(x_RD)


def patch_grouped_experts_dtype() -> None:
    from torchtitan.models.common.moe import GroupedExperts

    GroupedExperts.forward = _grouped_experts_forward


PATCHES: dict[str, Callable[[], None]] = {
    "device": patch_device,
    "set_timeout": patch_set_timeout,
    "attention": patch_attention,
    "gloo_premul_sum": patch_gloo_premul_sum,
    "pp_microbatch_step": patch_pp_microbatch_step,
    "grouped_experts_dtype": patch_grouped_experts_dtype,
}


def apply() -> list[str]:
    """Apply every patch once; returns the names applied. No-op when an accelerator is present."""
    if not should_apply():
        return []
    threads = os.environ.get("ATTUNE_TORCH_THREADS")
    if threads:
        torch.set_num_threads(int(threads))
    for name, patch in PATCHES.items():
        if name not in APPLIED:
            patch()
            APPLIED.append(name)
    return list(APPLIED)
