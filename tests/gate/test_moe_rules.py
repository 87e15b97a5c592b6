"""MoE correctness in the config check: every objective-changing MoE setting is rejected by its own named rule
(gate/rules/objective.yaml ``moe-*``), on real resolutions of the moe-tiny config-function variants; the
legitimate dispatcher change passes as tier R."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.core.recipe import Recipe, load_recipe
from gate import rules
from gate.config_check import check_config, check_resolved, describe, local_stack

REPO = Path(__file__).resolve().parents[2]
BASE = load_recipe(REPO / "recipes" / "moe-tiny" / "cpu.yaml")
VARIANTS = "bot.inrank.workloads.moe_variants"


def variant(config: str, module: str = VARIANTS) -> Recipe:
    return BASE.model_copy(update={"workload": BASE.workload.model_copy(update={"module": module, "config": config})})


def fired(verdict) -> set[str]:
    return {r.split("rule '")[1].split("'")[0] for r in verdict.reasons if "rule '" in r}


@pytest.mark.parametrize(
    ("config", "rule"),
    [
        ("experts_4", "moe-num-experts"),
        ("top_k_1", "moe-top-k"),
        ("sigmoid_router", "moe-router-score-func"),
        ("no_route_norm", "moe-router-score-scaling"),
        ("bias_rate_10x", "moe-router-bias-update-rate"),
        ("load_balance_off", "moe-router-bias-update-rate"),
        ("capacity_half", "moe-capacity-factor"),
        ("forced_balance", "moe-forced-balanced-routing"),
    ],
)
def test_each_objective_changing_moe_setting_is_rejected_by_its_rule(config: str, rule: str) -> None:
    verdict = check_config(BASE, variant(config))
    assert verdict.verdict == "reject"
    assert rule in fired(verdict), verdict.reasons
    tiers = verdict.checks[1].evidence["changed"]
    assert any(
        c["rule"] == rule and c["tier"] == "X" and c["field"].startswith("model_spec.model.layers.") for c in tiers
    )


def test_forced_balance_flag_is_its_own_rule() -> None:
    cand = BASE.model_copy(update={"pinned": {**BASE.pinned, "debug.moe_force_load_balance": True}})
    verdict = check_config(BASE, cand)
    assert verdict.verdict == "reject" and "moe-forced-balanced-routing-flag" in fired(verdict)


def test_an_aux_loss_coefficient_field_is_rejected_by_its_rule() -> None:
    """torchtitan 0.3.0 has no aux loss; a config function that adds a coefficient field meets moe-aux-loss-coefficient."""
    base = describe(BASE, stack=local_stack())
    field = "model_spec.model.layers.0.moe.aux_loss_coeff"
    a = base.model_copy(update={"fields": {**base.fields, field: 1e-3}})
    b = base.model_copy(update={"fields": {**base.fields, field: 1e-2}})
    verdict = check_resolved(a, b)
    assert verdict.verdict == "reject" and fired(verdict) == {"moe-aux-loss-coefficient"}


def test_the_cpu_dispatcher_change_passes_as_reduction_order() -> None:
    verdict = check_config(BASE, variant("moe_tiny_cpu_local_dispatch", module=BASE.workload.module))
    assert verdict.verdict == "ok" and verdict.tier == "R" and verdict.requires_convergence
    assert fired(verdict) == {"moe-token-dispatcher", "workload.config"}


def test_moe_rules_are_named_cited_and_come_before_the_model_spec_catch_all() -> None:
    tiers = rules.load_tiers()
    names = [r.name for r in tiers]
    moe = [r for r in tiers if r.id and r.id.startswith("moe-")]
    assert len(moe) >= 10 and all(r.source.startswith("https://") for r in moe)
    assert all(names.index(r.name) < names.index("model_spec*") for r in moe)
