"""Convergence stage of the correctness gate: the candidate's curves against the baseline's.

Both runs use the same seed, data order and objective (the config stage made sure), so their
per-step logged values are compared step by step over the first ``steps`` steps, per *signal*:
``loss`` (global valid-token mean), ``grad_norm`` (pre-clip total norm) and ``heldout_loss`` when
the records carry one.

* Tier B (bit-identical by construction, and an identical config with a different code path):
  every logged value must be exactly equal. Any difference rejects; the evidence names the
  signal, the first and the worst differing step.
* Tier R / N: a two-sided, step-dependent noise band per signal (:class:`LossBand`); the statistic
  is ``max_t |delta_t| / band_t`` and the candidate is rejected when it exceeds 1. Two-sided
  because several faults *lower* the loss (future-token leaks, duplicated data, no warm-up).
* Tier X is never compared (the config stage rejects it).

The band (:func:`calibrate_band`): ``envelope_t`` is the running maximum over steps ``<= t`` of
``max_runs |run_t - reference_t|`` over calibration runs (repeats of the baseline, small init
perturbations, known-legitimate variants); ``band_t = max(safety * envelope_t, floor)``. The
safety factor (default :data:`DEFAULT_SAFETY` = 5) buys margin beyond the calibration runs:
with N exchangeable calibration runs a new legitimate run exceeds their maximum with
probability <= 1/(N+1) (docs/reference/gate.md §4.3; Megatron's golden-value tooling uses 1.5-3, the docs/reference/gate.md
pilot 10). The floor is :data:`FLOOR_QUANTA` print quanta: torchtitan prints the loss with 5
decimals and the grad norm with 4 (``components/metrics.py``: ``{loss:8.5f}``,
``{grad_norm:7.4f}``), so two values whose true difference is ``d`` can print up to ``d + 1``
quantum apart; a floor of 2 quanta accepts true differences up to one quantum.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel

from bot.core.loss_band import LossBand as LossBand  # re-exported: the gate's band type
from bot.core.loss_band import SignalBand as SignalBand  # re-exported
from bot.core.loss_band import series
from bot.core.records import CheckResult, RunRecord, Verdict
from gate.errors import GateInputError

SIGNALS = ("loss", "grad_norm", "heldout_loss")
QUANTUM = {"loss": 1e-5, "grad_norm": 1e-4, "heldout_loss": 1e-5}
FLOOR_QUANTA = 2.0
DEFAULT_SAFETY = 5.0


class SignalResult(BaseModel):
    """The comparison of one signal: where it deviated most, and by how much."""

    signal: str
    steps: int
    equal: bool
    first_diff_step: int | None = None
    worst_step: int | None = None
    deviation: float = 0.0  # signed candidate - baseline at the worst step
    baseline_value: float | None = None
    candidate_value: float | None = None
    band: float | None = None  # band at the worst step (R/N)
    statistic: float | None = None  # max |delta| / band (R/N)
    mean_delta: float = 0.0


# ----------------------------------------------------------------------------- series


_series = series


def _available(record: RunRecord, signal: str, steps: int) -> bool:
    values = _series(record, signal)[:steps]
    return len(values) == steps and all(v is not None for v in values)


def _finite(values: list[float | None]) -> bool:
    return all(v is not None and math.isfinite(v) for v in values)


# ----------------------------------------------------------------------------- calibration


def calibrate_band(
    runs: list[RunRecord],
    reference: RunRecord,
    safety: float = DEFAULT_SAFETY,
    *,
    labels: list[str] | None = None,
    objective_hash: str | None = None,
) -> LossBand:
    """A band from calibration runs compared with ``reference`` (see the module docstring)."""
    if not runs:
        raise GateInputError("calibration needs at least one run besides the reference")
    if safety < 1:
        raise GateInputError(f"the safety factor must be >= 1; got {safety}")
    for record in [reference, *runs]:
        if record.outcome != "ok":
            raise GateInputError(f"calibration run {record.run_id} ended {record.outcome}: {record.reason}")
    steps = min(len(_series(r, "loss")) for r in [reference, *runs])
    signals: dict[str, SignalBand] = {}
    for signal in SIGNALS:
        if not all(_available(r, signal, steps) for r in [reference, *runs]):
            continue
        ref = _series(reference, signal)[:steps]
        envelope: list[float] = []
        running = 0.0
        for t in range(steps):
            worst = max(abs(_series(r, signal)[t] - ref[t]) for r in runs)  # type: ignore[operator]
            running = max(running, worst)
            envelope.append(running)
        floor = FLOOR_QUANTA * QUANTUM[signal]
        signals[signal] = SignalBand(
            signal=signal,
            quantum=QUANTUM[signal],
            floor=floor,
            envelope=envelope,
            band=[max(safety * e, floor) for e in envelope],
        )
    if "loss" not in signals:
        raise GateInputError("calibration runs carry no complete loss curve")
    return LossBand(
        recipe_id=reference.recipe_id,
        stack_key=reference.stack.key(),
        objective_hash=objective_hash,
        safety=safety,
        steps=steps,
        signals=signals,
        calibrated_on=labels or [r.run_id for r in runs],
        reference_run=reference.run_id,
    )


# ----------------------------------------------------------------------------- comparison


def compare_signal(
    baseline: RunRecord, candidate: RunRecord, signal: str, steps: int, band: LossBand | None
) -> SignalResult:
    """Step-by-step comparison of one signal over steps 1..``steps`` (both must carry it)."""
    base = _series(baseline, signal)[:steps]
    cand = _series(candidate, signal)[:steps]
    deltas = [c - b for b, c in zip(base, cand, strict=True)]  # type: ignore[operator]
    diff_steps = [t + 1 for t, d in enumerate(deltas) if base[t] != cand[t]]
    result = SignalResult(
        signal=signal, steps=steps, equal=not diff_steps, mean_delta=sum(deltas) / steps if steps else 0.0
    )
    if diff_steps:
        result.first_diff_step = diff_steps[0]
    use_band = band is not None and signal in band.signals and band.steps >= steps
    if use_band:
        ratios = [abs(d) / band.at(signal, t + 1) for t, d in enumerate(deltas)]  # type: ignore[union-attr]
        worst = max(range(steps), key=lambda t: (ratios[t], -t))
        result.statistic = ratios[worst]
        result.band = band.at(signal, worst + 1)  # type: ignore[union-attr]
    else:
        worst = max(range(steps), key=lambda t: (abs(deltas[t]), -t))
    if diff_steps or use_band:
        result.worst_step = worst + 1
        result.deviation = deltas[worst]
        result.baseline_value, result.candidate_value = base[worst], cand[worst]
    return result


def _describe(r: SignalResult, tier: str) -> str:
    if tier == "B":
        if r.equal:
            return f"{r.signal}: bitwise equal over {r.steps} steps"
        return (
            f"{r.signal}: differs from the baseline from step {r.first_diff_step} (tier B needs bitwise-equal curves); "
            f"worst step {r.worst_step}: {r.baseline_value} -> {r.candidate_value} (delta {r.deviation:+.3g})"
        )
    return (
        f"{r.signal}: max |delta|/band = {r.statistic:.3g} at step {r.worst_step} "
        f"(delta {r.deviation:+.3g}, band {r.band:.3g}; {r.baseline_value} -> {r.candidate_value})"
    )


def _reject(tier: str, reason: str, evidence: dict[str, Any] | None = None) -> Verdict:
    check = CheckResult(name="convergence", passed=False, reasons=[reason], evidence=evidence or {})
    return Verdict(verdict="reject", stage="convergence", tier=tier, reasons=[reason], checks=[check])


def baseline_problem(baseline: RunRecord, steps: int) -> str | None:
    """Why ``baseline`` cannot serve as the curve a candidate's first ``steps`` steps are compared with, or None."""
    if baseline.outcome != "ok":
        return f"baseline run {baseline.run_id} ended {baseline.outcome}: {baseline.reason}"
    if not _available(baseline, "loss", steps):
        return f"baseline run {baseline.run_id} has no complete loss curve for steps 1..{steps}"
    return None


def check_convergence(
    baseline: RunRecord, candidate: RunRecord, *, tier: str, band: LossBand | None, steps: int = 20
) -> Verdict:
    """Compare the candidate's first ``steps`` steps with the baseline's (see the module docstring).

    Raises :class:`GateInputError` when the baseline cannot serve (not ok, too short) or the band
    does not cover the comparison; every candidate problem is a rejection.
    """
    if tier == "X":
        return _reject(tier, "tier X changes the objective: curves are never compared (config stage rejects it)")
    problem = baseline_problem(baseline, steps)
    if problem is not None:
        raise GateInputError(problem)
    if candidate.outcome != "ok":
        return _reject(
            tier,
            f"candidate run ended {candidate.outcome}: {candidate.reason or 'no reason logged'}",
            {"outcome": candidate.outcome},
        )
    if not _available(candidate, "loss", steps):
        return _reject(tier, f"candidate run logged no complete loss curve for steps 1..{steps}")
    if baseline.pinned != candidate.pinned:
        return _reject(tier, f"the runs are not comparable: pinned {baseline.pinned} vs {candidate.pinned}")
    if tier != "B":
        if band is None:
            return _reject(tier, f"tier {tier} needs a calibrated noise band and none is available (fail closed)")
        if band.steps < steps:
            raise GateInputError(f"the noise band covers {band.steps} steps; the comparison needs {steps}")
        if band.stack_key != candidate.stack.key():
            raise GateInputError(
                f"the noise band was calibrated on {band.stack_key}, the candidate ran on {candidate.stack.key()}: recalibrate"
            )
    signals = [s for s in SIGNALS if _available(baseline, s, steps) and _available(candidate, s, steps)]
    skipped = [
        s for s in SIGNALS if s not in signals and (_available(baseline, s, steps) or _available(candidate, s, steps))
    ]
    for signal in signals:
        if not _finite(_series(candidate, signal)[:steps]):
            return _reject(tier, f"candidate {signal} is not finite within steps 1..{steps}")
    results = [compare_signal(baseline, candidate, s, steps, band) for s in signals]
    if tier == "B":
        failed = [r for r in results if not r.equal]
    else:
        failed = [r for r in results if (r.statistic or 0.0) > 1.0]
    evidence = {
        "tier": tier,
        "steps": steps,
        "signals": [r.model_dump() for r in results],
        "skipped_signals": skipped,
        "band": None
        if band is None
        else {
            "stack_key": band.stack_key,
            "safety": band.safety,
            "calibrated_on": band.calibrated_on,
            "precision_tolerance": band.precision_tolerance,
        },
    }
    reasons = [_describe(r, tier) for r in (failed or results)]
    check = CheckResult(
        name="bitwise" if tier == "B" else "band", passed=not failed, reasons=reasons, evidence=evidence
    )
    return Verdict(
        verdict="reject" if failed else "ok", stage="convergence", tier=tier, reasons=reasons, checks=[check]
    )
