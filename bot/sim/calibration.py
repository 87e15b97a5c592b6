"""Calibration of the simulator against published throughput (``calibration.yaml``, docs/reference/performance-model.md §7).

``calibrate()`` predicts every row with the current efficiency factors and reports per-row relative error plus
mean / max absolute error over all rows, fit rows and holdout rows separately. ``fit_factors()`` refits the fitted
factors by coordinate descent on mean |log(predicted / measured)| over ``split: fit`` rows only -- holdout rows
are dropped before the objective is built, so they cannot influence the fit. Predictions ignore the memory check
(other stacks manage memory differently); the predicted peak and whether it would OOM are reported alongside.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, Field
from tabulate import tabulate

from bot.sim.efficiency import DEFAULT_FACTORS, EfficiencyFactors
from bot.sim.simulate import evaluate

CALIBRATION_FILE = Path(__file__).with_name("calibration.yaml")

# Search bounds for fitted factors (log-space coordinate descent).
BOUNDS: dict[str, tuple[float, float]] = {
    "gemm_eff": (0.3, 0.95),
    "attn_eff": (0.1, 0.8),
    "elem_passes": (2.0, 120.0),
    "compile_elem": (0.1, 1.0),
    "fp8_tensorwise": (1.0, 2.0),
    "fp8_rowwise": (0.8, 2.0),
    "async_tp_hidden": (0.0, 0.95),
    "hw_eff.h100-96gb": (0.5, 1.2),
    "hw_eff.b200": (0.5, 1.2),
    "stack.megatron": (0.6, 1.6),
    "stack.meta": (0.6, 1.6),
    "grouped_d0": (32.0, 8192.0),
    "dropless_dispatch_s": (1e-9, 1e-6),
}


class CalibrationRow(BaseModel):
    """One published measurement, with the config expressed as simulator levers."""

    id: str
    source: str
    model: str
    hardware: str
    gpus: int
    devices_per_node: int = 8
    precision: str
    config: str
    levers: dict[str, Any]
    pinned: dict[str, Any]
    measured_tps: float = Field(description="published tokens/s/GPU")
    measured_memory_gib: float | None = None
    split: Literal["fit", "holdout"]
    outlier: str = Field("", description="non-empty: why this row is a known outlier (still reported and counted)")
    notes: str = ""


class RowResult(BaseModel):
    id: str
    split: Literal["fit", "holdout"]
    model: str
    hardware: str
    gpus: int
    source: str
    measured: float
    predicted: float
    rel_error: float = Field(description="predicted / measured - 1 (simulated vs published)")
    measured_memory_gib: float | None = None
    predicted_memory_gib: float | None = None
    memory_rel_error: float | None = None
    would_oom: bool = False
    outlier: str = ""


class CalibrationReport(BaseModel):
    """Per-row errors and summary statistics; predictions are simulated, measurements published."""

    label: Literal["simulated vs published"] = "simulated vs published"
    rows: list[RowResult]
    n_fit: int
    n_holdout: int
    mean_abs_error: float
    max_abs_error: float
    fit_mean_abs_error: float
    fit_max_abs_error: float
    holdout_mean_abs_error: float
    holdout_max_abs_error: float
    mean_abs_error_excl_outliers: float
    holdout_mean_abs_error_excl_outliers: float
    outliers: list[str]
    memory_mean_abs_error: float | None = None
    factors: dict[str, Any]


def load_rows(path: Path = CALIBRATION_FILE) -> list[CalibrationRow]:
    data = yaml.safe_load(path.read_text())
    return [CalibrationRow(**row) for row in data["rows"]]


def predict(row: CalibrationRow, factors: EfficiencyFactors) -> RowResult:
    res = evaluate(
        row.model,
        row.hardware,
        row.gpus // row.devices_per_node,
        row.devices_per_node,
        row.levers,
        row.pinned,
        seed=0,
        factors=factors,
        check_memory=False,
    )
    if res.outcome != "ok":
        raise ValueError(f"calibration row {row.id}: simulator says {res.outcome}: {res.reason}")
    pred = res.tokens_per_s_per_device
    mem = res.peak_memory_gib
    mem_err = None
    if row.measured_memory_gib and mem is not None:
        mem_err = mem / row.measured_memory_gib - 1.0
    return RowResult(
        id=row.id,
        split=row.split,
        model=row.model,
        hardware=row.hardware,
        gpus=row.gpus,
        source=row.source,
        measured=row.measured_tps,
        predicted=pred,
        rel_error=pred / row.measured_tps - 1.0,
        measured_memory_gib=row.measured_memory_gib,
        predicted_memory_gib=mem,
        memory_rel_error=mem_err,
        would_oom=bool(mem is not None and res.memory_capacity_gib is not None and mem > res.memory_capacity_gib),
        outlier=row.outlier,
    )


def _stats(errors: list[float]) -> tuple[float, float]:
    if not errors:
        return 0.0, 0.0
    return sum(abs(e) for e in errors) / len(errors), max(abs(e) for e in errors)


def calibrate(
    factors: EfficiencyFactors | None = None, refit: bool = False, rows: list[CalibrationRow] | None = None
) -> CalibrationReport:
    """Predict every calibration row; with ``refit`` first refit the factors on the fit rows only."""
    rows = load_rows() if rows is None else rows
    factors = factors or DEFAULT_FACTORS
    if refit:
        factors = fit_factors(rows, start=factors)
    results = [predict(r, factors) for r in rows]
    fit_err = [r.rel_error for r in results if r.split == "fit"]
    hold_err = [r.rel_error for r in results if r.split == "holdout"]
    mem_err = [r.memory_rel_error for r in results if r.memory_rel_error is not None]
    all_mean, all_max = _stats(fit_err + hold_err)
    fit_mean, fit_max = _stats(fit_err)
    hold_mean, hold_max = _stats(hold_err)
    clean = [r for r in results if not r.outlier]
    return CalibrationReport(
        rows=results,
        n_fit=len(fit_err),
        n_holdout=len(hold_err),
        mean_abs_error=all_mean,
        max_abs_error=all_max,
        fit_mean_abs_error=fit_mean,
        fit_max_abs_error=fit_max,
        holdout_mean_abs_error=hold_mean,
        holdout_max_abs_error=hold_max,
        mean_abs_error_excl_outliers=_stats([r.rel_error for r in clean])[0],
        holdout_mean_abs_error_excl_outliers=_stats([r.rel_error for r in clean if r.split == "holdout"])[0],
        outliers=[r.id for r in results if r.outlier],
        memory_mean_abs_error=_stats(mem_err)[0] if mem_err else None,
        factors={name: factors.get(name) for name in EfficiencyFactors.FITTED},
    )


def _objective(rows: list[CalibrationRow], factors: EfficiencyFactors) -> float:
    total = 0.0
    for row in rows:
        res = evaluate(
            row.model,
            row.hardware,
            row.gpus // row.devices_per_node,
            row.devices_per_node,
            row.levers,
            row.pinned,
            seed=0,
            factors=factors,
            check_memory=False,
        )
        if res.outcome != "ok" or res.tokens_per_s_per_device <= 0:
            return math.inf
        total += abs(math.log(res.tokens_per_s_per_device / row.measured_tps))
    return total / len(rows)


def fit_factors(
    rows: list[CalibrationRow] | None = None,
    start: EfficiencyFactors = DEFAULT_FACTORS,
    names: tuple[str, ...] = EfficiencyFactors.FITTED,
    rounds: int = 40,
) -> EfficiencyFactors:
    """Fit ``names`` on the ``split: fit`` rows only (coordinate descent in log space, bounded)."""
    fit_rows = [r for r in (load_rows() if rows is None else rows) if r.split == "fit"]
    if not fit_rows:
        raise ValueError("no rows with split: fit")
    best = start
    best_obj = _objective(fit_rows, best)
    step = {n: 0.2 for n in names}
    for _ in range(rounds):
        improved = False
        for name in names:
            lo, hi = BOUNDS[name]
            cur = best.get(name)
            for direction in (1.0, -1.0):
                if name == "async_tp_hidden":
                    trial_val = min(hi, max(lo, cur + direction * step[name] * 0.5))
                else:
                    trial_val = min(hi, max(lo, cur * math.exp(direction * step[name])))
                if trial_val == cur:
                    continue
                trial = best.with_values({name: trial_val})
                obj = _objective(fit_rows, trial)
                if obj < best_obj - 1e-9:
                    best, best_obj, improved = trial, obj, True
                    break
            else:
                step[name] *= 0.5
        if not improved and max(step.values()) < 1e-3:
            break
    return best


def render_calibration(report: CalibrationReport) -> str:
    """Markdown: one table row per calibration row, then the summary (predictions are simulated)."""
    table = [
        [
            r.id + (" (outlier)" if r.outlier else ""),
            r.split,
            r.model,
            r.hardware,
            r.gpus,
            f"{r.measured:,.0f}",
            f"{r.predicted:,.0f}",
            f"{r.rel_error:+.1%}",
            "" if r.memory_rel_error is None else f"{r.measured_memory_gib:.1f} / {r.predicted_memory_gib:.1f}",
            r.source,
        ]
        for r in report.rows
    ]
    headers = [
        "row",
        "split",
        "model",
        "hardware",
        "GPUs",
        "measured tok/s/GPU",
        "simulated tok/s/GPU",
        "error",
        "memory GiB (meas / sim)",
        "source",
    ]
    summary = [
        ["all rows", report.n_fit + report.n_holdout, f"{report.mean_abs_error:.1%}", f"{report.max_abs_error:.1%}"],
        ["fit rows", report.n_fit, f"{report.fit_mean_abs_error:.1%}", f"{report.fit_max_abs_error:.1%}"],
        [
            "holdout rows",
            report.n_holdout,
            f"{report.holdout_mean_abs_error:.1%}",
            f"{report.holdout_max_abs_error:.1%}",
        ],
    ]
    parts = [
        "### Simulator calibration (simulated vs published tokens/s/GPU)",
        "",
        tabulate(table, headers=headers, tablefmt="github"),
        "",
        tabulate(summary, headers=["set", "rows", "mean abs error", "max abs error"], tablefmt="github"),
    ]
    if report.outliers:
        parts += [
            "",
            f"Excluding the flagged outliers ({', '.join(report.outliers)}): all rows "
            f"{report.mean_abs_error_excl_outliers:.1%}, holdout rows "
            f"{report.holdout_mean_abs_error_excl_outliers:.1%} mean abs error.",
        ]
    if report.memory_mean_abs_error is not None:
        parts += ["", f"Peak-memory mean abs error on rows with a published peak: {report.memory_mean_abs_error:.1%}"]
    return "\n".join(parts) + "\n"
