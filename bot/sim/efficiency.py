"""Achieved-versus-peak efficiency factors: the only free constants of the simulator.

Fixed factors are public figures where a citation is given, otherwise stated modelling assumptions (marked
"assumption"). Fitted factors (``EfficiencyFactors.FITTED``) were fitted offline with
``bot.sim.calibration.fit_factors`` on the rows of ``calibration.yaml`` marked ``split: fit`` only, never on
holdout rows; ``FIT_ROWS`` says which fit rows pin each one down. Re-run ``fit_factors()`` to refit.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field


class EfficiencyFactors(BaseModel):
    """Efficiency constants; ``FITTED`` names the ones ``fit_factors`` may move."""

    model_config = ConfigDict(frozen=True)

    # --- compute (fitted) ---
    gemm_eff: float = Field(description="achieved/peak for large bf16 GEMMs on a 700 W H100")
    attn_eff: float = Field(description="achieved/peak for causal flash attention (fwd+bwd), on the causal FLOPs")
    elem_passes: float = Field(
        description="eager memory-bound passes over a layer's activations (norms, rope, "
        "SwiGLU, casts, residuals), per token per layer, in units of (h + FFN width) bf16"
    )
    compile_elem: float = Field(description="fraction of eager elementwise traffic left after torch.compile fusion")
    fp8_tensorwise: float = Field(
        description="speedup of the GEMM itself with float8 tensorwise scaling; the "
        "memory-bound casts are charged separately"
    )
    fp8_rowwise: float = Field(description="speedup of the GEMM itself with float8 rowwise (0.3.0's converter)")
    async_tp_hidden: float = Field(description="fraction of TP collective time async TP hides")
    hw_eff: dict[str, float] = Field(
        description="achieved-efficiency multiplier per hardware id relative to a 700 W "
        "H100 SXM: power-capped clocks (H100 96GB at 500 W), newer tensor cores (B200)"
    )
    stack: dict[str, float] = Field(description="GEMM / pointwise efficiency multiplier per software stack")
    grouped_d0: float = Field(
        description="expert width at which grouped GEMMs reach half efficiency "
        "(fine-grained experts run far below dense-GEMM efficiency)"
    )
    dropless_dispatch_s: float = Field(
        description="seconds of serialised dispatch work per routed token copy "
        "per MoE layer (fwd+bwd) on Megatron-Bridge 25.11's dropless host-synced "
        "dispatcher (sim.moe_dispatch: dropless-hostsync only)"
    )
    # --- fixed from public figures ---
    gemm_m0: float = Field(256.0, description="assumption: tokens at which a GEMM reaches half its large-M efficiency")
    gemm_d0: float = Field(
        96.0, description="assumption: weight dim at which a GEMM reaches half its large-dim efficiency"
    )
    attn_stack: dict[str, float] = Field(
        default_factory=lambda: {"megatron": 0.5, "meta": 0.5},
        description="attention efficiency of stacks with FlashAttention-3 / cuDNN fused attention: FA3 reaches "
        "~500 TFLOP/s causal fwd+bwd at head dim 128 on H100 (arXiv 2407.08608); other stacks use attn_eff",
    )
    attn_hw_eff: dict[str, float] = Field(
        default_factory=lambda: {"b200": 1.0},
        description="attention-kernel multiplier per hardware id where it differs from the GEMM-fitted hw_eff. "
        "B200: 1.0, i.e. attention gets the bf16 peak ratio (2.25x H100) but not the extra GEMM efficiency "
        "hw_eff.b200 carries: B200 doubles tensor-core throughput while the exponential (SFU) units and shared-memory "
        "bandwidth stay at H100 level, so the forward pass is exp-bound and the backward smem-bound; FlashAttention-4 "
        "reaches 1,605-1,613 TFLOP/s forward, 1.3x cuDNN 9.13 (so cuDNN ~1,240 [derived]), i.e. cuDNN-class kernels run near 0.5 of "
        "the 2.25 PF peak (arXiv 2603.05451; https://www.together.ai/blog/flashattention-4)",
    )
    cp_attn_penalty: float = Field(
        0.1,
        description="assumption: ring-attention efficiency loss per doubling of CP (c block "
        "kernels per layer plus log-sum-exp merges)",
    )
    ep_overlap: dict[str, float] = Field(
        default_factory=lambda: {"megatron": 0.5},
        description="share of EP all-to-all hidden by the stack (Megatron 1F1B A2A overlap / shared-expert overlap, "
        "megatron/core/transformer/moe/README.md); torchtitan's dispatch blocks",
    )
    nvlink_eff: float = Field(
        0.80,
        description="NCCL bus bandwidth / NVLink peak; 8xH100 all-reduce busbw "
        "~360-480 GB/s (docs.alayanew.com nccl-tests, docs/reference/performance-model.md §4.5)",
    )
    internode_eff: float = Field(0.80, description="NCCL bus bandwidth / NIC peak (400 Gb/s -> ~40 GB/s)")
    alpha_intra_s: float = Field(8e-6, description="assumption: per-ring-step latency inside a node")
    alpha_inter_s: float = Field(15e-6, description="assumption: per-ring-step latency across nodes")
    fsdp_overlap: float = Field(0.9, description="assumption: share of compute time usable to hide FSDP collectives")
    overlap_interference: float = Field(
        0.1,
        description="assumption: slowdown per second of hidden collective time "
        "(NCCL kernels occupy SMs and HBM; docs/reference/performance-model.md §1.1 contention)",
    )
    pp_p2p_exposed: float = Field(0.5, description="assumption: share of pipeline send/recv time on the critical path")
    cp_exposed: float = Field(0.5, description="assumption: share of context-parallel KV exchange time not overlapped")
    ep_sync_s: float = Field(
        3e-4, description="assumption: host sync per all-to-all, 'standard' (host-synced) dispatcher"
    )
    fast_ep_bw: float = Field(
        1.3, description="assumption: bandwidth gain of DeepEP/HybridEP kernels over NCCL all-to-all"
    )
    fp8_eager: float = Field(0.75, description="assumption: share of the float8 speedup kept without torch.compile")
    fp8_cast_bytes: float = Field(
        5.0,
        description="assumption: bytes moved per element cast to float8 (read bf16 for amax, "
        "read again, write fp8); compile fuses part of it (x compile_elem)",
    )
    sac_memory: float = Field(
        0.38,
        description="assumption, checked against torchtitan's 8B SAC peak (82.4 GiB): per-op SAC "
        "activation memory / no-AC activation memory",
    )
    sac_recompute: float = Field(
        0.5,
        description="share of forward GEMMs per-op SAC recomputes: torchtitan's policy "
        "saves every second mm (docs/reference/torchtitan.md §1b)",
    )
    hbm_eff: float = Field(0.7, description="assumption: achieved/peak HBM bandwidth for memory-bound kernels")
    launch_s: float = Field(4e-6, description="assumption: CPU launch cost per kernel without CUDA graphs")
    kernels_per_layer: float = Field(120.0, description="assumption: kernels per layer per microbatch, fwd+bwd, eager")
    step_fixed_s: float = Field(0.03, description="assumption: per-step fixed cost (data loading, grad-norm, sync)")
    memory_overhead_gib: float = Field(3.0, description="assumption: CUDA context, NCCL buffers, workspace")
    fragmentation: float = Field(0.06, description="assumption: allocator fragmentation on top of the modelled peak")

    FITTED: ClassVar[tuple[str, ...]] = (
        "gemm_eff",
        "attn_eff",
        "elem_passes",
        "compile_elem",
        "fp8_tensorwise",
        "fp8_rowwise",
        "async_tp_hidden",
        "hw_eff.h100-96gb",
        "stack.megatron",
        "stack.meta",
        "hw_eff.b200",
        "grouped_d0",
        "dropless_dispatch_s",
    )

    def get(self, name: str) -> float:
        if "." in name:
            group, key = name.split(".", 1)
            return getattr(self, group)[key]
        return getattr(self, name)

    def with_values(self, values: dict[str, float]) -> EfficiencyFactors:
        """A copy with some (possibly dotted) factors replaced."""
        data = self.model_dump()
        for name, val in values.items():
            if "." in name:
                group, key = name.split(".", 1)
                data[group] = {**data[group], key: val}
            else:
                data[name] = val
        return EfficiencyFactors(**data)


# Which `split: fit` rows of calibration.yaml mainly determine each fitted factor.
FIT_ROWS: dict[str, list[str]] = {
    "gemm_eff": ["all fit rows"],
    "attn_eff": ["tt-8b-32k"],
    "elem_passes": ["tt-8b-fsdp8-bf16", "tt-8b-tp8-bf16"],
    "compile_elem": ["tt-8b-fsdp8-compile"],
    "fp8_tensorwise": ["tt-8b-fsdp8-compile-fp8", "tt-405b-pp8-1f1b", "mb-8b-fp8", "mb-70b-fp8"],
    "fp8_rowwise": ["tt-70b-fp8-rowwise"],
    "async_tp_hidden": ["tt-70b-bf16", "tt-70b-bf16-asynctp", "tt-8b-tp8-bf16", "tt-8b-tp8-bf16-asynctp"],
    "hw_eff.h100-96gb": ["tt-8b-fsdp8-*", "tt-70b-*", "tt-405b-pp8-1f1b"],
    "stack.megatron": ["mb-8b-fp8", "mb-70b-fp8", "mb-qwen3-235b-fp8"],
    "stack.meta": ["meta-405b-8k"],
    "hw_eff.b200": ["mb-405b-b200"],
    "grouped_d0": ["mb-qwen3-235b-fp8"],
    "dropless_dispatch_s": ["mb-qwen3-30b-b200"],
}

# Fitted offline by bot.sim.calibration.fit_factors() on the `split: fit` rows of calibration.yaml
# (tt-8b-fsdp8-bf16/-compile/-compile-fp8, tt-8b-32k, tt-405b-pp8-1f1b, tt-70b-bf16, tt-70b-bf16-asynctp,
# tt-70b-fp8-rowwise, tt-8b-tp8-bf16, tt-8b-tp8-bf16-asynctp, mb-8b-fp8, mb-70b-fp8, mb-405b-b200,
# mb-qwen3-235b-fp8, meta-405b-8k); holdout rows were never used. Values rounded to 3 significant digits.
# fp8_tensorwise ends near its physical bound (fp8 peak = 2x bf16 peak); casts are charged separately.
# dropless_dispatch_s was fitted afterwards, alone, with every other factor held at the values below, on the one
# fit row that carries sim.moe_dispatch: dropless-hostsync and pays it (mb-qwen3-30b-b200; 210 ns per routed token
# copy = 1.68 us per token per MoE layer, fwd+bwd). mb-qwen3-235b-fp8 carries the lever too but its modelled
# all-to-all (6.6 ms per layer) exceeds its floor (3.4 ms), so it does not constrain the value; its twin
# mb-qwen3-30b-fp8 (H100) stays held out.
# When attention on B200 stopped taking hw_eff.b200 (attn_hw_eff), the two B200-only factors were refitted in the
# same way, every other factor held: hw_eff.b200 on mb-405b-b200 (1.17 -> 1.19; attention is 7% of that row), then
# dropless_dispatch_s alone on mb-qwen3-30b-b200 (211 -> 210 ns). No holdout row was used.
DEFAULT_FACTORS = EfficiencyFactors(
    gemm_eff=0.595,
    attn_eff=0.246,
    elem_passes=33.3,
    compile_elem=0.540,
    fp8_tensorwise=1.99,
    fp8_rowwise=1.30,
    async_tp_hidden=0.446,
    hw_eff={"h100-sxm-80gb": 1.0, "h100-96gb": 0.873, "h200": 1.0, "b200": 1.19},
    stack={"torchtitan": 1.0, "megatron": 1.13, "meta": 1.08},
    grouped_d0=1110.0,
    dropless_dispatch_s=2.10e-7,
)
