"""The campaign records: the state a policy reads and a driver stores (Campaign, Step, RunRef, the throughput band),
and the actions and events of the state machine in :mod:`bot.campaign.machine`.

They live here, at the bottom of the house, so that policies (``bot.agent``) and the campaign logic
(``bot.campaign``) read the same records without importing each other.
"""

from __future__ import annotations

import math
import os
import statistics
from typing import Annotated, Literal

from pydantic import AliasChoices, BaseModel, Field, model_validator

from bot.core.loss_band import LossBand
from bot.core.records import Change, RunRecord, Scalar, StepMetric, Stop, Verdict, read_model

Phase = Literal["baseline", "stepping", "finished"]


class RunRef(BaseModel):
    """What the campaign keeps of a run (the full record lives on disk / on the branch)."""

    # pair: one paired measurement of a step (``tps`` the candidate, ``reference_tps`` the incumbent, run back to back)
    kind: Literal["baseline", "trial", "pair"]
    n: int = 0  # step number (0 for baseline)
    attempt: int = 1  # baseline: its number; pair: the pair's number k (1, 2, ...)
    outcome: str
    reason: str = ""
    tps: float | None = None  # median tokens/s per device
    tps_cv: float | None = None
    device_hours: float = 0.0
    record: str = ""  # path of the record (driver-relative)
    simulated: bool = False
    # a pair's incumbent run (measured right before or after the candidate on the same machine: ``order``)
    reference_tps: float | None = None
    reference_record: str = ""
    order: Literal["", "AB", "BA"] = ""  # a pair's order: AB = incumbent first
    # a pair whose incumbent run is the campaign's run right before the trial (nothing ran in between): no run was
    # made for it (``measure.pair_with_the_run_before``)
    reused: bool = False

    @classmethod
    def of(
        cls,
        record: RunRecord,
        *,
        kind: str,
        n: int = 0,
        attempt: int = 1,
        ref: str = "",
        window: tuple[int, int] | None = None,
    ) -> RunRef:
        """What the campaign keeps of ``record`` (stored at ``ref``): the one RunRecord -> RunRef conversion.
        ``window`` ``(after, upto)``: ``tps`` is the median over steps ``after < step <= upto`` (the campaign's
        measurement window, :attr:`Campaign.measure_steps`), not over every step after the warm-up."""
        s = record.summary
        tps = s.tps_median if window is None else window_median(record.steps, *window)
        return cls(
            kind=kind,
            n=n,
            attempt=attempt,
            outcome=record.outcome,
            reason=record.reason,
            tps=tps,
            tps_cv=s.tps_cv,
            device_hours=s.device_hours,
            record=ref,
            simulated=record.simulated,
        )


def window_median(steps: list[StepMetric], after: int, upto: int) -> float | None:
    """The median tokens/s of the steps ``after < step <= upto`` (None when none of them measured)."""
    tps = [s.tps for s in steps if after < s.step <= upto and s.tps is not None]
    return statistics.median(tps) if tps else None


class ThroughputBand(BaseModel):
    """The baseline runs' throughput spread (not the gate's loss band, :class:`LossBand`): it cuts a trial (early
    stop; an unpaired look that can only say *no gain*) and scales the heuristic's sense of what is worth trying. Gains
    are decided by the paired measurement, never by it."""

    k: float
    floor: float
    spread: float  # relative spread of the baseline runs ((max-min)/median); of one run: the prior's expected one
    band: float  # max(k x spread, floor): the gain a change must clear

    @classmethod
    def from_runs(cls, tps: list[float], *, k: float, floor: float, prior_sd: float | None = None) -> ThroughputBand:
        """The band of the baseline runs' ``tps``. One run has no spread of its own: with the machine kind's known
        run noise ``prior_sd`` (sd of log tokens/s) it takes the expected spread of two runs, E|x1 - x2| = 2/sqrt(pi)
        x sd (about 1.13 sd); without one, none (the floor)."""
        med = statistics.median(tps)
        if len(tps) > 1:
            spread = (max(tps) - min(tps)) / med if med else 0.0
        else:
            spread = 2.0 / math.sqrt(math.pi) * prior_sd if prior_sd else 0.0
        return cls(k=k, floor=floor, spread=spread, band=max(k * spread, floor))


class Measurement(BaseModel):
    """The paired measurement of one step (:mod:`bot.campaign.measure`): the estimate of the candidate's gain over
    the incumbent with its confidence interval, the pairs it used, the rule and why it stopped."""

    estimate: float | None = None  # relative gain: exp(mean paired log-ratio) - 1
    lo: float | None = None  # the interval's ends (relative gain)
    hi: float | None = None
    confidence: float
    min_gain: float
    pairs: int = 0
    log_ratios: list[float] = Field(default_factory=list)
    sigma: float | None = None  # sd of one pair's log-ratio used for the interval (pooled over the campaign)
    df: int = 0  # its degrees of freedom
    decision: Literal["measuring", "gain", "no_gain", "undecided"] = "measuring"
    why: str = ""
    rule: str = ""
    # the trial was cut: *no gain* decided on it alone, unpaired (stopped early, or clearly slower:
    # bot.campaign.measure.cut); records stored before it had its own word say "screened", which still loads
    cut: bool = Field(default=False, validation_alias=AliasChoices("cut", "screened"))


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
    measurement: Measurement | None = None
    gain: float | None = None  # the paired estimate (or the unpaired trial's, when the trial was cut)
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


class MeasurePair(BaseModel):
    """Run the incumbent and the candidate of step ``n`` back to back in ``order`` (AB: incumbent first), pair ``k``.
    ``with_trial``: the candidate side is the trial just run (one machine, adjacent in time): only the incumbent runs."""

    type: Literal["measure_pair"] = "measure_pair"
    n: int
    k: int
    order: Literal["AB", "BA"]
    with_trial: bool = False


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
    RunBaseline
    | OpenStep
    | CheckConfig
    | RunTrial
    | MeasurePair
    | CheckConvergence
    | Comment
    | SetStatus
    | Merge
    | Close
    | Propose
    | Calibrate
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
    band: LossBand | None = None
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


class RunAbandoned(BaseModel):
    """A real run this process started and stopped before it ended (Ctrl-C, SIGTERM): it leaves no record, but the
    devices it held for ``device_hours`` were spent. It answers no action: the run it was stays pending, and
    ``resume`` runs it again."""

    type: Literal["run_abandoned"] = "run_abandoned"
    device_hours: float = Field(ge=0.0, allow_inf_nan=False)


Event = Annotated[
    CampaignRequested
    | RunFinished
    | Proposed
    | StepOpened
    | GateVerdict
    | Calibrated
    | StepMerged
    | StepClosed
    | Done
    | BudgetExhausted
    | StopRequested
    | BudgetAdded
    | RunAbandoned,
    Field(discriminator="type"),
]


# ----------------------------------------------------------------------------- state
class Campaign(BaseModel):
    id: str
    recipe_path: str
    recipe_id: str
    policy: str = "heuristic"
    # the branch a local-forge campaign merges its kept steps into, as checked out when it started; "" where none was
    # recorded (an in-memory or GitHub forge, or a state written before this field: resumed on the branch checked out)
    base_branch: str = ""
    devices: int = 1
    usd_per_device_hour: float = Field(default=0.0, ge=0.0, allow_inf_nan=False)
    budget: float = Field(ge=0.0, allow_inf_nan=False)  # device-hours
    spent: float = Field(default=0.0, ge=0.0, allow_inf_nan=False)
    # of ``spent``: device-hours of real runs stopped by a signal before they ended (no record)
    abandoned: float = Field(default=0.0, ge=0.0, allow_inf_nan=False)
    # measured baseline runs: two at least, so the campaign has a noise estimate of its own, unless the machine kind's
    # run noise is known (noise_prior_df > 0), when one does: the prior is the estimate (bot.campaign.measurement_settings)
    baseline_runs_wanted: int = Field(default=2, ge=1)
    # runs made before the measured baseline runs, reported but not counted in the baseline or its band: the first
    # run after an idle spell on a real machine is often slow (clocks, caches), which inflated the band to 70%
    baseline_warmup_runs: int = Field(default=0, ge=0)
    band_k: float = 2.0
    band_floor: float = 0.05
    # the paired measurement (bot.campaign.measure; defaults per machine kind in bot.campaign.measurement_settings)
    min_gain: float = Field(default=0.05, ge=0.0, lt=1.0)  # the smallest gain worth keeping
    confidence: float = Field(default=0.90, gt=0.5, lt=1.0)  # of the two-sided interval on the gain
    max_pairs: int = Field(default=4, ge=1, le=50)  # undecided after this many pairs: not kept
    # a gain is decided only once this many pairs are in (2: one in each order, so the drift over a pair cancels)
    min_pairs_for_gain: int = Field(default=1, ge=1, le=50)
    # what the machine kind's run-to-run noise is known to be (sd of one run's log tokens/s) and how many repeat runs'
    # worth of evidence that is: pooled with the campaign's own repeats (bot.campaign.measure.pooled_run_sd)
    noise_prior_sd: float | None = Field(default=None, gt=0.0, lt=1.0)
    noise_prior_df: int = Field(default=0, ge=0, le=1000)
    pair_with_trial: bool = False  # the trial is pair 1's candidate run (one machine, runs back to back)
    # every run's tokens/s is the median of this many steps after the warm-up (None: of all of them); a run that is
    # only measured (a pair's runs, a repeat baseline run) stops there, one the gate reads (baseline 1, a trial) runs on
    measure_steps: int | None = Field(default=None, ge=1)
    # a trial measuring clearly slower than the incumbent (below it by early_stop_k x the noise band) ends early
    early_stop: bool = False
    early_stop_k: float = Field(default=1.0, gt=0.0)
    max_steps: int = 50
    run_cost_estimate: float = 0.0  # device-hours a run is expected to cost before any was measured (0 = unknown)
    # fresh runs the gate's calibration will make (bot.campaign.setupcost); None: not planned (a state stored before)
    calibration_runs_planned: int | None = Field(default=None, ge=0)
    setup_note: str = ""  # how the set-up was scaled to fit the budget ("": as planned)
    phase: Phase = "baseline"
    baseline_levers: dict[str, Scalar] = Field(default_factory=dict)
    baseline: list[RunRef] = Field(default_factory=list)
    band: ThroughputBand | None = None
    calibrated: bool = False
    calibration_runs: bool = False  # the gate's calibration made fresh runs (between the baseline and step 1)
    loss_band: LossBand | None = None  # the gate's loss-curve band (tier R/N steps are compared within it)
    calibration_note: str = ""
    incumbent_levers: dict[str, Scalar] = Field(default_factory=dict)
    incumbent_tps: float | None = None
    incumbent_step: int = 0
    steps: list[Step] = Field(default_factory=list)
    pending: list[Action] = Field(default_factory=list)
    finish_reason: str = ""
    stop_requested: bool = False

    @model_validator(mode="after")
    def _one_baseline_run_needs_a_prior(self) -> Campaign:
        if self.baseline_runs_wanted < 2 and self.known_run_sd is None:
            raise ValueError(
                "baseline_runs_wanted: one baseline run needs a known run noise (noise_prior_sd and "
                "noise_prior_df); without one the campaign measures two at least"
            )
        return self

    # -- derived
    @property
    def known_run_sd(self) -> float | None:
        """The machine kind's known run noise (sd of one run's log tokens/s), or None where none is known (no prior,
        or one worth no runs)."""
        return self.noise_prior_sd if self.noise_prior_sd and self.noise_prior_df else None

    @property
    def open_step(self) -> Step | None:
        return next((s for s in self.steps if s.state in ("proposed", "open")), None)

    def step(self, n: int) -> Step:
        return next(s for s in self.steps if s.n == n)

    def measured_baseline(self) -> list[RunRef]:
        """The baseline runs the baseline throughput and the noise band come from (the warm-up runs left out)."""
        return self.baseline[self.baseline_warmup_runs :]

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
        """Device-hours a run is expected to cost: the largest run so far, plus 10% (before any run: the estimate).
        A pair's record holds the runs made for it together -- two, or one where the trial was its candidate run,
        none where it reused the run before -- so it counts per run: taken whole, one two-run pair made every later
        run look twice its cost, and a campaign stopped with two runs' budget unused."""
        costs = [r.device_hours for r in self.baseline] + [self.per_run(r) for s in self.steps for r in s.runs]
        return 1.1 * max(costs) if costs else self.run_cost_estimate

    def per_run(self, ref: RunRef) -> float:
        """The device-hours of one run of ``ref`` (a pair's shared among the runs made for it)."""
        if ref.kind != "pair" or ref.reused:
            return ref.device_hours
        return ref.device_hours / self._runs_made(ref)

    def pair_runs_cost(self, st: Step, runs: int) -> float:
        """Device-hours the next pair of step ``st`` is expected to cost, ``runs`` of its runs made (1: the incumbent's
        alone, the trial being its candidate), plus 10%: the step's last pair of as many runs; else its trial (the
        candidate) and the incumbent's run, each as measured; :meth:`expected_run_cost` a run when neither is known.
        Per arm, not the largest run twice: a cold compile makes a trial several times an incumbent run, and its pairs
        then looked unaffordable."""
        made = [r for r in st.runs if r.kind == "pair" and not r.reused]
        same = [r.device_hours for r in made if self._runs_made(r) == runs]
        if same:
            return 1.1 * same[-1]
        trial = next((r.device_hours for r in st.runs if r.kind == "trial"), None)
        incumbent = self.incumbent_run_cost(st)
        if incumbent is None or (runs == 2 and trial is None):
            return runs * self.expected_run_cost()
        return 1.1 * (incumbent + (trial if runs == 2 and trial is not None else 0.0))

    def incumbent_run_cost(self, st: Step) -> float | None:
        """Device-hours of one run of the incumbent: a one-run pair of ``st`` (its incumbent side), else the trial of
        the last kept step, else the largest baseline run (None before any)."""
        single = [r.device_hours for r in st.runs if r.kind == "pair" and not r.reused and self._runs_made(r) == 1]
        if single:
            return single[-1]
        kept = [r.device_hours for s in self.steps if s.kept for r in s.runs if r.kind == "trial"]
        if kept:
            return kept[-1]
        return max((r.device_hours for r in self.baseline), default=None)

    def _runs_made(self, ref: RunRef) -> int:
        return 1 if self.pair_with_trial and ref.attempt == 1 else 2

    def next_run_fits(self, runs: int = 1, cost: float | None = None) -> bool:
        """Whether ``runs`` more runs may start: their expected cost (``cost``, else :meth:`expected_run_cost` each)
        fits what is left (with no estimate yet, something must be left)."""
        expected = runs * self.expected_run_cost() if cost is None else cost
        return self.spent + expected <= self.budget and (expected > 0 or self.spent < self.budget)

    def step_run_fits(self, st: Step, runs: int = 1, cost: float | None = None) -> bool:
        """Whether ``runs`` more runs of step ``st`` fit the allowance its policy gave it (``Change.max_device_hours``):
        always with none, and always while its estimate so far (the paired one, or the trial's unpaired look before the
        first pair) clears the minimum worthwhile gain -- the allowance stops a probe for futility, never a step on its
        way to a gain (such a step may spend past it, up to its pair cap: a real first gain is what a recipe with no gain
        in hand most needs, and closing it undecided for want of one pair would lose it); else what the step spent plus
        their expected cost (``cost``, else :meth:`expected_run_cost` each) must be within it."""
        cap = st.change.max_device_hours
        if cap is None:
            return True
        est = st.measurement.estimate if st.measurement is not None else None
        if est is None:
            trial = next((r for r in st.runs if r.kind == "trial" and r.outcome == "ok" and r.tps), None)
            est = (
                trial.tps / self.incumbent_tps - 1.0 if trial is not None and trial.tps and self.incumbent_tps else None
            )
        if est is not None and est >= self.min_gain:
            return True
        return self.step_spent(st) + (runs * self.expected_run_cost() if cost is None else cost) <= cap

    @staticmethod
    def step_spent(st: Step) -> float:
        """Device-hours step ``st``'s runs spent (its trial and pairs, failed starts included)."""
        return sum(r.device_hours for r in st.runs)

    def tried(self) -> set[tuple[str, str]]:
        return {(s.change.lever, repr(s.change.after)) for s in self.steps}

    def payback_hours(self) -> float | None:
        """Hours of training at the tuned speed after which tuning paid for itself."""
        if self.gain <= 0:
            return None
        return self.spent / (self.gain * self.devices)


def read_campaign(path: str | os.PathLike[str]) -> Campaign:
    """A campaign's stored state (``state.json``). ``OSError`` passes through; a file that is not a campaign state
    is one ``ValueError`` line naming the file and its first wrong field (:func:`bot.core.records.read_model`), for
    every command that reads one (``attune campaign list|show|resume|stop``)."""
    return read_model(path, Campaign, "campaign state")


def candidate_runs(st: Step) -> list[tuple[float, str]]:
    """(tokens/s, record) of every measured run of the step's candidate: the trial and each pair's candidate run."""
    return [(r.tps, r.record) for r in st.runs if r.outcome == "ok" and r.tps and r.kind in ("trial", "pair")]


def confirmed_tps(st: Step) -> float | None:
    """A winner's throughput: the median of its candidate runs (low median: a lucky run is not the number)."""
    tps = sorted(t for t, _ in candidate_runs(st))
    return tps[(len(tps) - 1) // 2] if tps else None
