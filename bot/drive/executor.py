"""The one executor: runs the campaign state machine's actions, one handler per action, through its ports.

One action at a time: execute it (idempotently), feed the resulting event to :func:`bot.campaign.advance`,
persist the state, repeat. A run port that starts a run elsewhere (GitHub dispatches ``trial.yml``) answers
"suspended": the executor saves and returns, and the run's result is fed back later with :meth:`Executor.feed`.
After a crash, ``resume`` re-executes the first pending action: an opened step is found on the forge, a run whose
record is already stored is not run again, a stored calibration is not paid for twice.

Local and GitHub campaigns differ only in the ports handed in (:mod:`bot.drive.ports`): the state store, the record
store, the run port and the forge. The budget cap, the RunRef-from-record conversion, the diagnosis a policy is
given and the loop exist here once. Policies and reports read run records through the record store.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable
from typing import Any

from bot import campaign as cm
from bot.agent import LeverSpace, Policy
from bot.agent.lessons import Lesson
from bot.campaign.measure import measure_window, measured_only_steps
from bot.campaign.report import render_campaign_summary, render_step_report
from bot.core.diagnosis import Diagnosis, diagnose
from bot.core.recipe import Recipe, set_lever_text
from bot.core.recipe import parse_recipe_text as _parse_recipe_text
from bot.core.records import MEASURED_OUTCOMES, RunRecord, Verdict
from bot.drive.interrupt import Interrupted
from bot.drive.ports import RecordStore, RunPort, RunRequest, StateStore, budget_cap_s
from bot.forge.base import Forge, StepRequest
from bot.runner import EarlyStop

MARKER_CAMPAIGN = "attune:campaign"
BASELINE_RECIPE = "baseline-recipe.yaml"  # the recipe as the campaign's baseline ran it (the gate compares against it)
CALIBRATION = "calibration.json"


class Suspended:
    """The answer of an action whose run was started elsewhere: its result comes back as a later event."""

    def __repr__(self) -> str:
        return "SUSPENDED"


SUSPENDED = Suspended()


@functools.lru_cache(maxsize=32)
def parse_recipe_text(text: str, source: str) -> Recipe:
    """The recipe in ``text`` (parsed once per distinct text: a campaign reads the same few recipes many times)."""
    return _parse_recipe_text(text, source)


def run_key(kind: str, n: int = 0, attempt: int = 1) -> str:
    """The name a run is stored under: ``baseline-2``, ``step-3-trial``, and a pair's two runs ``step-3-pair2-incumbent``
    and ``step-3-pair2-candidate`` (kind ``pair-incumbent`` / ``pair-candidate``, attempt = the pair's number)."""
    if kind == "baseline":
        return f"baseline-{attempt}"
    if kind.startswith("pair-"):
        return f"step-{n}-pair{attempt}-{kind.removeprefix('pair-')}"
    return f"step-{n}-{kind}"


class Executor:
    def __init__(
        self,
        *,
        forge: Forge,
        states: StateStore,
        records: RecordStore,
        runs: RunPort,
        policy: Policy,
        lessons: list[Lesson],
        space_fn: Callable[[Recipe], LeverSpace],
        gate_config: Callable[[Recipe, Recipe], Verdict],
        gate_convergence: Callable[..., Verdict],
        on_event: Callable[[cm.Campaign, Any, Any], None] | None = None,
        finish_hook: Callable[[cm.Campaign, Executor], None] | None = None,
        after_merge: Callable[[cm.Campaign, int], None] | None = None,
    ) -> None:
        self.forge, self.states, self.records, self.runs = forge, states, records, runs
        self.policy, self.lessons, self.space_fn = policy, lessons, space_fn
        self.gate_config, self.gate_convergence = gate_config, gate_convergence
        self.on_event, self.finish_hook, self.after_merge = on_event, finish_hook, after_merge
        self.transitions = 0

    # ------------------------------------------------------------------ loop
    def start(self, state: cm.Campaign) -> cm.Campaign:
        """Start ``state`` (a new campaign), or resume it if it is already stored."""
        stored = self.states.load(state.id)
        if stored is not None:
            return self.loop(stored)
        return self.feed(state, cm.CampaignRequested())

    def resume(self, cid: str) -> cm.Campaign:
        stored = self.states.load(cid)
        if stored is None:
            raise KeyError(f"no stored campaign {cid!r}")
        return self.loop(stored)

    def stop(self, cid: str, why: str = "stop requested") -> cm.Campaign:
        """Stop a stored campaign: its open step is closed and it finishes."""
        stored = self.states.load(cid)
        if stored is None:
            raise KeyError(f"no stored campaign {cid!r}")
        return self.feed(stored, cm.StopRequested(why=why))

    def feed(self, state: cm.Campaign, event: Any) -> cm.Campaign:
        """Apply an event that came from outside (a request, a command, a run result), persist, and go on."""
        state, _ = cm.advance(state, event)
        self.states.save(state)
        return self.loop(state)

    def loop(self, state: cm.Campaign) -> cm.Campaign:
        while state.pending:
            action = state.pending[0]
            event = self.execute(state, action)
            if event is SUSPENDED:
                return state
            state, _ = cm.advance(state, event)
            self.states.save(state)
            self.transitions += 1
            if self.on_event:
                self.on_event(state, action, event)
        return state

    # ------------------------------------------------------------------ helpers
    def base_text(self, state: cm.Campaign) -> str:
        """The recipe on the base branch now (the incumbent)."""
        return self.forge.read_file(state.recipe_path)

    def base_text_at_start(self, state: cm.Campaign) -> str:
        """The recipe as the campaign's baseline ran it (stored once, at the first baseline run)."""
        text = self.records.get(state.id, BASELINE_RECIPE)
        if text is None:
            text = self.base_text(state)
            self.records.put(state.id, BASELINE_RECIPE, text)
        return text

    def step_recipe_text(self, state: cm.Campaign, n: int) -> str:
        ref = self.forge.find_step(state.id, n)
        assert ref is not None, f"step {n} is not on the forge"
        return self.forge.read_file(state.recipe_path, ref.branch)

    def record(self, ref: cm.RunRef | None) -> RunRecord | None:
        return self.records.read(ref.record) if ref is not None and ref.record else None

    def latest_diagnosis(self, state: cm.Campaign) -> Diagnosis:
        """What the policy decides from: the last run's diagnosis, unless that run was measured (kept or not) or
        left no record — then the incumbent's."""
        runs = [r for s in state.steps for r in s.runs]
        last = state.steps[-1].runs[-1] if state.steps and state.steps[-1].runs else None
        if last is None or last.outcome in MEASURED_OUTCOMES or not last.record:
            inc = state.step(state.incumbent_step).runs if state.incumbent_step else state.baseline
            last = (inc or state.baseline or runs)[-1]
        record = self.record(last)
        return diagnose(record) if record is not None else Diagnosis(outcome=last.outcome, simulated=last.simulated)

    def _run(
        self,
        state: cm.Campaign,
        text: str,
        kind: str,
        n: int,
        attempt: int,
        already: float = 0.0,
        early_stop: EarlyStop | None = None,
    ) -> cm.RunRef | None:
        """Run (or find stored) one run; None when the run port suspended. ``already``: device-hours this action
        spent before it (for the cap)."""
        key = run_key(kind, n, attempt)
        recipe = parse_recipe_text(text, state.recipe_path)
        found = self.records.find_run(state.id, key)
        if found is not None:  # a resumed executor never repeats a finished run
            record, where = found
        else:
            # the hard budget cap: a run is stopped before it spends more than what is left of the budget
            max_wall_s = budget_cap_s(state, recipe.devices, already)
            request = RunRequest(
                key=key,
                kind=kind,
                n=n,
                attempt=attempt,
                recipe_text=text,
                max_wall_s=max_wall_s,
                early_stop=early_stop,
                steps=measured_only_steps(state, recipe, kind, attempt),
            )
            ran = self._run_or_abandon(state, recipe, request)
            if ran is None:
                return None
            record, where = ran, self.records.put_run(state.id, key, ran)
        return cm.RunRef.of(
            record,
            kind="pair" if kind.startswith("pair-") else kind,
            n=n,
            attempt=attempt,
            ref=where,
            window=measure_window(state, recipe),
        )

    def _run_or_abandon(self, state: cm.Campaign, recipe: Recipe, request: RunRequest) -> RunRecord | None:
        """The run port's run; one stopped by a signal before it ended (:class:`bot.drive.interrupt.Interrupted`) is
        saved as spent (``RunAbandoned``: its devices x the wall time it held them) before the signal goes on, so a
        campaign interrupted and resumed again and again cannot spend past its budget unseen. A simulated run has no
        device time of its own to lose."""
        started = time.monotonic()
        try:
            return self.runs.run(state, request)
        except Interrupted:
            if recipe.cluster.launcher != "sim":
                held = recipe.devices * (time.monotonic() - started) / 3600.0
                state, _ = cm.advance(state, cm.RunAbandoned(device_hours=held))
                self.states.save(state)
            raise

    # ------------------------------------------------------------------ actions
    def execute(self, state: cm.Campaign, action: Any) -> Any:
        handler = HANDLERS.get(type(action))
        if handler is None:
            raise TypeError(f"unknown action {action!r}")
        return handler(self, state, action)

    def on_run_baseline(self, state: cm.Campaign, action: cm.RunBaseline) -> Any:
        text = self.base_text_at_start(state) if action.attempt == 1 else self.base_text(state)
        run = self._run(state, text, "baseline", 0, action.attempt)
        return SUSPENDED if run is None else cm.RunFinished(run=run)

    def on_propose(self, state: cm.Campaign, action: cm.Propose) -> cm.Proposed:
        recipe = parse_recipe_text(self.base_text(state), state.recipe_path)
        decision = self.policy.propose(
            state, self.latest_diagnosis(state), self.lessons, self.space_fn(recipe), self.records
        )
        return cm.Proposed(decision=decision)

    def on_open_step(self, state: cm.Campaign, action: cm.OpenStep) -> cm.StepOpened:
        n = action.n
        st = state.step(n)
        self.base_text_at_start(state)
        body = render_step_report(state, st, None, None)
        req = StepRequest(
            campaign=state.id,
            n=n,
            recipe_path=state.recipe_path,
            lever=st.change.lever,
            value=_yaml_scalar(st.change.after),
            title=f"attune step {n}: {st.change.title()}",
            body=body,
        )
        base_ref = None
        if st.stacked_on:
            parent = self.forge.find_step(state.id, st.stacked_on)
            base_ref = parent.branch if parent else None
        ref = self.forge.find_step(state.id, n) or self.forge.open_step(req, base_ref=base_ref)
        if st.change.extra:  # black-box baselines change several levers in one step
            text = self.forge.read_file(state.recipe_path, ref.branch)
            for lever, value in st.change.extra.items():
                text = set_lever_text(text, lever, value, source=state.recipe_path)
            if text != self.forge.read_file(state.recipe_path, ref.branch):
                ref = self.forge.add_files(
                    ref, {state.recipe_path: text}, f"attune step {n}: {len(st.change.extra)} more levers"
                )
        return cm.StepOpened(n=n, branch=ref.branch, head_sha=ref.head_sha, number=ref.number)

    def on_check_config(self, state: cm.Campaign, action: cm.CheckConfig) -> cm.GateVerdict:
        base = parse_recipe_text(self.base_text_at_start(state), state.recipe_path)
        cand = parse_recipe_text(self.step_recipe_text(state, action.n), state.recipe_path)
        return cm.GateVerdict(n=action.n, verdict=self.gate_config(base, cand))

    def on_run_trial(self, state: cm.Campaign, action: cm.RunTrial) -> Any:
        bound = state.early_stop_bound()
        stop = EarlyStop(below_tps=bound, basis="the incumbent less the noise band") if bound is not None else None
        run = self._run(state, self.step_recipe_text(state, action.n), "trial", action.n, 1, early_stop=stop)
        return SUSPENDED if run is None else cm.RunFinished(run=run)

    def on_measure_pair(self, state: cm.Campaign, action: cm.MeasurePair) -> Any:
        """The incumbent and the candidate back to back in the pair's order (with_trial: the candidate side is the
        trial just run); a run port that measures a pair in one job elsewhere answers both runs at once."""
        n, k = action.n, action.k
        texts = {"incumbent": self.base_text(state), "candidate": self.step_recipe_text(state, n)}
        if not action.with_trial and hasattr(self.runs, "run_pair"):  # both sides in one job elsewhere (GitHub)
            stored = [
                self.records.find_run(state.id, run_key(f"pair-{side}", n, k)) for side in ("incumbent", "candidate")
            ]
            found = [x for x in stored if x is not None]
            if len(found) < len(stored):
                self.runs.run_pair(state, action, texts)
                return SUSPENDED
            window = measure_window(state, parse_recipe_text(texts["incumbent"], state.recipe_path))
            inc, cand = (
                cm.RunRef.of(rec, kind="pair", n=n, attempt=k, ref=where, window=window) for rec, where in found
            )
            return cm.RunFinished(run=pair_ref(action, inc, cand, inc.device_hours + cand.device_hours))
        sides: dict[str, cm.RunRef] = {}
        if action.with_trial:
            sides["candidate"] = next(r for r in state.step(n).runs if r.kind == "trial")
        spent = 0.0
        for side in ("incumbent", "candidate") if action.order == "AB" else ("candidate", "incumbent"):
            if side in sides:
                continue
            run = self._run(state, texts[side], f"pair-{side}", n, k, already=spent)
            if run is None:
                return SUSPENDED
            sides[side] = run
            spent += run.device_hours
            if run.outcome != "ok":
                break  # the pair cannot measure: its other side is not run
        return cm.RunFinished(run=pair_ref(action, sides.get("incumbent"), sides.get("candidate"), spent))

    def on_calibrate(self, state: cm.Campaign, action: cm.Calibrate) -> Any:
        """The gate's loss band for this campaign; stored, so a resumed executor never pays for it twice."""
        stored = self.records.get(state.id, CALIBRATION)
        if stored is not None:
            return cm.Calibrated.model_validate_json(stored)
        event = self.runs.calibrate(
            state, self.base_text_at_start(state), self.record(state.baseline[0] if state.baseline else None)
        )
        if event is None:
            return SUSPENDED
        self.records.put(state.id, CALIBRATION, event.model_dump_json())
        return event

    def on_check_convergence(self, state: cm.Campaign, action: cm.CheckConvergence) -> cm.GateVerdict:
        st = state.step(action.n)
        trial = next(r for r in st.runs if r.kind == "trial")
        tier = st.config_verdict.tier if st.config_verdict else "R"
        verdict = self.gate_convergence(self.record(state.baseline[0]), self.record(trial), tier, band=state.loss_band)
        return cm.GateVerdict(n=action.n, verdict=verdict)

    def on_comment(self, state: cm.Campaign, action: cm.Comment) -> cm.Done:
        if action.n == 0:
            self.forge.upsert_comment(0, MARKER_CAMPAIGN, render_campaign_summary(state))
            return cm.Done()
        report = self._step_report(state, state.step(action.n))
        ref = self._attach(
            state,
            action.n,
            {f"campaigns/{state.id}/step-{action.n}/report.md": report},
            f"attune: report for step {action.n}",
        )
        self.forge.upsert_comment(ref, f"attune:step-{action.n}", report)
        return cm.Done()

    def on_set_status(self, state: cm.Campaign, action: cm.SetStatus) -> cm.Done:
        """``attune/gate`` on the head that was measured and on the head that carries the bot's report (a protected
        base branch that requires the status then accepts the merge)."""
        ref = self.forge.find_step(state.id, action.n)
        if ref is None:
            raise LookupError(f"step {action.n} of {state.id} is not on the forge")
        for sha in dict.fromkeys([state.step(action.n).head_sha, ref.head_sha]):
            if sha:
                self.forge.set_status(ref.model_copy(update={"head_sha": sha}), action.state, action.description)
        return cm.Done()

    def on_merge(self, state: cm.Campaign, action: cm.Merge) -> cm.StepMerged:
        n = action.n
        st = state.step(n)
        ref = self.forge.find_step(state.id, n)
        assert ref is not None, f"step {n} is not on the forge"
        if ref.state != "merged":
            files = self._results_files(state, st)
            if files:
                ref = self.forge.add_files(ref, files, f"attune: results of step {n}")
                # the head that is merged carries the gate status too (a protected base branch requires it)
                self.forge.set_status(ref, "success", f"gate passed; {st.gain:+.1%} confirmed; results added")
            self.forge.merge(ref, f"attune: merge step {n} ({st.change.title()}, {st.gain:+.1%})")
        # the report comment was written before the merge: say it was kept (the same comment, edited in place)
        view = state.model_copy(deep=True)
        kept = view.step(n)
        kept.state, kept.kept = "merged", True
        merged_ref = self.forge.find_step(state.id, n)
        if merged_ref is not None:
            self.forge.upsert_comment(merged_ref, f"attune:step-{n}", self._step_report(view, kept))
        if self.after_merge:
            self.after_merge(state, n)
        return cm.StepMerged(n=n)

    def on_close(self, state: cm.Campaign, action: cm.Close) -> cm.StepClosed:
        ref = self.forge.find_step(state.id, action.n)
        if ref is not None and ref.state == "open":
            ref = self._attach(
                state,
                action.n,
                {f"campaigns/{state.id}/step-{action.n}/CLOSED.md": f"Closed: {action.reason}\n"},
                f"attune: close step {action.n}",
            )
            self.forge.close(ref, action.reason)
        return cm.StepClosed(n=action.n)

    def on_finish(self, state: cm.Campaign, action: cm.Finish) -> cm.Done:
        if self.finish_hook:
            self.finish_hook(state, self)
        return cm.Done()

    # ------------------------------------------------------------------ pieces of the handlers
    def _step_report(self, state: cm.Campaign, st: cm.Step) -> str:
        trial = next((r for r in st.runs if r.kind == "trial"), None)
        return render_step_report(
            state, st, self.record(trial), self.record(state.baseline[0]) if state.baseline else None
        )

    def _attach(self, state: cm.Campaign, n: int, files: dict[str, str], message: str) -> Any:
        """Commit ``files`` on step ``n``'s branch, with the step's run records beside them."""
        ref = self.forge.find_step(state.id, n)
        if ref is None:
            raise LookupError(f"step {n} of {state.id} is not on the forge")
        records: dict[str, str] = {}
        seen: set[str] = set()
        for run in state.step(n).runs:
            names = (
                [("trial", run.record)]
                if run.kind == "trial"
                else [
                    (f"pair{run.attempt}-candidate", run.record),
                    (f"pair{run.attempt}-incumbent", run.reference_record),
                ]
            )
            for name, where in names:
                text = self.records.read_text(where) if where and where not in seen else None
                seen.add(where)
                if text is not None:
                    records[f"campaigns/{state.id}/step-{n}/{name}.json"] = text
        return self.forge.add_files(ref, {**records, **files}, message)

    def _results_files(self, state: cm.Campaign, st: cm.Step) -> dict[str, str]:
        """``results/`` entries of a kept step: the candidate run at the (low) median of its runs, never the lucky one,
        and never a simulated one."""
        confirmed = cm.confirmed_tps(st)
        where = next((ref for tps, ref in cm.candidate_runs(st) if tps == confirmed), "")
        rec = self.records.read(where) if where else None
        if rec is None or rec.simulated:
            return {}
        gain = state.model_copy(
            update={"steps": [x.model_copy(update={"kept": x.kept or x.n == st.n}) for x in state.steps]}
        ).gain
        path = f"results/{(rec.model or rec.recipe_id).replace('/', '_')}/{rec.hardware}/{rec.run_id}.json"
        body = {
            **json.loads(rec.model_dump_json()),
            "gate": "passed",
            "campaign": state.id,
            "step": st.n,
            "baseline_tps": state.baseline_tps,
            "gain": gain,
        }
        return {path: json.dumps(body, indent=1) + "\n"}


HANDLERS: dict[type, Callable[[Executor, cm.Campaign, Any], Any]] = {
    cm.RunBaseline: Executor.on_run_baseline,
    cm.Propose: Executor.on_propose,
    cm.OpenStep: Executor.on_open_step,
    cm.CheckConfig: Executor.on_check_config,
    cm.RunTrial: Executor.on_run_trial,
    cm.MeasurePair: Executor.on_measure_pair,
    cm.Calibrate: Executor.on_calibrate,
    cm.CheckConvergence: Executor.on_check_convergence,
    cm.Comment: Executor.on_comment,
    cm.SetStatus: Executor.on_set_status,
    cm.Merge: Executor.on_merge,
    cm.Close: Executor.on_close,
    cm.Finish: Executor.on_finish,
}


def pair_ref(
    action: cm.MeasurePair, incumbent: cm.RunRef | None, candidate: cm.RunRef | None, device_hours: float
) -> cm.RunRef:
    """The campaign's one record of a pair: the candidate's tokens/s against the incumbent's, both records, the cost
    of the runs made for it (a pair that reuses the trial does not pay for it twice); not ok unless both sides are."""
    failed = next((r for r in (incumbent, candidate) if r is not None and r.outcome != "ok"), None)
    outcome = (
        "ok"
        if failed is None and incumbent is not None and candidate is not None
        else (failed.outcome if failed else "crash")
    )
    reason = (
        ""
        if outcome == "ok"
        else (
            f"{'incumbent' if failed is incumbent else 'candidate'} run: {failed.reason or failed.outcome}"
            if failed
            else "a side did not run"
        )
    )
    return cm.RunRef(
        kind="pair",
        n=action.n,
        attempt=action.k,
        outcome=outcome,
        reason=reason,
        order=action.order,
        tps=candidate.tps if candidate else None,
        tps_cv=candidate.tps_cv if candidate else None,
        record=candidate.record if candidate else "",
        reference_tps=incumbent.tps if incumbent else None,
        reference_record=incumbent.record if incumbent else "",
        device_hours=device_hours,
        simulated=bool((candidate and candidate.simulated) or (incumbent and incumbent.simulated)),
    )


def _yaml_scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
