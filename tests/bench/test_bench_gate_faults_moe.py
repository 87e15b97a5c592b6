"""The MoE suite of ``attune bench gate`` (bot/bench/gate_faults_moe.py): its config stage, without the runs."""

from __future__ import annotations

from pathlib import Path

from bot.bench.gate_faults import candidate_text
from bot.bench.gate_faults_moe import SUITE
from bot.core.recipe import parse_recipe_text
from bot.inrank.hooks import HOOKS
from gate.config_check import check_config

REPO = Path(__file__).resolve().parents[2]


def test_config_faults_are_rejected_and_the_rest_reach_the_runs() -> None:
    recipe, cases, baselines = SUITE
    bases = baselines((REPO / "recipes" / recipe).read_text())
    parsed = {k: parse_recipe_text(t, k) for k, t in bases.items()}
    assert (parsed["ep2"].devices, parsed["ep2"].levers["parallelism.expert_parallel_degree"]) == (2, 2)
    kinds = {c.kind for c in cases()}
    assert kinds == {"fault", "legit"}
    for case in cases():
        if case.hook:
            assert case.hook.partition(":")[0] in HOOKS
        verdict = check_config(parsed[case.baseline], parse_recipe_text(candidate_text(case, bases), case.name))
        if case.inject == "config" and case.kind == "fault":
            assert verdict.verdict == "reject" and any("rule 'moe-" in r for r in verdict.reasons), case.name
        else:
            assert verdict.verdict == "ok", (case.name, verdict.reasons)
    names = [c.name for c in cases()]
    assert "MoE EP 1 -> 2" in names and "MoE local dispatcher" in names and "MoE experts frozen (EP 2)" in names
