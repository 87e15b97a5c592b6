"""The gate's calibrated loss-curve band, :class:`LossBand` (a record: campaigns store it, the gate computes and
applies it). Not the throughput band of the baseline runs (``bot.core.state.ThroughputBand``)."""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import BaseModel, Field

from bot.core.records import RunRecord


def series(record: RunRecord, signal: str) -> list[float | None]:
    """Values of ``signal`` for steps 1..n (None where a step or the value is missing)."""
    by_step = {s.step: getattr(s, signal, None) for s in record.steps}
    n = max(by_step, default=0)
    return [by_step.get(t) for t in range(1, n + 1)]


class SignalBand(BaseModel):
    """One signal's band, indexed by step - 1."""

    signal: str
    quantum: float
    floor: float
    envelope: list[float]  # running max of the calibration runs' |delta|
    band: list[float]


class LossBand(BaseModel):
    """The loss-curve band: a calibrated, step-dependent, two-sided noise band per signal for one recipe on one stack."""

    recipe_id: str
    stack_key: str
    objective_hash: str | None = None
    safety: float
    steps: int
    signals: dict[str, SignalBand]
    calibrated_on: list[str] = Field(default_factory=list)  # labels (or run ids) of the calibration runs
    reference_run: str = ""
    created_at: str = Field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    precision_tolerance: float | None = None  # relative widening for an accepted precision change

    def at(self, signal: str, step: int) -> float:
        return self.signals[signal].band[step - 1]

    def widened(self, tolerance: float, reference: RunRecord) -> LossBand:
        """The band widened to at least ``tolerance`` x |reference value| per step (precision changes)."""
        signals = {}
        for name, sb in self.signals.items():
            ref = series(reference, name)
            band = []
            for i, b in enumerate(sb.band):
                r = ref[i] if i < len(ref) else None
                band.append(b if r is None else max(b, tolerance * abs(r)))
            signals[name] = sb.model_copy(update={"band": band})
        return self.model_copy(update={"signals": signals, "precision_tolerance": tolerance})
