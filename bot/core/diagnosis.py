"""Diagnosis: a RunRecord turned into the plain facts every policy and every report uses."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from bot.core.records import RunRecord


class Diagnosis(BaseModel):
    outcome: str
    reason: str = ""
    tps: float | None = None  # median tokens/s per device
    tps_cv: float | None = None
    mfu: float | None = None
    step_time_s: float | None = None
    peak_memory_gib: float | None = None
    memory_capacity_gib: float | None = None
    mem_headroom_frac: float | None = None  # 1 - peak / capacity
    breakdown: dict[str, float] = Field(
        default_factory=dict
    )  # fractions of the step: compute, exposed_comm, bubble, recompute, other
    spans_ms: dict[str, float] = Field(default_factory=dict)  # torchtitan's structured JSONL spans (median per step)
    simulated: bool = False

    def context(self) -> dict[str, Any]:
        """Flat ``diagnosis.*`` keys for the lesson and rule matcher."""
        ctx: dict[str, Any] = {
            f"diagnosis.{k}": v for k, v in self.model_dump(exclude={"breakdown", "spans_ms"}).items()
        }
        for k, v in self.breakdown.items():
            ctx[f"diagnosis.breakdown.{k}_frac"] = v
        return ctx


def diagnose(record: RunRecord) -> Diagnosis:
    s = record.summary
    capacity = s.memory_capacity_gib
    if capacity is None:
        pct = [m.memory_pct for m in record.steps if m.memory_pct]
        if pct and s.peak_memory_gib:
            capacity = s.peak_memory_gib / (max(pct) / 100.0)
    headroom = 1.0 - s.peak_memory_gib / capacity if capacity and s.peak_memory_gib is not None else None
    breakdown: dict[str, float] = {}
    total = sum(record.breakdown.values())
    if total > 0:
        breakdown = {k.removesuffix("_s"): v / total for k, v in record.breakdown.items()}
    elif record.spans_ms.get("step"):
        step = record.spans_ms["step"]
        breakdown = {k: v / step for k, v in record.spans_ms.items() if k in ("fwd_bwd", "optim", "fetching_batch")}
    return Diagnosis(
        outcome=record.outcome,
        reason=record.reason,
        tps=s.tps_median,
        tps_cv=s.tps_cv,
        mfu=s.mfu,
        step_time_s=s.step_time_median_s,
        peak_memory_gib=s.peak_memory_gib,
        memory_capacity_gib=capacity,
        mem_headroom_frac=headroom,
        breakdown=breakdown,
        spans_ms=record.spans_ms,
        simulated=record.simulated,
    )
