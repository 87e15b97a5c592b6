"""Parallel layouts on a given world size, and which of them torchtitan 0.3.0 can run on which hardware.

:data:`LAYOUTS_2` names every layout of world size 2 the lever catalog can express for a dense model
(one degree of 2: FSDP, HSDP/DDP, TP with or without SP, PP with each schedule and microbatch count, CP), as lever
edits over ``recipes/llama3-tiny/cpu-2rank.yaml`` (FSDP over both ranks, local batch 1). :func:`layout_problems`
says why a layout cannot run; its answers are checked against real runs (``tests/data/cpu2_layout_matrix.json``,
made by ``python -m tests.runner.layout_matrix``; test ``tests/runner/test_layouts.py``).

Rules, each with its source:

- **CP on the CPU.** torchtitan's CP shards the FlexAttention ``BlockMask`` (``torchtitan/distributed/
  context_parallel/api.py`` ``cp_shard``: ``assert isinstance(attention_masks, (BlockMask, dict))``) and the SPMD
  backends refuse CP with SDPA (``torchtitan/distributed/full_dtensor.py`` ``validate_config``); FlexAttention has
  no CPU backward in torch 2.13 (``NotImplementedError: FlexAttention does not support backward on CPU``,
  docs/reference/cpu-torchtitan.md §1), so a CPU run uses SDPA with a dense mask and CP dies with that
  ``AssertionError`` (measured: layout ``cp2``).
- **PP microbatches.** ``n_microbatches = local_batch_size / pipeline_parallel_microbatch_size``
  (``torchtitan/distributed/pipeline_parallel.py`` L303-311). torch's ``Schedule1F1B`` refuses fewer microbatches
  than stages ("Number of microbatches (1) must be greater than or equal to the number of stages (2)",
  ``torch/distributed/pipelining/schedules.py`` L1020), and ``ScheduleDualPipeV`` likewise over its 2 stages per
  rank (L3439); measured: layouts ``pp2_1f1b_lbs1``, ``pp2_1f1b_mbs2``.
- **Stages per rank.** Multi-stage schedules (Interleaved1F1B, LoopedBFS, InterleavedZeroBubble, ZBVZeroBubble,
  DualPipeV) build 2 stages per rank (docs/reference/torchtitan.md §1a "PP schedule"), so ``pp * 2`` stages must not exceed the
  layers plus the embedding and output stages the split leaves.
"""

from __future__ import annotations

from bot.core.records import Scalar

MULTI_STAGE = {"Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV"}
NEEDS_MB_GE_STAGES = {"1F1B", "DualPipeV"}

_ONE = {"parallelism.data_parallel_shard_degree": 1}


def _pp(schedule: str, lbs: int, mbs: int = 1) -> dict[str, Scalar]:
    return {
        **_ONE,
        "parallelism.pipeline_parallel_degree": 2,
        "parallelism.pipeline_parallel_schedule": schedule,
        "training.local_batch_size": lbs,
        "parallelism.pipeline_parallel_microbatch_size": mbs,
    }


LAYOUTS_2: dict[str, dict[str, Scalar]] = {
    "fsdp2": {},
    "fsdp2_reshard_always": {"parallelism.fsdp_reshard_after_forward": "always"},
    "fsdp2_reshard_never": {"parallelism.fsdp_reshard_after_forward": "never"},
    "hsdp_replicate2": {**_ONE, "parallelism.data_parallel_replicate_degree": 2},
    "tp2_sp": {**_ONE, "parallelism.tensor_parallel_degree": 2},
    "tp2_nosp": {**_ONE, "parallelism.tensor_parallel_degree": 2, "parallelism.enable_sequence_parallel": False},
    "pp2_1f1b_lbs1": _pp("1F1B", 1),
    "pp2_1f1b": _pp("1F1B", 2),
    "pp2_1f1b_mbs2": _pp("1F1B", 2, 2),
    "pp2_gpipe_lbs1": _pp("GPipe", 1),
    "pp2_gpipe": _pp("GPipe", 2),
    "pp2_interleaved1f1b": _pp("Interleaved1F1B", 2),
    "pp2_interleaved1f1b_lbs4": _pp("Interleaved1F1B", 4),
    "pp2_loopedbfs": _pp("LoopedBFS", 2),
    "pp2_interleavedzb": _pp("InterleavedZeroBubble", 2),
    "pp2_zbv": _pp("ZBVZeroBubble", 2),
    "pp2_dualpipev": _pp("DualPipeV", 2),
    "pp2_dualpipev_lbs4": _pp("DualPipeV", 4),
    "cp2": {**_ONE, "parallelism.context_parallel_degree": 2},
}

# one layout per family: what the default test suite runs for real
FAMILIES = {"fsdp": "fsdp2", "hsdp": "hsdp_replicate2", "tp": "tp2_sp", "pp": "pp2_1f1b", "cp": "cp2"}


def layout_problems(v: dict[str, Scalar], hardware: str, n_layers: int | None = None) -> list[str]:
    """Why torchtitan 0.3.0 cannot run layout ``v`` (lever values with defaults filled in) on ``hardware``."""
    problems: list[str] = []
    cp = int(v.get("parallelism.context_parallel_degree", 1))
    pp = int(v.get("parallelism.pipeline_parallel_degree", 1))
    if cp > 1 and hardware == "cpu":
        problems.append(
            "parallelism.context_parallel_degree > 1 cannot run on the CPU: torchtitan's CP shards a FlexAttention "
            "BlockMask (torchtitan/distributed/context_parallel/api.py cp_shard asserts one) and FlexAttention has no "
            "CPU backward in torch 2.13, so a CPU run has a dense SDPA mask (measured: AssertionError in cp_shard)"
        )
    if pp > 1:
        schedule = str(v.get("parallelism.pipeline_parallel_schedule", "1F1B"))
        per_rank = 2 if schedule in MULTI_STAGE else 1
        stages = pp * per_rank
        mbs = int(v.get("parallelism.pipeline_parallel_microbatch_size", 1))
        lbs = int(v.get("training.local_batch_size", 1))
        n_mb = lbs // mbs if mbs and lbs % mbs == 0 else 0
        if schedule in NEEDS_MB_GE_STAGES and n_mb and n_mb < stages:
            problems.append(
                f"pipeline schedule {schedule} needs at least as many microbatches as stages: local batch {lbs} / "
                f"microbatch {mbs} = {n_mb} < {stages} stages (torch/distributed/pipelining/schedules.py)"
            )
        if n_layers is not None and stages > n_layers:
            problems.append(f"{stages} pipeline stages ({schedule}, {per_rank} per rank) exceed the {n_layers} layers")
    return problems
