"""gate/convergence.py on synthetic run records: bitwise tier B, the calibrated two-sided band, evidence."""

from __future__ import annotations

import math

import pytest

from bot.core.records import LaunchShape, RunRecord, StackFingerprint, StepMetric
from gate.convergence import FLOOR_QUANTA, QUANTUM, calibrate_band, check_convergence
from gate.errors import GateInputError

STACK = StackFingerprint(python="3.11", torch="2.13.0+cpu", torchtitan="0.3.0")
LOSS = [4.5 - 0.15 * t for t in range(20)]
GRAD = [1.5 - 0.04 * t for t in range(20)]


def record(loss=LOSS, grad=GRAD, *, outcome="ok", run_id="r", stack=STACK, pinned=None) -> RunRecord:
    steps = [
        StepMetric(step=i + 1, loss=round(v, 5), grad_norm=None if g is None else round(g, 4))
        for i, (v, g) in enumerate(zip(loss, grad, strict=False))
    ]
    return RunRecord(
        run_id=run_id,
        recipe_id="llama3-tiny/cpu",
        recipe_hash="h",
        hardware="cpu",
        stack=stack,
        launch=LaunchShape(launcher="local", nodes=1, devices_per_node=1, world_size=1),
        outcome=outcome,
        steps=steps,
        pinned=pinned or {"debug.seed": 42},
    )


def shifted(values, at, delta):
    return [v + (delta if i + 1 >= at else 0.0) for i, v in enumerate(values)]


@pytest.fixture
def band():
    # two calibration runs: one bitwise equal, one off by one print quantum from step 6 on
    runs = [record(run_id="c1"), record(loss=shifted(LOSS, 6, 1e-5), run_id="c2")]
    return calibrate_band(runs, record(run_id="base"), safety=5.0)


def test_bitwise_equal_curves_pass_tier_b() -> None:
    v = check_convergence(record(), record(run_id="cand"), tier="B", band=None)
    assert v.ok and v.stage == "convergence" and v.tier == "B"
    sig = {s["signal"]: s for s in v.checks[0].evidence["signals"]}
    assert sig["loss"]["equal"] and sig["grad_norm"]["equal"]


def test_tier_b_rejects_any_difference_with_evidence() -> None:
    cand = record(loss=shifted(LOSS, 5, 1e-5), run_id="cand")  # one print quantum, from step 5
    v = check_convergence(record(), cand, tier="B", band=None)
    assert v.verdict == "reject"
    loss = next(s for s in v.checks[0].evidence["signals"] if s["signal"] == "loss")
    assert loss["first_diff_step"] == 5 and not loss["equal"]
    assert math.isclose(loss["deviation"], 1e-5, rel_tol=1e-3)
    assert "differs from the baseline from step 5" in v.reasons[0]


def test_band_is_a_running_max_times_safety_with_a_print_floor(band) -> None:
    loss = band.signals["loss"]
    floor = FLOOR_QUANTA * QUANTUM["loss"]
    assert loss.band[:5] == [floor] * 5  # no deviation yet: the print-rounding floor
    assert all(math.isclose(b, 5e-5, rel_tol=1e-3) for b in loss.band[5:])  # 5 x one quantum, kept afterwards
    assert loss.envelope == sorted(loss.envelope)
    assert band.signals["grad_norm"].band == [FLOOR_QUANTA * QUANTUM["grad_norm"]] * 20
    assert band.stack_key == STACK.key() and band.steps == 20


def test_print_rounding_alone_never_rejects(band) -> None:
    # one quantum of difference where calibration saw none: within the 2-quantum floor
    v = check_convergence(record(), record(loss=shifted(LOSS, 2, 1e-5), run_id="cand"), tier="R", band=band)
    assert v.ok, v.reasons
    v = check_convergence(record(), record(loss=shifted(LOSS, 2, 3e-5), run_id="cand"), tier="R", band=band)
    assert not v.ok


def test_band_rejects_a_lower_loss_too(band) -> None:
    cand = record(loss=shifted(LOSS, 3, -0.01), run_id="cand")  # a fault that *lowers* the loss
    v = check_convergence(record(), cand, tier="R", band=band)
    assert v.verdict == "reject" and v.checks[0].name == "band"
    loss = next(s for s in v.checks[0].evidence["signals"] if s["signal"] == "loss")
    assert loss["deviation"] < 0 and loss["worst_step"] == 3
    assert loss["statistic"] > 1 and math.isclose(loss["band"], band.at("loss", 3))
    assert "max |delta|/band" in v.reasons[0]


def test_grad_norm_alone_catches_a_gradient_scale_fault(band) -> None:
    cand = record(grad=[2 * g for g in GRAD], run_id="cand")  # loss unchanged (clipping), grad norm x2
    v = check_convergence(record(), cand, tier="R", band=band)
    assert not v.ok
    assert v.reasons[0].startswith("grad_norm:")


def test_within_band_passes_with_evidence(band) -> None:
    cand = record(loss=shifted(LOSS, 8, 3e-5), run_id="cand")  # inside 5e-5 after step 6
    v = check_convergence(record(), cand, tier="R", band=band)
    assert v.ok
    loss = next(s for s in v.checks[0].evidence["signals"] if s["signal"] == "loss")
    assert 0 < loss["statistic"] <= 1 and loss["worst_step"] >= 8


def test_tier_r_without_a_band_fails_closed() -> None:
    v = check_convergence(record(), record(run_id="cand"), tier="R", band=None)
    assert not v.ok and "calibrated noise band" in v.reasons[0]


def test_tier_x_is_never_compared() -> None:
    assert not check_convergence(record(), record(), tier="X", band=None).ok


def test_candidate_failures_are_rejections() -> None:
    crashed = record(loss=LOSS[:3], grad=GRAD[:3], outcome="crash", run_id="cand")
    assert "candidate run ended crash" in check_convergence(record(), crashed, tier="B", band=None).reasons[0]
    short = record(loss=LOSS[:10], grad=GRAD[:10], run_id="cand")
    assert "no complete loss curve" in check_convergence(record(), short, tier="B", band=None).reasons[0]
    nan = record(loss=[*LOSS[:5], float("nan"), *LOSS[6:]], run_id="cand")
    assert "not finite" in check_convergence(record(), nan, tier="B", band=None).reasons[0]
    other = record(run_id="cand", pinned={"debug.seed": 43})
    assert "not comparable" in check_convergence(record(), other, tier="B", band=None).reasons[0]


def test_baseline_and_band_problems_are_input_errors(band) -> None:
    with pytest.raises(GateInputError):
        check_convergence(record(outcome="crash"), record(), tier="B", band=None)
    with pytest.raises(GateInputError, match="covers 20 steps"):
        check_convergence(
            record(loss=LOSS * 2, grad=GRAD * 2), record(loss=LOSS * 2, grad=GRAD * 2), tier="R", band=band, steps=30
        )
    other = StackFingerprint(python="3.11", torch="2.14.0", torchtitan="0.3.0")
    with pytest.raises(GateInputError, match="recalibrate"):
        check_convergence(record(), record(stack=other), tier="R", band=band)


def test_missing_grad_norm_is_skipped_not_invented(band) -> None:
    v = check_convergence(record(grad=[None] * 20), record(grad=[None] * 20, run_id="cand"), tier="B", band=None)
    assert v.ok and [s["signal"] for s in v.checks[0].evidence["signals"]] == ["loss"]


def test_precision_tolerance_widens_the_band(band) -> None:
    wide = band.widened(0.01, record())
    assert wide.precision_tolerance == 0.01
    assert math.isclose(wide.at("loss", 1), 0.01 * LOSS[0], rel_tol=1e-6)
    cand = record(loss=[v * 1.005 for v in LOSS], run_id="cand")
    assert not check_convergence(record(), cand, tier="N", band=band).ok
    assert check_convergence(record(), cand, tier="N", band=wide).ok


def test_calibration_needs_usable_runs() -> None:
    with pytest.raises(GateInputError):
        calibrate_band([], record())
    with pytest.raises(GateInputError):
        calibrate_band([record(outcome="hang")], record())
