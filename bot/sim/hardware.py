"""Hardware profiles: per-GPU peak compute, memory and interconnect figures, each cited.

Figures are vendor datasheet values (dense, no sparsity) as collected in docs/reference/performance-model.md §4.5, plus the torchtitan
benchmark pages for the 96 GB HBM2e / 500 W H100 part. Bandwidths are per GPU and per direction. How much of each
peak is achieved is not a hardware fact: that lives in ``bot.sim.efficiency`` (fitted on calibration rows).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class HardwareSpec(BaseModel):
    """One GPU type in one node type."""

    model_config = ConfigDict(frozen=True)

    id: str
    name: str
    bf16_tflops: float = Field(description="dense BF16 tensor-core peak, TFLOP/s (also torchtitan's MFU peak)")
    fp8_tflops: float = Field(description="dense FP8 tensor-core peak, TFLOP/s")
    hbm_gib: float = Field(description="device memory visible to the framework, GiB")
    hbm_tbs: float = Field(description="HBM bandwidth, TB/s")
    nvlink_gbs: float = Field(description="NVLink bandwidth per GPU per direction, GB/s")
    internode_gbs: float = Field(description="scale-out bandwidth per GPU per direction, GB/s")
    gpus_per_node: int = Field(description="GPUs in one NVLink domain / node")
    tdp_w: int
    sources: list[str]
    kind: Literal["gpu", "cpu"] = (
        "gpu"  # a CPU host: one rank per core, gloo, no CUDA graphs, no FlexAttention backward
    )
    # CUDA compute capability (https://developer.nvidia.com/cuda-gpus): what torchtitan's float8/MXFP8/NVFP4 converters
    # check when they are configured; a CPU-only host (a Slurm login node) answers as the recipe's GPU would
    cuda_capability: tuple[int, int] | None = None
    notes: str = ""


_DATASHEET = "https://zdszero.github.io/Computer/Artificial_Intelligence/Hardware.html"
_TT_PEAKS = "https://github.com/pytorch/torchtitan/blob/main/torchtitan/tools/utils.py"
_TT_BENCH = "https://github.com/pytorch/torchtitan/blob/main/benchmarks/llama3_h100_202412_torchtitan.md"
_LLAMA3 = "https://arxiv.org/abs/2407.21783"

HARDWARE: dict[str, HardwareSpec] = {
    h.id: h
    for h in [
        HardwareSpec(
            id="h100-sxm-80gb",
            name="NVIDIA H100 SXM5 80GB HBM3 (700 W), 8-GPU HGX node",
            bf16_tflops=989.0,
            fp8_tflops=1979.0,
            hbm_gib=79.6,
            hbm_tbs=3.35,
            nvlink_gbs=450.0,
            internode_gbs=50.0,
            gpus_per_node=8,
            tdp_w=700,
            cuda_capability=(9, 0),
            sources=[_DATASHEET, _TT_PEAKS, _LLAMA3],
            notes="hbm_gib: 81,559 MiB as reported by nvidia-smi for the 80 GB part [derived]. "
            "NVLink4 900 GB/s bidirectional = 450 GB/s per direction; 400 Gb/s per GPU RDMA (Llama 3 paper).",
        ),
        HardwareSpec(
            id="h100-96gb",
            name="NVIDIA H100 96GB HBM2e at 500 W (Meta Grand Teton), 8-GPU node",
            bf16_tflops=989.0,
            fp8_tflops=1979.0,
            hbm_gib=95.0,
            hbm_tbs=2.4,
            nvlink_gbs=450.0,
            internode_gbs=50.0,
            gpus_per_node=8,
            tdp_w=500,
            cuda_capability=(9, 0),
            sources=[_TT_BENCH, _TT_PEAKS],
            notes="torchtitan benchmarks run here: 96 GB HBM2e, 2.4 TB/s, 500 W, 400 Gb/s per GPU RDMA. The doc says "
            "the true peak lies between SXM (989) and NVL (835); the nominal SXM peak is kept for MFU and the "
            "power-capped clock is a fitted efficiency (hw_eff) in bot.sim.efficiency. hbm_gib ~95 [derived, approximate].",
        ),
        HardwareSpec(
            id="h200",
            name="NVIDIA H200 SXM 141GB HBM3e (700 W), 8-GPU HGX node",
            bf16_tflops=989.0,
            fp8_tflops=1979.0,
            hbm_gib=140.0,
            hbm_tbs=4.8,
            nvlink_gbs=450.0,
            internode_gbs=50.0,
            gpus_per_node=8,
            tdp_w=700,
            cuda_capability=(9, 0),
            sources=[
                _DATASHEET,
                "https://lzwjava.github.io/nvidia-h200-gpu-specs-en",
                _TT_PEAKS,
                "https://github.com/pytorch/torchtitan/blob/main/benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md",
            ],
            notes="hbm_gib: 143,771 MiB per nvidia-smi [derived]. Trainy/WhiteFiber H200 nodes: 400 Gb/s CX-7 per GPU.",
        ),
        HardwareSpec(
            id="b200",
            name="NVIDIA B200 (HGX/DGX B200, 1000 W), 8-GPU node",
            bf16_tflops=2250.0,
            fp8_tflops=4500.0,
            hbm_gib=179.0,
            hbm_tbs=8.0,
            nvlink_gbs=900.0,
            internode_gbs=50.0,
            gpus_per_node=8,
            tdp_w=1000,
            cuda_capability=(10, 0),
            sources=[_DATASHEET, "https://glennklockwood.com/garden/processors/B200", _TT_PEAKS],
            notes="NVLink5 1.8 TB/s bidirectional = 900 GB/s per direction; 400 Gb/s per GPU scale-out. "
            "hbm_gib: 183,359 MiB per nvidia-smi for the 180 GB part [derived].",
        ),
        HardwareSpec(
            id="cpu",
            name="2-core AMD EPYC VM (AVX2 + FMA; no AVX-512, AVX512-BF16 or AMX), 24 GB; one gloo rank per core",
            bf16_tflops=0.0012,
            fp8_tflops=0.0,
            hbm_gib=11.0,
            hbm_tbs=0.02,
            nvlink_gbs=2.0,
            internode_gbs=0.1,
            gpus_per_node=2,
            tdp_w=0,
            kind="cpu",
            sources=["docs/reference/cpu-torchtitan.md"],
            notes="bf16_tflops: a [512x256]@[256x768] bf16 matmul ran at 1.2 GFLOP/s (fp32: 65.5 GFLOP/s per core), "
            "measured (docs/reference/cpu-torchtitan.md section 1); the CPU recipes train in fp32. hbm_gib: half the host's 24 GB per "
            "rank [derived]. hbm_tbs, nvlink_gbs (gloo over loopback), internode_gbs and tdp_w are [assumed] placeholders: "
            "the simulator is used on this profile for layout legality, not for speed.",
        ),
    ]
}


def get_hardware(hw_id: str) -> HardwareSpec:
    """Look up a hardware profile by id; the error lists the known ids."""
    try:
        return HARDWARE[hw_id]
    except KeyError:
        raise KeyError(f"unknown hardware {hw_id!r}; known: {sorted(HARDWARE)}") from None


# Names users write for the profiles above (matched case-insensitively, '_' and ' ' read as '-').
ALIASES: dict[str, str] = {
    "h100": "h100-sxm-80gb",
    "h100-sxm": "h100-sxm-80gb",
    "h100-sxm5": "h100-sxm-80gb",
    "h100-80gb": "h100-sxm-80gb",
    "h100-sxm5-80gb": "h100-sxm-80gb",
    "h100-80gb-hbm3": "h100-sxm-80gb",
    "h100-sxm5-80gb-hbm3": "h100-sxm-80gb",
    "h100-96gb-hbm2e": "h100-96gb",
    "h200-sxm": "h200",
    "h200-141gb": "h200",
    "h200-sxm-141gb": "h200",
    "b200-180gb": "b200",
    "b200-sxm": "b200",
    "host": "cpu",
}


def hardware_id(name: str) -> str:
    """The profile id for a hardware name as users write it (``h100``, ``H100-SXM5-80GB``, ``h200``, ``b200``, ``cpu``);
    ValueError listing the known names."""
    key = name.strip().lower().replace("_", "-").replace(" ", "-")
    if key in HARDWARE:
        return key
    if key in ALIASES:
        return ALIASES[key]
    known = ", ".join(sorted({*HARDWARE, *ALIASES}))
    raise ValueError(f"unknown hardware {name!r}; known names: {known}")
