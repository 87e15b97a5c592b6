"""The campaign records: the state a policy reads and a driver stores (Campaign, Step, RunRef, the noise band),
and the actions and events of the state machine in :mod:`bot.campaign.machine`.

They live here, at the bottom of the house, so that policies (``bot.agent``) and the campaign logic
(``bot.campaign``) read the same records without importing each other.
"""

from __future__ import annotations

import math
import statistics
from typing import Annotated, Literal

from pydantic import BaseModel, Field

from bot.core.band import Band
from bot.core.records import Change, RunRecord, Scalar, Stop, Verdict

Phase = Literal["baseline", "stepping", "finished"]


class RunRef(BaseModel):
    """What the campaign keeps of a run (the full record lives on disk / on the branch)."""

    kind: Literal["baseline", "trial", "confirm", "incumbent"]  # incumbent: the A/B re-measure inside a confirm
    n: int = 0  # step number (0 for baseline)
    attempt: int = 1
    outcome: str
    reason: str = ""
    tps: float | None = None  # median tokens/s per device
    tps_cv: float | None = None
    device_hours: float = 0.0
    record: str = ""  # path of the record (driver-relative)
    simulated: bool = False
    # a re-measure (confirm) run may be followed at once by a fresh run of the incumbent, an A/B pair: a machine
    # whose speed drifts between the incumbent's measurement and the candidate's then cannot fake a gain
    reference_tps: float | None = None
    reference_record: str = ""

    @classmethod
    def of(cls, record: RunRecord, *, kind: str, n: int = 0, attempt: int = 1, ref: str = "") -> RunRef:
        """What the campaign keeps of ``record`` (stored at ``ref``): the one RunRecord -> RunRef conversion."""
        s = record.summary
        return cls(kind=kind, n=n, attempt=attempt, outcome=record.outcome, reason=record.reason, tps=s.tps_median,  # type: ignore[arg-type]
                   tps_cv=s.tps_cv, device_hours=s.device_hours, record=ref, simulated=record.simulated)


class NoiseBand(BaseModel):
    k: float
    floor: float
    spread: float  # observed relative spread of the baseline runs ((max-min)/median)
    band: float  # max(k x spread, floor): the gain a change must clear

    @classmethod
    def from_runs(cls, tps: list[float], *, k: float, floor: float) -> NoiseBand:
        med = statistics.median(tps)
        spread = (max(tps) - min(tps)) / med if med else 0.0
        return cls(k=k, floor=floor, spread=spread, band=max(k * spread, floor))


class Step(BaseModel):
    n: int
    change: Change
    stacked_on: int | None = None  # OOM retry: built on top of that step's layout
    state: Literal["proposed", "open", "merged", "closed"] = "proposed"
    branch: str = ""
    number: int | None = None
    head_sha: str = ""
    levers: dict[str, Scalar] = Field(default_factory=dict)  # the candidate recipe's levers
    config_verdict: Verdict | None = None
    verdict: Verdict | None = None
    runs: list[RunRef] = Field(default_factory=list)
    gain: float | None = None
    kept: bool = False
    close_reason: str = ""


# ----------------------------------------------------------------------------- actions
class RunBaseline(BaseModel):
    type: Literal["run_baseline"] = "run_baseline"
    attempt: int


class OpenStep(BaseModel):
    type: Literal["open_step"] = "open_step"
    n: int


class CheckConfig(BaseModel):
    type: Literal["check_config"] = "check_config"
    n: int


class RunTrial(BaseModel):
    type: Literal["run_trial"] = "run_trial"
    n: int


class Confirm(BaseModel):
    type: Literal["confirm"] = "confirm"
    n: int


class CheckConvergence(BaseModel):
    type: Literal["check_convergence"] = "check_convergence"
    n: int


class Comment(BaseModel):
    type: Literal["comment"] = "comment"
    n: int  # 0 = the campaign itself
    kind: Literal["start", "report", "summary"] = "report"


class SetStatus(BaseModel):
    type: Literal["set_status"] = "set_status"
    n: int
    state: Literal["pending", "success", "failure", "error"]
    description: str


class Merge(BaseModel):
    type: Literal["merge"] = "merge"
    n: int


class Close(BaseModel):
    type: Literal["close"] = "close"
    n: int
    reason: str


class Propose(BaseModel):
    type: Literal["propose"] = "propose"


class Calibrate(BaseModel):
    """Calibrate the gate's loss-curve noise band for the baseline (once, after the baseline runs)."""

    type: Literal["calibrate"] = "calibrate"


class Finish(BaseModel):
    type: Literal["finish"] = "finish"
    reason: str


Action = Annotated[
    RunBaseline | OpenStep | CheckConfig | RunTrial | Confirm | CheckConvergence | Comment | SetStatus | Merge | Close | Propose | Calibrate
    | Finish,
    Field(discriminator="type"),
]


# ----------------------------------------------------------------------------- events
class CampaignRequested(BaseModel):
    type: Literal["requested"] = "requested"


class RunFinished(BaseModel):
    type: Literal["run_finished"] = "run_finished"
    run: RunRef


class Proposed(BaseModel):
    type: Literal["proposed"] = "proposed"
    decision: Change | Stop


class StepOpened(BaseModel):
    type: Literal["step_opened"] = "step_opened"
    n: int
    branch: str
    head_sha: str
    number: int | None = None


class GateVerdict(BaseModel):
    type: Literal["gate_verdict"] = "gate_verdict"
    n: int
    verdict: Verdict


class Calibrated(BaseModel):
    """The gate's loss band for this campaign (None: none could be made; tier-R/N steps then fail closed)."""

    type: Literal["calibrated"] = "calibrated"
    band: Band | None = None
    device_hours: float = 0.0  # the calibration runs made for it (cached runs cost nothing)
    note: str = ""


class StepMerged(BaseModel):
    type: Literal["step_merged"] = "step_merged"
    n: int


class StepClosed(BaseModel):
    type: Literal["step_closed"] = "step_closed"
    n: int


class Done(BaseModel):
    """A side-effect-only action (comment, status, finish) was carried out."""

    type: Literal["done"] = "done"


class BudgetExhausted(BaseModel):
    type: Literal["budget_exhausted"] = "budget_exhausted"


class StopRequested(BaseModel):
    type: Literal["stop_requested"] = "stop_requested"
    why: str = "stop requested"


class BudgetAdded(BaseModel):
    type: Literal["budget_added"] = "budget_added"
    device_hours: float


Event = Annotated[
    CampaignRequested | RunFinished | Proposed | StepOpened | GateVerdict | Calibrated | StepMerged | StepClosed | Done | BudgetExhausted
    | StopRequested | BudgetAdded,
    Field(discriminator="type"),
]


# ----------------------------------------------------------------------------- state
class Campaign(BaseModel):
    id: str
    recipe_path: str
    recipe_id: str
    policy: str = "heuristic"
    devices: int = 1
    usd_per_device_hour: float = 0.0
    budget: float  # device-hours
    spent: float = 0.0
    baseline_runs_wanted: int = Field(default=2, ge=2)
    # runs made before the measured baseline runs, reported but not counted in the baseline or its band: the first
    # run after an idle spell on a real machine is often slow (clocks, caches), which inflated the band to 70%
    baseline_warmup_runs: int = Field(default=0, ge=0)
    band_k: float = 2.0
    band_floor: float = 0.05
    # a trial gain above decisive_k x the noise band is kept without a re-measure: run-to-run noise cannot make
    # it (None: every gain is re-measured; machines whose speed drifts between runs need the A/B re-measure)
    decisive_k: float | None = Field(default=None, gt=1.0)
    # a trial measuring clearly slower than the incumbent (below it by early_stop_k x the noise band) ends early
    early_stop: bool = False
    early_stop_k: float = Field(default=1.0, gt=0.0)
    max_steps: int = 50
    run_cost_estimate: float = 0.0  # device-hours a run is expected to cost before any was measured (0 = unknown)
    phase: Phase = "baseline"
    baseline_levers: dict[str, Scalar] = Field(default_factory=dict)
    baseline: list[RunRef] = Field(default_factory=list)
    band: NoiseBand | None = None
    calibrated: bool = False
    loss_band: Band | None = None  # the gate's loss-curve band (tier R/N steps are compared within it)
    calibration_note: str = ""
    incumbent_levers: dict[str, Scalar] = Field(default_factory=dict)
    incumbent_tps: float | None = None
    incumbent_step: int = 0
    steps: list[Step] = Field(default_factory=list)
    pending: list[Action] = Field(default_factory=list)
    finish_reason: str = ""
    stop_requested: bool = False

    # -- derived
    @property
    def open_step(self) -> Step | None:
        return next((s for s in self.steps if s.state in ("proposed", "open")), None)

    def step(self, n: int) -> Step:
        return next(s for s in self.steps if s.n == n)

    def measured_baseline(self) -> list[RunRef]:
        """The baseline runs the baseline throughput and the noise band come from (the warm-up runs left out)."""
        return self.baseline[self.baseline_warmup_runs:]

    @property
    def baseline_tps(self) -> float | None:
        tps = [r.tps for r in self.measured_baseline() if r.tps]
        return statistics.median(tps) if tps else None

    @property
    def gain(self) -> float:
        """The kept steps' confirmed gains compounded (each against its own incumbent, A/B re-measured where the
        driver did): equal to final / baseline tokens/s when nothing drifted, and not inflated when the machine did."""
        kept = [st.gain for st in self.steps if st.kept and st.gain is not None]
        if not kept or not self.baseline_tps or not self.incumbent_tps:
            return 0.0
        return math.prod(1.0 + g for g in kept) - 1.0

    def early_stop_bound(self) -> float | None:
        """tokens/s below which a trial stops early (runner ``EarlyStop``): the incumbent less early_stop_k x the
        noise band; None when early stop is off or the band is so wide that no positive bound is left."""
        if not self.early_stop or not self.incumbent_tps or self.band is None:
            return None
        bound = self.incumbent_tps * (1.0 - self.early_stop_k * self.band.band)
        return bound if bound > 0 else None

    def expected_run_cost(self) -> float:
        """Device-hours a run is expected to cost: the largest run so far, plus 10% (before any run: the estimate)."""
        costs = [r.device_hours for r in self.baseline] + [r.device_hours for s in self.steps for r in s.runs]
        return 1.1 * max(costs) if costs else self.run_cost_estimate

    def next_run_fits(self) -> bool:
        """Whether a run may start: its expected cost fits what is left (with no estimate yet, something must be left)."""
        expected = self.expected_run_cost()
        return self.spent + expected <= self.budget and (expected > 0 or self.spent < self.budget)

    def tried(self) -> set[tuple[str, str]]:
        return {(s.change.lever, repr(s.change.after)) for s in self.steps}

    def payback_hours(self) -> float | None:
        """Hours of training at the tuned speed after which tuning paid for itself."""
        if self.gain <= 0:
            return None
        return self.spent / (self.gain * self.devices)


def confirmed_tps(st: Step) -> float | None:
    """A winner's throughput: the worse of its trial and its re-measure (a lucky run is not a gain)."""
    tps = [r.tps for r in st.runs if r.outcome == "ok" and r.tps]
    return min(tps) if tps else None
