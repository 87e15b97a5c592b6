"""The local campaign driver: executes the state machine's actions synchronously.

One action at a time: execute it (idempotently), feed the resulting event to
:func:`bot.campaign.advance`, persist the state (atomic JSON), repeat. After a crash,
``resume`` re-executes the first pending action: an opened step is found on the forge, a run
whose record is already on disk is not run again.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bot import campaign as cm
from bot.agent.diagnose import Diagnosis, diagnose
from bot.agent.policy import LeverSpace, Policy
from bot.forge.base import StepRequest
from bot.lessons import Lesson
from bot.recipe import Recipe, set_lever_text
from bot.recipe import parse_recipe_text as _parse_recipe_text
from bot.records import MEASURED_OUTCOMES, RunRecord, Verdict, atomic_write_text, read_record, write_record
from bot.report import render_campaign_summary, render_step_report
from bot.runner.base import EarlyStop, Runner

MARKER_CAMPAIGN = "attune:campaign"


@functools.lru_cache(maxsize=32)
def parse_recipe_text(text: str, source: str) -> Recipe:
    """The recipe in ``text`` (parsed once per distinct text: a campaign reads the same few recipes many times)."""
    return _parse_recipe_text(text, source)


class Driver:
    def __init__(
        self,
        *,
        forge: Any,
        runner: Runner,
        policy: Policy,
        lessons: list[Lesson],
        recipe_path: str,
        work_dir: Path,
        space_fn: Callable[[Recipe], LeverSpace],
        gate_config: Callable[[Recipe, Recipe], Verdict],
        gate_convergence: Callable[..., Verdict],
        calibrate: Callable[[str, RunRecord], cm.Calibrated] | None = None,
        on_event: Callable[[cm.Campaign, Any, Any], None] | None = None,
        finish_hook: Callable[[cm.Campaign, Driver], None] | None = None,
        crash_after: int | None = None,  # test-only: raise after this many transitions
        ab_confirm: bool = False,  # re-measure the incumbent right after a confirm run (A/B; for machines whose speed drifts)
    ) -> None:
        self.forge, self.runner, self.policy, self.lessons = forge, runner, policy, lessons
        self.recipe_path = recipe_path
        self.work_dir = Path(work_dir)
        self.space_fn = space_fn
        self.gate_config, self.gate_convergence = gate_config, gate_convergence
        self.calibrate = calibrate
        self.on_event = on_event
        self.finish_hook = finish_hook
        self.crash_after = crash_after
        self.ab_confirm = ab_confirm
        self.transitions = 0

    # ------------------------------------------------------------------ state I/O
    def state_path(self, cid: str) -> Path:
        return self.work_dir / cid / "state.json"

    def save(self, state: cm.Campaign) -> None:
        atomic_write_text(self.state_path(state.id), state.model_dump_json(indent=1))

    def load(self, cid: str) -> cm.Campaign:
        return cm.Campaign.model_validate_json(self.state_path(cid).read_text())

    # ------------------------------------------------------------------ loop
    def start(self, state: cm.Campaign) -> cm.Campaign:
        if self.state_path(state.id).exists():
            return self.resume(state.id)
        state, _ = cm.advance(state, cm.CampaignRequested())
        self.save(state)
        return self.loop(state)

    def resume(self, cid: str) -> cm.Campaign:
        return self.loop(self.load(cid))

    def stop(self, cid: str, why: str = "stop requested") -> cm.Campaign:
        state, _ = cm.advance(self.load(cid), cm.StopRequested(why=why))
        self.save(state)
        return self.loop(state)

    def loop(self, state: cm.Campaign) -> cm.Campaign:
        while state.pending:
            action = state.pending[0]
            event = self.execute(state, action)
            state, _ = cm.advance(state, event)
            self.save(state)
            self.transitions += 1
            if self.on_event:
                self.on_event(state, action, event)
            if self.crash_after is not None and self.transitions >= self.crash_after:
                raise RuntimeError(f"test crash after {self.transitions} transitions")
        return state

    # ------------------------------------------------------------------ helpers
    def base_text(self) -> str:
        return self.forge.read_file(self.recipe_path)

    def step_recipe_text(self, state: cm.Campaign, n: int) -> str:
        ref = self.forge.find_step(state.id, n)
        assert ref is not None, f"step {n} is not on the forge"
        return self.forge.read_file(self.recipe_path, ref.branch)

    def run_dir(self, state: cm.Campaign, kind: str, n: int, attempt: int) -> Path:
        return self.work_dir / state.id / (f"baseline-{attempt}" if kind == "baseline" else f"step-{n}-{kind}")

    def _run(self, state: cm.Campaign, text: str, kind: str, n: int, attempt: int, already: float = 0.0,
             early_stop: EarlyStop | None = None) -> cm.RunRef:
        """Run (or find on disk) one run; ``already``: device-hours this action spent before it (for the cap)."""
        out = self.run_dir(state, kind, n, attempt)
        path = out / "record.json"
        if path.exists():  # a resumed driver never repeats a finished run
            record = read_record(path)
        else:
            recipe = parse_recipe_text(text, self.recipe_path)
            # the hard budget cap: a run is stopped before it spends more than what is left of the budget
            max_wall_s = max(0.0, state.budget - state.spent - already) * 3600.0 / max(recipe.devices, 1)
            extra = {"early_stop": early_stop} if early_stop is not None else {}  # runners without the option still work
            record = self.runner.run(recipe, out_dir=out, recipe_path=self.recipe_path, recipe_text=text, max_wall_s=max_wall_s, **extra)
            write_record(record, path)
        return cm.RunRef(kind=kind, n=n, attempt=attempt, outcome=record.outcome, reason=record.reason, tps=record.summary.tps_median,
                         tps_cv=record.summary.tps_cv, device_hours=record.summary.device_hours, record=str(path), simulated=record.simulated)

    def record(self, ref: cm.RunRef) -> RunRecord:
        return read_record(ref.record)

    def latest_diagnosis(self, state: cm.Campaign) -> Diagnosis:
        runs = [r for s in state.steps for r in s.runs]
        last = state.steps[-1].runs[-1] if state.steps and state.steps[-1].runs else None
        if last is None or last.outcome in MEASURED_OUTCOMES:  # a measured candidate, kept or not: the incumbent's
            inc = state.step(state.incumbent_step).runs if state.incumbent_step else state.baseline
            last = (inc or state.baseline or runs)[-1]
        return diagnose(self.record(last))

    # ------------------------------------------------------------------ actions
    def execute(self, state: cm.Campaign, action: Any) -> Any:  # noqa: C901 - a dispatch table
        if isinstance(action, cm.RunBaseline):
            text = self.base_text_at_start(state) if action.attempt == 1 else self.base_text()
            return cm.RunFinished(run=self._run(state, text, "baseline", 0, action.attempt))
        if isinstance(action, cm.Propose):
            recipe = parse_recipe_text(self.base_text(), self.recipe_path)
            decision = self.policy.propose(state, self.latest_diagnosis(state), self.lessons, self.space_fn(recipe))
            return cm.Proposed(decision=decision)
        if isinstance(action, cm.OpenStep):
            return self._open(state, action.n)
        if isinstance(action, cm.CheckConfig):
            base = parse_recipe_text(self.base_text_at_start(state), self.recipe_path)
            cand = parse_recipe_text(self.step_recipe_text(state, action.n), self.recipe_path)
            return cm.GateVerdict(n=action.n, verdict=self.gate_config(base, cand))
        if isinstance(action, cm.RunTrial | cm.Confirm):
            kind = "trial" if isinstance(action, cm.RunTrial) else "confirm"
            bound = state.early_stop_bound() if kind == "trial" else None
            stop = EarlyStop(below_tps=bound) if bound is not None else None
            run = self._run(state, self.step_recipe_text(state, action.n), kind, action.n, 1, early_stop=stop)
            files = {f"campaigns/{state.id}/step-{action.n}/{kind}.json": Path(run.record).read_text()}
            if kind == "confirm" and run.outcome == "ok" and self.ab_confirm:
                ref = self._run(state, self.base_text(), "incumbent", action.n, 1, already=run.device_hours)
                run = run.model_copy(update={"reference_tps": ref.tps if ref.outcome == "ok" else None, "reference_record": ref.record,
                                             "device_hours": run.device_hours + ref.device_hours})
                files[f"campaigns/{state.id}/step-{action.n}/incumbent.json"] = Path(ref.record).read_text()
            self._attach(state, action.n, files, f"attune: {kind} record for step {action.n}")
            return cm.RunFinished(run=run)
        if isinstance(action, cm.Calibrate):
            return self._calibrate(state)
        if isinstance(action, cm.CheckConvergence):
            st = state.step(action.n)
            trial = next(r for r in st.runs if r.kind == "trial")
            tier = st.config_verdict.tier if st.config_verdict else "R"
            verdict = self.gate_convergence(self.record(state.baseline[0]), self.record(trial), tier, band=state.loss_band)
            return cm.GateVerdict(n=action.n, verdict=verdict)
        if isinstance(action, cm.Comment):
            return self._comment(state, action)
        if isinstance(action, cm.SetStatus):
            ref = self.forge.find_step(state.id, action.n)
            self.forge.set_status(ref, action.state, action.description)
            return cm.Done()
        if isinstance(action, cm.Merge):
            return self._merge(state, action.n)
        if isinstance(action, cm.Close):
            ref = self.forge.find_step(state.id, action.n)
            if ref is not None and ref.state == "open":
                ref = self._attach(state, action.n, {f"campaigns/{state.id}/step-{action.n}/CLOSED.md": f"Closed: {action.reason}\n"}, f"attune: close step {action.n}")
                self.forge.close(ref, action.reason)
            return cm.StepClosed(n=action.n)
        if isinstance(action, cm.Finish):
            if self.finish_hook:
                self.finish_hook(state, self)
            return cm.Done()
        raise TypeError(f"unknown action {action!r}")

    def _calibrate(self, state: cm.Campaign) -> cm.Calibrated:
        """The gate's loss band for this campaign; kept on disk, so a resumed driver never pays for it twice."""
        path = self.work_dir / state.id / "calibration.json"
        if path.exists():
            return cm.Calibrated.model_validate_json(path.read_text())
        if self.calibrate is None:
            event = cm.Calibrated(note="no loss-band calibration configured: tier-R/N steps fail closed")
        else:
            event = self.calibrate(self.base_text_at_start(state), self.record(state.baseline[0]))
        atomic_write_text(path, event.model_dump_json())
        return event

    def base_text_at_start(self, state: cm.Campaign) -> str:
        """The recipe as the campaign's baseline ran it (the gate compares against the original)."""
        path = self.run_dir(state, "baseline", 0, 1) / "recipe.yaml"
        if not path.exists():
            atomic_write_text(path, self.base_text())
        return path.read_text()

    def _open(self, state: cm.Campaign, n: int) -> cm.StepOpened:
        st = state.step(n)
        self.base_text_at_start(state)
        body = render_step_report(state, st, None, None)
        req = StepRequest(campaign=state.id, n=n, recipe_path=self.recipe_path, lever=st.change.lever,
                          value=_yaml_scalar(st.change.after), title=f"attune step {n}: {st.change.title()}", body=body)
        base_ref = None
        if st.stacked_on:
            parent = self.forge.find_step(state.id, st.stacked_on)
            base_ref = parent.branch if parent else None
        ref = self.forge.find_step(state.id, n) or self.forge.open_step(req, base_ref=base_ref)
        if st.change.extra:  # black-box baselines change several levers in one step
            text = self.forge.read_file(self.recipe_path, ref.branch)
            for lever, value in st.change.extra.items():
                text = set_lever_text(text, lever, value, source=self.recipe_path)
            if text != self.forge.read_file(self.recipe_path, ref.branch):
                ref = self.forge.add_files(ref, {self.recipe_path: text}, f"attune step {n}: {len(st.change.extra)} more levers")
        return cm.StepOpened(n=n, branch=ref.branch, head_sha=ref.head_sha, number=ref.number)

    def _attach(self, state: cm.Campaign, n: int, files: dict[str, str], message: str):
        ref = self.forge.find_step(state.id, n)
        return self.forge.add_files(ref, files, message)

    def _comment(self, state: cm.Campaign, action: cm.Comment) -> cm.Done:
        if action.n == 0:
            self.forge.upsert_comment(0, MARKER_CAMPAIGN, render_campaign_summary(state))
            return cm.Done()
        st = state.step(action.n)
        trial = next((r for r in st.runs if r.kind == "trial"), None)
        report = render_step_report(state, st, self.record(trial) if trial else None, self.record(state.baseline[0]))
        ref = self._attach(state, action.n, {f"campaigns/{state.id}/step-{action.n}/report.md": report}, f"attune: report for step {action.n}")
        self.forge.upsert_comment(ref, f"attune:step-{action.n}", report)
        return cm.Done()

    def _merge(self, state: cm.Campaign, n: int) -> cm.StepMerged:
        st = state.step(n)
        ref = self.forge.find_step(state.id, n)
        if ref.state == "merged":
            return cm.StepMerged(n=n)
        files = {}
        confirmed = cm._confirmed_tps(st)
        # the leaderboard's source holds the step's confirmed (slower) measurement, never the lucky one
        kept = next((r for r in st.runs if r.outcome == "ok" and r.tps == confirmed), None)
        for run in [kept] if kept else []:
            rec = self.record(run)
            if not rec.simulated:  # simulated numbers never enter results/
                files[f"results/{(rec.model or rec.recipe_id).replace('/', '_')}/{rec.hardware}/{rec.run_id}.json"] = json.dumps(
                    {**json.loads(rec.model_dump_json()), "gate": "passed", "campaign": state.id, "step": n,
                     "baseline_tps": state.baseline_tps,
                     "gain": state.model_copy(update={"steps": [x.model_copy(update={"kept": x.kept or x.n == n}) for x in state.steps]}).gain},
                    indent=1) + "\n"
        if files:
            ref = self.forge.add_files(ref, files, f"attune: results of step {n}")
            # the head that is merged carries the gate status too (a protected base branch requires it)
            self.forge.set_status(ref, "success", f"gate passed; {st.gain:+.1%} confirmed; results added")
        self.forge.merge(ref, f"attune: merge step {n} ({st.change.title()}, {st.gain:+.1%})")
        return cm.StepMerged(n=n)


def _yaml_scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
