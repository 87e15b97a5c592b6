"""bot/bench/gate_faults.py without runs: the case catalogue is well formed and its config half decides correctly."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.bench.gate_faults import (
    BASELINE_RECIPE,
    BenchReport,
    CaseResult,
    baselines,
    candidate_text,
    cases,
    edit_recipe_text,
    render_bench,
)
from bot.core.recipe import parse_recipe_text
from bot.inrank import hooks
from gate.config_check import check_config

ROOT = Path(__file__).resolve().parents[2]
STACK = {"torch": "2.13.0+cpu", "torchtitan": "0.3.0", "device_family": "cpu"}


@pytest.fixture(scope="module")
def bases() -> dict[str, str]:
    return baselines((ROOT / "recipes" / BASELINE_RECIPE).read_text())


def test_catalogue_size_and_names() -> None:
    all_cases = cases()
    assert len({c.name for c in all_cases}) == len(all_cases)
    assert sum(c.kind == "fault" for c in all_cases) >= 30
    assert sum(c.kind == "legit" for c in all_cases) >= 12
    assert sum(c.inject == "code" for c in all_cases) >= 12


def test_code_faults_keep_the_recipe_and_use_known_hooks(bases: dict[str, str]) -> None:
    for case in cases():
        text = candidate_text(case, bases)
        parse_recipe_text(text, case.name)
        if case.inject == "code":  # a hook on the baseline, or on a 2-rank layout of it (levers and cluster only)
            layout = edit_recipe_text(bases[case.baseline], levers=case.levers, cluster=case.cluster, source=case.name)
            assert text == layout and not case.pinned and not case.workload, case.name
            for part in case.hook.split(","):
                assert part.partition(":")[0] in hooks.HOOKS, case.name


SAMPLE = [
    "lr +10%",
    "eps 1e-6",
    "warm-up removed",
    "bf16 params (mixed precision)",
    "lbs 4, global batch unpinned",
    "CP 2 ranks (cannot run on CPU)",
    "grads x2",
    "rank 1 reads rank 0's data",
    "FSDP 2 ranks",
    "TP 2 (+SP)",
    "PP 2 (1F1B)",
    "PP split drops layer 1",
    "GA 2 (lbs 4)",
    "compile",
]


def _config_half(bases: dict[str, str], names: list[str] | None) -> None:
    recipes = {k: parse_recipe_text(t, k) for k, t in bases.items()}
    wrong = []
    for case in cases():
        if names is not None and case.name not in names:
            continue
        verdict = check_config(
            recipes[case.baseline], parse_recipe_text(candidate_text(case, bases), case.name), stack=STACK
        )
        expect_ok = case.kind == "legit" or case.inject == "code"
        if verdict.ok != expect_ok:
            wrong.append((case.name, verdict.reasons[:1]))
        if case.inject == "code":
            assert verdict.tier == ("R" if case.cluster else "B"), case.name
    assert not wrong


def test_config_stage_decides_a_sample_of_cases(bases: dict[str, str]) -> None:
    assert set(SAMPLE) <= {c.name for c in cases()}
    _config_half(bases, SAMPLE)


@pytest.mark.slow
def test_config_stage_rejects_every_config_fault_and_passes_every_legit_change(bases: dict[str, str]) -> None:
    _config_half(bases, None)


def test_report_summary_and_table() -> None:
    rows = [
        CaseResult(
            name="f1",
            kind="fault",
            inject="code",
            what="",
            expected="reject",
            verdict="reject",
            stage="convergence",
            tier="B",
            decided_by="bitwise:loss",
            evidence="loss d=+1e-2",
            correct=True,
        ),
        CaseResult(
            name="f2",
            kind="fault",
            inject="code",
            what="",
            expected="reject",
            verdict="no-op",
            stage="convergence",
            tier="B",
            decided_by="bitwise",
            evidence="equal",
            correct=True,
        ),
        CaseResult(
            name="l1",
            kind="legit",
            inject="config",
            what="",
            expected="ok",
            verdict="reject",
            stage="convergence",
            tier="R",
            decided_by="band:loss",
            evidence="x | y",
            correct=False,
        ),
    ]
    report = BenchReport(steps=20, jobs=1, results=rows, wall_s=12.0)
    s = report.summary()
    assert (
        s["faults_total"],
        s["faults_caught"],
        s["faults_noop"],
        s["legit_total"],
        s["legit_rejected"],
        s["cases"],
    ) == (2, 1, 1, 1, 1, 3)
    table = render_bench(report)
    assert "| f1 | fault | code | reject | reject | convergence | B | bitwise:loss |" in table
    assert "reject **(wrong)**" in table and "x / y" in table  # pipes in evidence cannot break the table
