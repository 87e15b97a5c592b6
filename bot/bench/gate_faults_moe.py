"""The MoE suite of the gate's fault-injection benchmark (``attune bench gate --suite moe``).

The same protocol as :mod:`bot.bench.gate_faults` (config stage, then real ~20-step CPU runs against a calibrated band),
on ``recipes/moe-tiny/cpu.yaml`` (torchtitan's Qwen3-MoE code, 8 experts, top-2):

* **config faults** — objective-changing MoE settings made in a config function
  (:mod:`bot.inrank.workloads.moe_variants`), each rejected by its own ``moe-*`` rule of ``gate/rules/objective.yaml``;
  forced balanced routing also through torchtitan's ``--debug.moe_force_load_balance`` flag.
* **code faults** — the MoE fault hooks of :mod:`bot.inrank.hooks` (router top-k silently reduced, tokens dropped
  as a capacity limit would, the load-balancing update lost, a combine without the routing scores), and expert
  weights not updated under EP 2; the candidate's config is the baseline's, so the runs must be bitwise identical.
* **legitimate changes** — EP 1 -> 2 on 2 ranks (every run loads the objective's seed checkpoint,
  :mod:`bot.runner.seed`), the other CPU token dispatcher (``moe_tiny_cpu_local_dispatch``), AC none / selective,
  another grad-accumulation split.
"""

from __future__ import annotations

from bot.bench.gate_faults import Case, edit_recipe_text

BASELINE_RECIPE = "moe-tiny/cpu.yaml"
MOE_VARIANTS = "bot.inrank.workloads.moe_variants"
EP2 = {"cluster": {"devices_per_node": 2}, "levers": {"parallelism.expert_parallel_degree": 2}}
TWO_RANKS = {"cluster": {"devices_per_node": 2}, "levers": {"parallelism.expert_parallel_degree": 1}}
EXPERT_WEIGHTS = r"drop_grads:\.moe\.routed_experts\."


def _variant(config: str) -> dict[str, str]:
    return {"module": MOE_VARIANTS, "config": config}


def baselines(base_text: str) -> dict[str, str]:
    """The shipped MoE recipe (1 rank), the same on 2 ranks with EP 1, and on 2 ranks with EP 2."""
    two = {"OMP_NUM_THREADS": "1"}  # 2 ranks x 1 thread on the 2 cores (recipes/moe-tiny/cpu-2rank.yaml)
    text2 = base_text.replace('OMP_NUM_THREADS: "2"', f'OMP_NUM_THREADS: "{two["OMP_NUM_THREADS"]}"')
    return {
        "base": base_text,
        "ep1x2": edit_recipe_text(text2, levers=TWO_RANKS["levers"], cluster=TWO_RANKS["cluster"], source="ep1x2"),
        "ep2": edit_recipe_text(text2, levers=EP2["levers"], cluster=EP2["cluster"], source="ep2"),
    }


def cases() -> list[Case]:
    """The MoE cases (faults first, then held-out legitimate changes)."""
    cfg = "config"
    faults = [
        Case(
            name="MoE experts 8 -> 4",
            kind="fault",
            inject=cfg,
            what="num_experts 8 -> 4 (config function)",
            workload=_variant("experts_4"),
        ),
        Case(
            name="MoE top-k 2 -> 1",
            kind="fault",
            inject=cfg,
            what="router top_k 2 -> 1 (config function)",
            workload=_variant("top_k_1"),
        ),
        Case(
            name="MoE sigmoid router",
            kind="fault",
            inject=cfg,
            what="router score_func softmax -> sigmoid",
            workload=_variant("sigmoid_router"),
        ),
        Case(
            name="MoE route_norm off",
            kind="fault",
            inject=cfg,
            what="top-k gating weights not renormalised",
            workload=_variant("no_route_norm"),
        ),
        Case(
            name="MoE bias rate x10",
            kind="fault",
            inject=cfg,
            what="load_balance_coeff 1e-3 -> 1e-2",
            workload=_variant("bias_rate_10x"),
        ),
        Case(
            name="MoE load balancing off",
            kind="fault",
            inject=cfg,
            what="load_balance_coeff 1e-3 -> None",
            workload=_variant("load_balance_off"),
        ),
        Case(
            name="MoE capacity 0.5",
            kind="fault",
            inject=cfg,
            what="HybridEP dispatcher, non_blocking_capacity_factor 0.5 (drops tokens)",
            workload=_variant("capacity_half"),
        ),
        Case(
            name="MoE forced balance (config)",
            kind="fault",
            inject=cfg,
            what="router._debug_force_load_balance (torchtitan#1670)",
            workload=_variant("forced_balance"),
        ),
        Case(
            name="MoE forced balance (flag)",
            kind="fault",
            inject=cfg,
            what="--debug.moe_force_load_balance",
            pinned={"debug.moe_force_load_balance": True},
        ),
    ]
    code = [
        ("MoE top-k silently 1", "moe_topk_reduced", "each token routed to its top-1 expert only"),
        (
            "MoE tokens dropped (capacity 1.0)",
            "moe_capacity_drop:1.0",
            "routed tokens beyond capacity 1.0 per expert get weight 0",
        ),
        ("MoE balancing update lost", "moe_balance_off", "the expert-bias (load-balancing) update adds nothing"),
        ("MoE combine without scores", "moe_unweighted_combine", "expert outputs summed without the routing scores"),
    ]
    faults += [Case(name=n, kind="fault", inject="code", what=w, hook=h) for n, h, w in code]
    faults += [
        Case(
            name="MoE experts frozen (EP 2)",
            kind="fault",
            inject="code",
            what="EP 2: routed-expert gradients dropped (never updated)",
            baseline="ep2",
            hook=EXPERT_WEIGHTS,
        ),
        Case(
            name="MoE combine without scores (EP 2)",
            kind="fault",
            inject="code",
            what="EP 2: all-to-all combine ignores the routing scores",
            baseline="ep2",
            hook="moe_unweighted_combine",
        ),
    ]
    legit = [
        Case(
            name="MoE EP 1 -> 2",
            kind="legit",
            inject="layout",
            what="2 ranks: expert_parallel_degree 1 -> 2 (seed checkpoint)",
            baseline="ep1x2",
            levers={"parallelism.expert_parallel_degree": 2},
        ),
        Case(
            name="MoE local dispatcher",
            kind="legit",
            inject=cfg,
            what="AllToAllTokenDispatcher -> LocalTokenDispatcher (EP 1)",
            workload={"config": "moe_tiny_cpu_local_dispatch"},
        ),
        Case(
            name="MoE AC none",
            kind="legit",
            inject=cfg,
            what="activation_checkpoint full -> none",
            levers={"activation_checkpoint": "none"},
        ),
        Case(
            name="MoE AC selective",
            kind="legit",
            inject=cfg,
            what="activation_checkpoint full -> selective",
            levers={"activation_checkpoint": "selective"},
        ),
        Case(
            name="MoE GA 1 (lbs 8)",
            kind="legit",
            inject=cfg,
            what="local batch 2 -> 8, global batch pinned (GA 4 -> 1)",
            levers={"training.local_batch_size": 8},
        ),
    ]
    return faults + legit


SUITE = (BASELINE_RECIPE, cases, baselines)
