"""gate/config_check.py: the config stage on real resolved configs (in-process, no runs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.bench.gate_faults import edit_recipe_text
from bot.core.recipe import Recipe, parse_recipe_text
from gate.config_check import (
    ABSENT,
    ResolvedRecipe,
    check_config,
    check_resolved,
    derived_values,
    diff_fields,
    structure_fields,
)
from gate.errors import GateInputError
from gate.rules import load_tiers

BASE_TEXT = (Path(__file__).resolve().parents[2] / "recipes" / "llama3-tiny" / "cpu.yaml").read_text()
STACK_213 = {"torch": "2.13.0+cpu", "torchtitan": "0.3.0", "device_family": "cpu"}
VARIANTS = "bot.inrank.workloads.variants"


def recipe(**edits) -> Recipe:
    return parse_recipe_text(edit_recipe_text(BASE_TEXT, **edits), "test")


@pytest.fixture(scope="module")
def base() -> Recipe:
    return parse_recipe_text(BASE_TEXT, "base")


def test_identical_recipe_is_tier_b_and_still_needs_the_runs(base: Recipe) -> None:
    v = check_config(base, base, stack=STACK_213)
    assert v.ok and v.stage == "config" and v.tier == "B"
    assert v.requires_convergence and not v.precision_change
    assert "bitwise" in v.reasons[0]


def test_local_batch_change_with_unpinned_global_batch_is_rejected() -> None:
    baseline = recipe(levers={"training.local_batch_size": 8}, pinned={"training.global_batch_size": -1})
    candidate = recipe(levers={"training.local_batch_size": 4}, pinned={"training.global_batch_size": -1})
    v = check_config(baseline, candidate, stack=STACK_213)
    assert v.verdict == "reject" and v.stage == "config" and not v.requires_convergence
    text = "\n".join(v.reasons)
    assert "derived.tokens_per_step: 2048 -> 1024" in text
    assert "requires global_batch_pinned" in text
    invariants = next(c for c in v.checks if c.name == "invariants")
    assert not invariants.passed


def test_local_batch_change_with_pinned_global_batch_passes_the_config_stage(base: Recipe) -> None:
    v = check_config(base, base.with_lever("training.local_batch_size", 4), stack=STACK_213)
    assert v.ok and v.tier == "R" and v.requires_convergence
    changed = next(c for c in v.checks if c.name == "tiers").evidence["changed"]
    assert [c["field"] for c in changed] == ["training.local_batch_size"]


def test_tier_x_change_is_rejected_naming_field_values_and_rule(base: Recipe) -> None:
    candidate = recipe(workload={"module": VARIANTS, "config": "weight_decay_off"})
    v = check_config(base, candidate, stack=STACK_213)
    assert v.verdict == "reject" and v.tier == "X"
    line = next(r for r in v.reasons if "weight_decay" in r)
    assert "optimizer.param_groups.0.optimizer_kwargs.weight_decay: 0.1 -> 0.0" in line
    assert "rule 'optimizer.*'" in line
    # the module change is reported too, after torchtitan's own field
    assert any("workload.module" in r for r in v.reasons)


def test_pinned_change_is_rejected(base: Recipe) -> None:
    v = check_config(base, recipe(pinned={"debug.seed": 43}), stack=STACK_213)
    assert not v.ok
    assert "pinned debug.seed: 42 -> 43" in v.reasons[0]
    assert any("debug.seed: 42 -> 43 (tier X" in r for r in v.reasons)


def test_schedule_length_change_is_an_invariant_violation(base: Recipe) -> None:
    v = check_config(base, recipe(pinned={"lr_scheduler.total_steps": 500}), stack=STACK_213)
    assert any(r.startswith("derived.schedule_total_steps: 1000 -> 500") for r in v.reasons)


def test_precision_change_is_rejected_by_default(base: Recipe) -> None:
    candidate = base.with_lever("training.mixed_precision_param", "bfloat16")
    v = check_config(base, candidate, stack=STACK_213)
    assert v.verdict == "reject" and v.precision_change and v.tier == "N"
    assert "precision change training.mixed_precision_param: 'float32' -> 'bfloat16'" in v.reasons[0]
    assert "precision_tolerance" in v.reasons[0]


def test_precision_change_passes_only_with_an_explicit_tolerance(base: Recipe) -> None:
    candidate = base.with_lever("training.mixed_precision_param", "bfloat16")
    v = check_config(base, candidate, stack=STACK_213, precision_tolerance=0.01)
    assert v.ok and v.requires_convergence and v.precision_change and v.tier == "N"
    assert next(c for c in v.checks if c.name == "precision").evidence["precision_tolerance"] == 0.01


def test_defect_rule_matches_through_the_config_check(base: Recipe) -> None:
    ddp_spmd = recipe(
        levers={"parallelism.data_parallel_replicate_degree": 2},
        cluster={"devices_per_node": 2},
        workload={"module": VARIANTS, "config": "spmd_types_backend"},
    )
    v = check_config(base, ddp_spmd, stack=STACK_213)
    assert any("known stack defect 'torch213-spmd-types-fsdp-dense-mesh'" in r for r in v.reasons)
    fired = next(c for c in v.checks if c.name == "defects").evidence["fired"]
    assert "torch213-spmd-types-fsdp-dense-mesh" in [f["id"] for f in fired]
    # the same candidate on a stack outside the defect's range: the rule stays quiet
    later = check_config(base, ddp_spmd, stack={**STACK_213, "torch": "2.15.0"})
    assert not any("torch213-spmd-types" in r for r in later.reasons)


def test_fsdp_over_two_ranks_passes_where_the_runs_load_a_seed_checkpoint(base: Recipe) -> None:
    v = check_config(base, recipe(cluster={"devices_per_node": 2}), stack=STACK_213)
    assert v.ok and v.tier == "R", v.reasons  # local runs load the objective's seed checkpoint (bot/runner/seed.py)


def test_fsdp_over_two_slurm_nodes_is_legal_because_slurm_runs_load_the_seed_checkpoint(base: Recipe) -> None:
    slurm = base.model_copy(update={"cluster": base.cluster.model_copy(update={"launcher": "slurm"})})
    v = check_config(slurm, recipe(cluster={"devices_per_node": 2, "launcher": "slurm"}), stack=STACK_213)
    assert v.ok and v.tier == "R", v.reasons


def test_fsdp_over_two_ranks_without_seed_checkpoint_is_rejected(base: Recipe, monkeypatch: pytest.MonkeyPatch) -> None:
    # runs that load no seed checkpoint (made by no ATTUNE runner): the sharded init on a CPU mesh would differ
    import gate.config_check as cc

    monkeypatch.setattr(cc, "runs_load_seed", lambda r: False)
    v = check_config(base, recipe(cluster={"devices_per_node": 2}), stack=STACK_213)
    assert not v.ok
    assert any("without a seed checkpoint" in r and "requires seed_checkpoint" in r for r in v.reasons)
    assert any("cpu-dtensor-rng-identical-shards" in r for r in v.reasons)


def test_ddp_over_two_ranks_with_pinned_global_batch_passes(base: Recipe) -> None:
    v = check_config(
        base,
        recipe(levers={"parallelism.data_parallel_replicate_degree": 2}, cluster={"devices_per_node": 2}),
        stack=STACK_213,
    )
    assert v.ok and v.tier == "R", v.reasons


def test_ac_none_is_bit_identical_tier(base: Recipe) -> None:
    v = check_config(base, base.with_lever("activation_checkpoint", "none"), stack=STACK_213)
    assert v.ok and v.tier == "B"
    assert any("activation_checkpoint.mode: 'full' -> 'none'" in r for r in v.reasons)


def test_keeping_freed_host_memory_is_bit_identical_tier(base: Recipe) -> None:
    v = check_config(base, base.with_lever("host.allocator", "retain"), stack=STACK_213)
    assert v.ok and v.tier == "B"
    assert any("env.MALLOC_MMAP_THRESHOLD_: <absent> -> '33554432' (tier B" in r for r in v.reasons), v.reasons


def test_candidate_that_does_not_resolve_is_rejected(base: Recipe) -> None:
    stale_pin = recipe(workload={"module": VARIANTS, "config": "lr_up_10pct"})  # lr 3.3e-3, pin says 3e-3
    v = check_config(base, stale_pin, stack=STACK_213)
    assert not v.ok and v.checks[0].name == "resolve"
    assert "pinned optimizer.lr" in v.reasons[0]


def test_baseline_that_does_not_resolve_is_an_input_error(base: Recipe) -> None:
    bad = recipe(workload={"module": VARIANTS, "config": "lr_up_10pct"})
    with pytest.raises(GateInputError, match="baseline"):
        check_config(bad, base, stack=STACK_213)


def test_config_function_types_are_diffed() -> None:
    class Loss:
        pass

    import dataclasses

    @dataclasses.dataclass
    class A:
        x: int = 1

    @dataclasses.dataclass
    class B:
        x: int = 1

    flat = {"loss.x": 1}
    a, b = structure_fields({"loss": A()}, flat), structure_fields({"loss": B()}, flat)
    assert a["loss.__type__"].endswith("A") and b["loss.__type__"].endswith("B")
    assert "loss.x" not in a  # already in the flat dict
    assert structure_fields({"fn": Loss}, {})["fn"].endswith("Loss")


def test_object_addresses_are_not_differences() -> None:
    from gate.config_check import _norm

    assert _norm("<function f at 0x7f00aa>") == _norm("<function f at 0x7f11bb>") == "<function f>"
    assert diff_fields({"a": True, "b": 1}, {"a": 1, "c": 2}) == [("a", True, 1), ("b", 1, ABSENT), ("c", ABSENT, 2)]


def _resolved(flat: dict, **extra) -> ResolvedRecipe:
    derived = derived_values(flat, 1)
    return ResolvedRecipe(name="t", fields=dict(flat), derived=derived, pinned={}, context={**flat, **derived, **extra})


FLAT = {
    "parallelism.data_parallel_replicate_degree": 1,
    "parallelism.data_parallel_shard_degree": -1,
    "parallelism.tensor_parallel_degree": 1,
    "parallelism.pipeline_parallel_degree": 1,
    "parallelism.context_parallel_degree": 1,
    "parallelism.expert_parallel_degree": 1,
    "training.local_batch_size": 2,
    "training.global_batch_size": 8,
    "training.seq_len": 256,
    "training.steps": 100,
    "lr_scheduler.total_steps": None,
    "lr_scheduler.warmup_steps": 10,
}


def test_training_steps_driving_an_unset_schedule_is_caught() -> None:
    base, cand = _resolved(FLAT), _resolved({**FLAT, "training.steps": 50})
    v = check_resolved(base, cand, tiers=load_tiers(), defects=[])
    assert any(r.startswith("derived.schedule_total_steps: 100 -> 50") for r in v.reasons)
    # with the schedule pinned, training.steps no longer moves the schedule invariant
    pinned = {**FLAT, "lr_scheduler.total_steps": 1000}
    v2 = check_resolved(_resolved(pinned), _resolved({**pinned, "training.steps": 50}), tiers=load_tiers(), defects=[])
    assert not any("derived.schedule_total_steps" in r for r in v2.reasons)


def test_unknown_field_fails_closed() -> None:
    v = check_resolved(_resolved(FLAT), _resolved({**FLAT, "brand_new.knob": 3}), tiers=load_tiers(), defects=[])
    assert v.verdict == "reject" and v.tier == "X"
    assert "brand_new.knob: <absent> -> 3 (tier X, rule '*'" in v.reasons[0]
    v2 = check_resolved(_resolved(FLAT), _resolved({**FLAT, "brand_new.knob": 3}), tiers=[], defects=[])
    assert v2.tier == "X"


def test_derived_values_follow_torchtitan() -> None:
    d = derived_values({**FLAT, "training.global_batch_size": -1}, 4)
    assert d["derived.dp_degree"] == 4 and d["derived.global_batch_size"] == 8 and d["derived.grad_accum_steps"] == 1
    assert d["derived.tokens_per_step"] == 8 * 256 and d["derived.schedule_total_steps"] == 100
    d2 = derived_values({**FLAT, "parallelism.data_parallel_replicate_degree": 2}, 2)
    assert d2["derived.dp_shard_degree"] == 1 and d2["derived.grad_accum_steps"] == 2
