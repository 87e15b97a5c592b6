"""The campaign: a pure state machine ``advance(state, event) -> (state, actions)``.

Two drivers execute the actions (the local loop in :mod:`bot.drive`, the GitHub event handlers),
so the same decisions come out whichever runs it. The state carries the actions still to do
(``pending``); a driver persists the state after every transition and, after a crash, re-executes
the first pending action idempotently (a step already opened is found on the forge, a run whose
record is on disk is not repeated) — never a second step for the same change, never two open
steps, never a lost record.

After the baseline runs, the gate's loss-curve noise band is calibrated once (``Calibrate``; its runs
count against the budget). Per step: propose one change -> open step -> config gate (free) -> trial run ->
convergence gate -> paired measurement (:mod:`bot.campaign.measure`: incumbent and candidate back to back, pair
after pair, until the interval on the gain decides *gain* or *no gain*, or the pair cap leaves it *undecided*)
-> merge on *gain*, else close. A trial whose unpaired look already says *no gain* is closed without pairs, and one
that measures clearly slower than the incumbent ends early (``early_stop``, outcome ``stopped``). Budget is
device-hours (devices x wall hours, start-up included), hard-capped: a run whose expected cost does not fit what is
left is not started; likewise a run (or pair) of a step whose estimate so far is below the minimum gain when its
expected cost does not fit what is left of the allowance its policy gave it (``Change.max_device_hours``): the step is
then decided on the pairs it has, as at the pair cap (``Campaign.step_run_fits``). The set-up (baseline and
calibration runs) is fitted to the budget as a whole, leaving room for one trial, before it starts where a run's
cost is estimated and after each baseline run: scaled down, or refused naming the smallest budget
(:mod:`.setupcost`).
"""

from __future__ import annotations

from collections.abc import Callable

from bot.campaign import measure as ms
from bot.campaign.setupcost import fit_setup
from bot.core.records import Stop
from bot.core.state import (
    Action,
    BudgetAdded,
    BudgetExhausted,
    Calibrate,
    Calibrated,
    Campaign,
    CampaignRequested,
    CheckConfig,
    CheckConvergence,
    Close,
    Comment,
    Done,
    Event,
    Finish,
    GateVerdict,
    Measurement,
    MeasurePair,
    Merge,
    OpenStep,
    Propose,
    Proposed,
    RunAbandoned,
    RunBaseline,
    RunFinished,
    RunRef,
    RunTrial,
    SetStatus,
    Step,
    StepClosed,
    StepMerged,
    StepOpened,
    StopRequested,
    ThroughputBand,
    confirmed_tps,
)


def advance(state: Campaign, event: Event) -> tuple[Campaign, list[Action]]:
    """Apply ``event``; return the new state and the actions it adds (also queued in ``pending``)."""
    s = state.model_copy(deep=True)
    if isinstance(event, RunFinished) and _already_recorded(s, event.run):
        return s, []  # a re-delivered run result: already counted, answers nothing
    if s.pending and not isinstance(event, CampaignRequested | StopRequested | BudgetAdded | RunAbandoned):
        s.pending.pop(0)  # the action this event answers
    new = _transition(s, event)
    if s.stop_requested and s.phase != "finished":
        new = _stop_now(s)
    s.pending.extend(new)
    return s, new


def _already_recorded(s: Campaign, run: RunRef) -> bool:
    if run.kind == "baseline":
        return any(r.attempt == run.attempt for r in s.baseline)
    st = next((x for x in s.steps if x.n == run.n), None)
    return st is not None and any(r.kind == run.kind and r.attempt == run.attempt for r in st.runs)


def _transition(s: Campaign, ev: Event) -> list[Action]:  # noqa: C901 - one small branch per event
    if isinstance(ev, CampaignRequested):
        if s.pending or s.baseline or s.phase != "baseline":
            return []  # re-delivered request (or a campaign already finished): nothing new
        s.baseline_levers = dict(s.baseline_levers)
        refused = _fit_setup(s)  # with a run-cost estimate (the simulator's) the set-up is fitted before it starts
        if refused:
            return [Comment(n=0, kind="start"), *_finish(s, refused)]
        return [Comment(n=0, kind="start"), *_run_or_finish(s, RunBaseline(attempt=1))]
    if isinstance(ev, StopRequested):
        if s.phase == "finished":
            return []  # nothing left to stop; keep the reason it finished for
        s.stop_requested = True
        s.finish_reason = ev.why
        return []
    if isinstance(ev, RunAbandoned):  # its devices were held: spent, though the run is made again on resume
        s.spent += ev.device_hours
        s.abandoned += ev.device_hours
        return []
    if isinstance(ev, BudgetAdded):
        s.budget += ev.device_hours
        if s.phase == "finished" and s.finish_reason.startswith("budget"):
            s.finish_reason = ""
            # the summary/finish actions not yet carried out are moot: the campaign goes on
            s.pending = [
                a
                for a in s.pending
                if not isinstance(a, Finish) and not (isinstance(a, Comment) and a.kind == "summary")
            ]
            if s.band is None:  # the budget ran out during the baseline: measure the rest of it first
                s.phase = "baseline"
                return _run_or_finish(s, RunBaseline(attempt=len(s.baseline) + 1))
            s.phase = "stepping"
            return [Propose()] if s.calibrated else _run_or_finish(s, Calibrate())
        return []
    if isinstance(ev, BudgetExhausted):
        return _finish(s, "budget exhausted")
    if isinstance(ev, Done):
        return []
    if isinstance(ev, RunFinished):
        s.spent += ev.run.device_hours
        return _on_run(s, ev.run)
    if isinstance(ev, Calibrated):
        s.spent += ev.device_hours
        s.calibrated, s.loss_band, s.calibration_note = True, ev.band, ev.note
        s.calibration_runs = s.calibration_runs or ev.device_hours > 0
        return [] if s.phase == "finished" else [Propose()]
    if isinstance(ev, Proposed):
        return _on_proposed(s, ev)
    if isinstance(ev, StepOpened):
        st = s.step(ev.n)
        st.state, st.branch, st.head_sha, st.number = "open", ev.branch, ev.head_sha, ev.number
        return [CheckConfig(n=ev.n)]
    if isinstance(ev, GateVerdict):
        return _on_verdict(s, ev)
    if isinstance(ev, StepMerged):
        st = s.step(ev.n)
        st.state, st.kept = "merged", True
        s.incumbent_levers = dict(st.levers)
        s.incumbent_tps = confirmed_tps(st)
        s.incumbent_step = st.n
        return [] if s.phase == "finished" else [Propose()]
    if isinstance(ev, StepClosed):
        s.step(ev.n).state = "closed"
        return [] if s.phase == "finished" else [Propose()]
    raise TypeError(f"unknown event {ev!r}")


def _fit_setup(s: Campaign) -> str:
    """Fit the set-up left (baseline and calibration runs) and one trial to the budget (:mod:`.setupcost`): scaled
    where needed, saying so; answers why it cannot be ("" when it fits)."""
    fit = fit_setup(s)
    for field, value in fit.updates.items():
        setattr(s, field, value)
    return fit.refusal


def _run_or_finish(s: Campaign, action: Action) -> list[Action]:
    if not s.next_run_fits():
        return _finish(
            s,
            f"budget: the next run (~{s.expected_run_cost():.4f} device-hours) does not fit the {s.budget - s.spent:.4f} left",
        )
    return [action]


def _on_run(s: Campaign, run: RunRef) -> list[Action]:
    if run.kind == "baseline":
        s.baseline.append(run)
        if run.outcome != "ok":
            return _finish(
                s, f"baseline run failed ({run.outcome}: {run.reason}); the recipe must work before it is tuned"
            )
        refused = _fit_setup(s)  # the runs so far are the estimate: the set-up left and one trial must fit
        if refused:
            return _finish(s, refused)
        if len(s.baseline) < s.baseline_runs_wanted + s.baseline_warmup_runs:
            return _run_or_finish(s, RunBaseline(attempt=len(s.baseline) + 1))
        s.band = ThroughputBand.from_runs(
            [r.tps or 0.0 for r in s.measured_baseline()], k=s.band_k, floor=s.band_floor, prior_sd=s.known_run_sd
        )
        s.incumbent_levers = dict(s.baseline_levers)
        s.incumbent_tps = s.baseline_tps
        s.phase = "stepping"
        return [Propose()] if s.calibrated else _run_or_finish(s, Calibrate())  # calibrated: left out to fit the budget
    st = s.step(run.n)
    st.runs.append(run)
    if run.kind == "trial":
        if run.outcome == "stopped":
            st.gain = run.tps / s.incumbent_tps - 1.0 if run.tps and s.incumbent_tps else None
            st.close_reason = f"no gain: {run.reason} ({_pct(st.gain)})"
            st.measurement = _unmeasured(s, st.gain, "no_gain", f"the trial stopped early: {run.reason}", cut=True)
            return [
                Comment(n=st.n),
                SetStatus(n=st.n, state="success", description="stopped early: slower"),
                Close(n=st.n, reason=st.close_reason),
            ]
        if run.outcome != "ok":
            st.close_reason = f"trial {run.outcome}: {run.reason}".strip(": ")
            return [
                Comment(n=st.n),
                SetStatus(n=st.n, state="failure", description=f"trial {run.outcome}"),
                Close(n=st.n, reason=st.close_reason),
            ]
        return [CheckConvergence(n=st.n)]
    # a pair
    if run.outcome != "ok":
        st.close_reason = f"pair {run.attempt} {run.outcome}: {run.reason}".strip(": ")
        return [
            Comment(n=st.n),
            SetStatus(n=st.n, state="failure", description=f"pair {run.attempt} {run.outcome}"),
            Close(n=st.n, reason=st.close_reason),
        ]
    return _decide(s, st)


def _decide(s: Campaign, st: Step) -> list[Action]:
    """The sequential rule after a pair: merge on *gain*, close on *no gain* or *undecided*, else another pair."""
    m = ms.measure(s, st)
    st.measurement, st.gain = m, m.estimate
    if m.decision == "gain":
        st.kept = True
        return [
            Comment(n=st.n),
            SetStatus(
                n=st.n, state="success", description=f"gate passed; {_pct(m.estimate)} [{_pct(m.lo)}, {_pct(m.hi)}]"
            ),
            Merge(n=st.n),
        ]
    if m.decision in ("no_gain", "undecided"):
        what = "no gain" if m.decision == "no_gain" else "undecided"
        st.close_reason = f"{what}: {_pct(m.estimate)} [{_pct(m.lo)}, {_pct(m.hi)}], {m.why}"
        return [
            Comment(n=st.n),
            SetStatus(n=st.n, state="success", description=f"gate passed; {what}"),
            Close(n=st.n, reason=st.close_reason),
        ]
    return _next_pair(s, st)


def _next_pair(s: Campaign, st: Step) -> list[Action]:
    k = ms.st_pairs(st) + 1
    with_trial = s.pair_with_trial and k == 1
    if with_trial:
        reused = ms.pair_with_the_run_before(s, st)
        if reused is not None:  # the incumbent ran right before the trial: that run is pair 1's incumbent side
            st.runs.append(reused)
            return _decide(s, st)
    last = next((r.order for r in reversed(st.runs) if r.kind == "pair"), "")
    order = ("BA" if last == "AB" else "AB") if last else ms.pair_order(k, with_trial=s.pair_with_trial)
    action = MeasurePair(n=st.n, k=k, order=order, with_trial=with_trial)
    runs = 1 if with_trial else 2
    return _run_or_close(s, st, action, runs, s.pair_runs_cost(st, runs))


def _unmeasured(s: Campaign, gain: float | None, decision: str, why: str, *, cut: bool = False) -> Measurement:
    return Measurement(
        estimate=gain,
        confidence=s.confidence,
        min_gain=s.min_gain,
        decision=decision,
        why=why,
        rule=ms.rule_text(s),
        cut=cut,
    )


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.1%}"


def _on_proposed(s: Campaign, ev: Proposed) -> list[Action]:
    if s.open_step is not None:
        raise ValueError(f"step {s.open_step.n} is still open; a campaign never has two open steps")
    if isinstance(ev.decision, Stop):
        return _finish(s, f"policy stopped: {ev.decision.why}")
    if len(s.steps) >= s.max_steps:
        return _finish(s, f"reached the {s.max_steps}-step limit")
    if not s.next_run_fits():
        return _finish(
            s,
            f"budget: the next trial (~{s.expected_run_cost():.4f} device-hours) does not fit the {s.budget - s.spent:.4f} left",
        )
    n = len(s.steps) + 1
    change = ev.decision
    base = s.step(change.stacked_on).levers if change.stacked_on else s.incumbent_levers
    levers = {**base, **change.extra, change.lever: change.after}
    s.steps.append(Step(n=n, change=change, stacked_on=change.stacked_on, levers=levers))
    return [OpenStep(n=n)]


def _on_verdict(s: Campaign, ev: GateVerdict) -> list[Action]:
    st = s.step(ev.n)
    v = ev.verdict
    if v.stage == "config":
        st.config_verdict = v
        if not v.ok:
            st.verdict = v
            st.close_reason = "gate (config): " + "; ".join(v.reasons)
            return [
                Comment(n=st.n),
                SetStatus(n=st.n, state="failure", description="gate rejected the config"),
                Close(n=st.n, reason=st.close_reason),
            ]
        if st.change.enabler:  # its own speed decides nothing: the change it enables is measured, stacked on it
            st.close_reason = "enabler: not run on its own; the change it enables is stacked on it and measured"
            return [
                Comment(n=st.n),
                SetStatus(n=st.n, state="success", description="enabler (gated, not run)"),
                Close(n=st.n, reason=st.close_reason),
            ]
        if st.change.predicted_oom:  # not started: an out-of-memory trial at no cost (the policy retries from it)
            st.runs.append(
                RunRef(
                    kind="trial",
                    n=st.n,
                    outcome="oom",
                    reason=f"not run: {st.change.predicted_oom}",
                    simulated=bool(s.baseline) and s.baseline[0].simulated,
                )
            )
            st.close_reason = f"trial oom (predicted, not run): {st.change.predicted_oom}"
            return [
                Comment(n=st.n),
                SetStatus(n=st.n, state="failure", description="predicted out of memory (not run)"),
                Close(n=st.n, reason=st.close_reason),
            ]
        if st.change.predicted_slower:  # not started: a step that gains nothing, at no cost
            st.close_reason = f"no gain (predicted, not run): {st.change.predicted_slower}"
            return [
                Comment(n=st.n),
                SetStatus(n=st.n, state="success", description="gate passed; predicted slower (not run)"),
                Close(n=st.n, reason=st.close_reason),
            ]
        return _run_or_close(s, st, RunTrial(n=st.n))
    st.verdict = v
    if not v.ok:
        st.close_reason = "gate (convergence): " + "; ".join(v.reasons)
        return [
            Comment(n=st.n),
            SetStatus(n=st.n, state="failure", description="gate rejected the loss curve"),
            Close(n=st.n, reason=st.close_reason),
        ]
    cut = ms.cut(s, st)
    if cut is not None:
        st.measurement, st.gain = cut, cut.estimate
        st.close_reason = f"no gain: {_pct(cut.estimate)}, {cut.why}"
        return [
            Comment(n=st.n),
            SetStatus(n=st.n, state="success", description="gate passed; no gain"),
            Close(n=st.n, reason=st.close_reason),
        ]
    return _next_pair(s, st)


def _run_or_close(s: Campaign, st: Step, action: Action, runs: int = 1, cost: float | None = None) -> list[Action]:
    """``action`` (``runs`` runs of step ``st``, expected to cost ``cost``, else the campaign's run estimate each) when
    that fits both the step's allowance and the campaign's budget; else the step is closed on the pairs it has
    (*undecided*, as at the pair cap), and a budget that does not fit them finishes the campaign."""
    if not s.step_run_fits(st, runs, cost):  # the policy's allowance for this step ends it; the campaign goes on
        st.close_reason = f"allowance: {_runs_not_fit(s, runs, cost)} the {_cap_left_text(s, st)}"
        _end_undecided(st, "the step's allowance ends the pairs")
        return [
            Comment(n=st.n),
            SetStatus(n=st.n, state="success", description="undecided: allowance spent"),
            Close(n=st.n, reason=st.close_reason),
        ]
    if not s.next_run_fits(runs, cost):
        st.close_reason = f"budget: {_runs_not_fit(s, runs, cost)} the {s.budget - s.spent:.4g} device-hours left"
        _end_undecided(st, "the budget ends the pairs")
        return [Close(n=st.n, reason=st.close_reason), *_finish(s, "budget exhausted")]
    return [action]


def _runs_not_fit(s: Campaign, runs: int, cost: float | None = None) -> str:
    """``runs`` runs, their expected cost and the verb, e.g. "the 2 runs (~0.0121 device-hours) do not fit"."""
    what = "the run" if runs == 1 else f"the {runs} runs"
    expected = runs * s.expected_run_cost() if cost is None else cost
    return f"{what} (~{expected:.4g} device-hours) {'does' if runs == 1 else 'do'} not fit"


def _cap_left_text(s: Campaign, st: Step) -> str:
    """What is left of the allowance the policy gave step ``st``, e.g. "0.0046 left of the 0.0275 device-hours ..."."""
    cap = st.change.max_device_hours or 0.0
    return f"{max(cap - s.step_spent(st), 0.0):.4g} left of the {cap:.4g} device-hours the policy gave this step"


def _end_undecided(st: Step, why: str) -> None:
    """A step still measuring when no further pair may run is closed *undecided* (not kept), saying what ended it."""
    if st.measurement is not None and st.measurement.decision == "measuring":
        st.measurement = st.measurement.model_copy(
            update={"decision": "undecided", "why": f"{st.measurement.why}; {why}"}
        )


def _stop_now(s: Campaign) -> list[Action]:
    s.pending.clear()
    actions: list[Action] = []
    st = s.open_step
    if st is not None:
        # a proposed step may already be on the forge (a crash between opening it and saving): close it there too
        st.close_reason = s.finish_reason or "stop requested"
        actions.append(Close(n=st.n, reason=st.close_reason))
    return actions + _finish(s, s.finish_reason or "stop requested")


def _finish(s: Campaign, reason: str) -> list[Action]:
    if s.phase == "finished":
        return []
    s.phase = "finished"
    s.finish_reason = s.finish_reason or reason
    return [Comment(n=0, kind="summary"), Finish(reason=s.finish_reason)]


ProposeFn = Callable[[Campaign], Proposed]
