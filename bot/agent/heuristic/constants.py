"""The default policy's lesson ids and tuning constants, shared by its moves (:mod:`bot.agent.heuristic`)."""

from __future__ import annotations

from bot.core import levers as catalog

POLICY = "heuristic"  # the policy name its proposals carry
RANKED_POLICY = "ranked"  # the same moves, opportunities ranked by the one score
DEGREES = catalog.PARALLEL_DEGREES
RECOMPUTE_LADDER = {"none": "selective", "selective": "full", "memory_budget": "full"}
LESS_RECOMPUTE = {"full": "selective", "selective": "none", "memory_budget": "none"}
OOM_LESSON = "oom-enable-recompute"
OOM_PP_LESSON = "oom-raise-pipeline-parallel"
OOM_COMPILE_LESSON = "oom-compile-under-full-recompute"
# Generic exploration order once the lessons are spent: the levers with the largest effect on step
# time first (recompute, batch split, pipeline schedule, parallel degrees), housekeeping last.
EXPLORE_ORDER = (
    "activation_checkpoint",
    "training.local_batch_size",
    "parallelism.pipeline_parallel_microbatch_size",
    "parallelism.pipeline_parallel_schedule",
    "parallelism.tensor_parallel_degree",
    "parallelism.pipeline_parallel_degree",
    "parallelism.expert_parallel_degree",
    "parallelism.context_parallel_degree",
    "compile.enable",
    "compile.enable_async_tensor_parallel",
    "parallelism.fsdp_reshard_after_forward",
)
MAX_CHAIN = 5  # coupled changes: at most this many stacked steps on top of the incumbent
LONG_SEQ = 8192
# of the step: a pipeline bubble worth filling (a larger local batch, a zero-bubble schedule, fewer DP ranks) and
# the analytic bubble at which more stages are gated behind the fill (lesson pp-fill-the-pipeline fires at the same share)
BUBBLE_FRAC = 0.05
RECOMPUTE_FRAC = 0.05
OOM_BATCH_LESSON = "oom-halve-local-batch"
CP_PARTNER_LESSON = "less-recompute-partner-context-parallel"
BUDGET_PARTNER_LESSON = "less-recompute-partner-memory-budget"
SCHEDULE_PARTNER_LESSON = "less-recompute-partner-1f1b"
PP_PARTNER_LESSON = "less-recompute-partner-pipeline"
RESHARD_PARTNER_LESSON = "less-recompute-partner-reshard-after-forward"
DEGREE_PARTNER_LESSON = "oom-layout-partner-when-recompute-is-slower"
TP_PARTNER_LESSON = "less-recompute-partner-tensor-parallel"
TP_NAME = "parallelism.tensor_parallel_degree"
SCHEDULE = "parallelism.pipeline_parallel_schedule"
LBS = "training.local_batch_size"
STONE_LESSON = "pp-schedule-stepping-stone"
SECOND_PASS_LESSON = "second-pass-over-small-gains"
SHARE_LESSON = "dp-degree-batch-share"
MICROBATCH_LESSON = "pp-schedule-microbatches-fewer-dp-ranks"
# a schedule that needs microbatches >= stages -> the one with the same stage placement (two per rank, V-shaped) and
# the same zero-bubble backward split that does not (bot.core.layouts: NEEDS_MB_GE_STAGES)
STEPPING_STONE = {"DualPipeV": "ZBVZeroBubble"}
TOO_FEW_MICROBATCHES = "needs at least as many microbatches"  # the layout checker's refusal for that bound
COMM_FRAC = 0.25  # exposed communication share that calls for fewer FSDP ranks
RECOMPUTE_LESSON = "ac-less-recompute-when-it-dominates"
LESS_RECOMPUTE_FITS_LESSON = "ac-less-recompute-when-predicted-to-fit"
JUMP_LESSON = "layout-jump-from-cost-model"
REVIEW_LESSON = "layout-jump-review"  # each degree a kept jump moved, one notch back and one further
# of the budget spent: the jump is proposed then (once a campaign) if the lessons have not run out before: a search
# still climbing in its starting layout's basin gets to see another (how it was chosen: docs/agent-moves.md)
JUMP_AT = 1 / 3
SCREEN_CHECK_RUNS = 3  # runs' device-hours the budget must still hold: the check's trial and its pairs
