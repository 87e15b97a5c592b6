"""The whole gate on real CPU torchtitan runs: one legitimate change passes, one code fault is caught.

Three 8-step runs of the tiny recipe (baseline, AC none, a gradient-scale fault), one torch
thread each (a shared 2-core box).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.bench.gate_faults import edit_recipe_text
from gate.api import render_verdict, run_gate
from gate.runs import RunSpec, cached_path, run_one

pytestmark = pytest.mark.torchtitan

BASE = Path(__file__).resolve().parents[2] / "recipes" / "llama3-tiny" / "cpu.yaml"
STEPS = 8


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gate-cache")


def test_legitimate_change_passes_bitwise(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATTUNE_TORCH_THREADS", "1")
    cand = tmp_path / "ac-none.yaml"
    cand.write_text(edit_recipe_text(BASE.read_text(), levers={"activation_checkpoint": "none"}))
    v = run_gate(BASE, cand, steps=STEPS, cache_dir=cache)
    assert v.ok, render_verdict(v)
    assert v.stage == "convergence" and v.tier == "B"
    bitwise = next(c for c in v.checks if c.name == "bitwise")
    assert {s["signal"] for s in bitwise.evidence["signals"]} == {"loss", "grad_norm"}
    assert all(s["equal"] for s in bitwise.evidence["signals"])


def test_code_fault_with_identical_config_is_caught(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATTUNE_TORCH_THREADS", "1")
    text = BASE.read_text()
    baseline = cached_path(RunSpec(label="baseline", recipe_text=text, steps=STEPS), cache)
    if not baseline.exists():  # this test alone: make the baseline run too
        run_one(RunSpec(label="baseline", recipe_text=text, steps=STEPS), cache)
    fault = run_one(RunSpec(label="grads x2", recipe_text=text, steps=STEPS, hook="grad_scale:2"), cache)
    assert fault.outcome == "ok" and fault.hook == "grad_scale:2"
    v = run_gate(
        BASE,
        BASE,
        baseline_run=baseline,
        candidate_run=cached_path(RunSpec(label="f", recipe_text=text, steps=STEPS, hook="grad_scale:2"), cache),
        steps=STEPS,
        cache_dir=cache,
    )
    assert v.verdict == "reject" and v.stage == "convergence" and v.tier == "B"
    check = v.checks[-1]
    assert check.name == "bitwise" and not check.passed
    grad = next(s for s in check.evidence["signals"] if s["signal"] == "grad_norm")
    assert grad["first_diff_step"] == 1  # the pre-clip grad norm doubles from the first step
    assert grad["deviation"] > 0.5
