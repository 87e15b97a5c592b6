"""Make torchtitan 0.3.0 train on the CPU with gloo.

torchtitan 0.3.0 assumes CUDA. Each patch below is small, documented and tested
(`tests/runner/test_cpu_compat.py` fails when torchtitan stops needing a patch or changes the
patched shape). Facts and measurements: ``shared/reference/cpu-torchtitan.md`` §5 and the
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
5. ``grouped_experts_dtype``: torchtitan's MoE ``GroupedExperts.forward`` casts tokens and expert weights
   to bfloat16 for ``torch._grouped_mm`` whatever the parameter dtype. On this AVX2-only CPU a bf16
   ``_grouped_mm`` forward+backward is ~15x slower than fp32 (measured: 2048x128 @ 8 experts x 256,
   91 ms vs 6 ms), which made a 512-token step of the tiny MoE take 4.5 s. The patch computes the
   experts in the parameters' dtype (fp32 in the CPU workloads, which already run fp32 params for the
   same reason: ``training.mixed_precision_param float32``); bf16 parameters still compute in bf16.
   Numerics: fp32 experts are *more* precise than torchtitan's GPU path; every CPU run (baseline and
   candidate alike) runs the same code, so the gate compares like with like.
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
    ns.get_device_properties = lambda device=None: types.SimpleNamespace(
        total_memory=_host_memory_bytes(), name="cpu"
    )

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
    h_RF = torch.nn.functional.silu(self._grouped_mm(A=x, B_t=w1.transpose(-2, -1), offs=offsets_E))
    h_RF = h_RF * self._grouped_mm(A=x, B_t=w3.transpose(-2, -1), offs=offsets_E)
    return self._grouped_mm(A=h_RF, B_t=w2.transpose(-2, -1), offs=offsets_E).type_as(x_RD)


def patch_grouped_experts_dtype() -> None:
    from torchtitan.models.common.moe import GroupedExperts

    GroupedExperts.forward = _grouped_experts_forward


PATCHES: dict[str, Callable[[], None]] = {
    "device": patch_device,
    "set_timeout": patch_set_timeout,
    "attention": patch_attention,
    "gloo_premul_sum": patch_gloo_premul_sum,
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
