"""The GitHub driver: executes the campaign's actions (bot.campaign) on GitHub, one workflow run at a time.

Reuses :class:`bot.drive.Driver` for every action except the ones that need a self-hosted runner: a run (baseline,
trial, re-measure) and, for a real (not simulated) recipe, the loss-band calibration are a ``trial.yml`` dispatch,
after which the workflow run ends; the trial's report job feeds ``RunFinished`` / ``Calibrated`` back
(``bot.events.trial_results``). The workflow run is stateless, so the campaign state lives on GitHub: one
hidden-marker comment on the campaign issue (``<!-- attune:state -->``), rewritten after every transition, which shows
the campaign dashboard (steps, outcomes, gate, gain) and carries the state as a JSON block. Run records, the
calibration and the recipe as the baseline ran it are committed on the bot branch ``attune/<campaign>/records``.

Guards beyond the shared driver's:

- a run is dispatched once: ``Stored.dispatched`` names the run in flight, so a re-delivered event or a
  ``/attune budget`` comment does not start a second GPU job for it (``/attune resume`` and a manual nudge do);
- the bot remembers the head it measured and every head it made itself (``Stored.heads``); a step whose branch
  moved otherwise is never commented on with new files, given a status, or merged (the forge refuses);
- ``attune/gate`` is set on the measured head and on the head that carries the bot's report, so a protected default
  branch that requires it accepts the merge.
"""

from __future__ import annotations

import base64
import json
import re
import sys
import tempfile
import zlib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from bot import campaign as cm
from bot.drive import Driver
from bot.forge.base import StepRef
from bot.forge.github import GitHubForge, GitHubForgeError
from bot.forge.markers import GITHUB_BODY_LIMIT, marker
from bot.records import MEASURED_OUTCOMES, RunRecord

STATE_MARKER = "state"
TRIAL_WORKFLOW = "trial.yml"
LEADERBOARD_WORKFLOW = "leaderboard.yml"
_FENCE = re.compile(r"```json\n(.*?)\n```", re.S)
_FENCE_Z = re.compile(r"```attune-state-zlib-base64\n(.*?)\n```", re.S)
INLINE_STATE_LIMIT = 40_000  # above this the state JSON is stored compressed (a comment holds 65,536 characters)
RUN_ACTIONS = (cm.RunBaseline, cm.RunTrial, cm.Confirm)
RUNNER_ACTIONS = (*RUN_ACTIONS, cm.Calibrate)  # what a self-hosted runner may have to do


class Stored(BaseModel):
    """What is persisted on the campaign issue: the state machine's state plus the request's GitHub facts."""

    issue: int
    runner_labels: list[str] = Field(default_factory=list)
    campaign: cm.Campaign
    dispatched: str = ""  # the run dispatched to trial.yml and not answered yet (run_key), "" when none
    heads: dict[int, str] = Field(default_factory=dict)  # step -> the head the bot measured or made last


def records_branch(cid: str) -> str:
    return f"attune/{cid}/records"


def run_kind(action: Any) -> tuple[str, int, int]:
    """(kind, step, attempt) of a runner action: kind is baseline, trial, confirm or calibrate."""
    if isinstance(action, cm.RunBaseline):
        return "baseline", 0, action.attempt
    if isinstance(action, cm.Calibrate):
        return "calibrate", 0, 1
    return ("trial" if isinstance(action, cm.RunTrial) else "confirm"), action.n, 1


def run_key(action: Any) -> str:
    """The name of a runner action's run: ``baseline-2``, ``step-3-trial``, ``step-3-confirm``, ``calibrate``."""
    kind, n, attempt = run_kind(action)
    if kind == "baseline":
        return f"baseline-{attempt}"
    return "calibrate" if kind == "calibrate" else f"step-{n}-{kind}"


def _state_block(stored: Stored) -> str:
    data = stored.model_dump_json()
    if len(data) <= INLINE_STATE_LIMIT:
        return f"```json\n{data}\n```"
    packed = base64.b64encode(zlib.compress(data.encode(), 9)).decode()
    lines = "\n".join(packed[i : i + 76] for i in range(0, len(packed), 76))
    return f"```attune-state-zlib-base64\n{lines}\n```"


def render_state(stored: Stored) -> str:
    """The state comment: the campaign dashboard, then the state in a folded block (dashboard dropped if too long)."""
    from bot.report import render_campaign_summary

    block = _state_block(stored)
    state = (
        "<details><summary>campaign state (written by the bot after every transition; do not edit)</summary>\n\n"
        f"{block}\n\n</details>"
    )
    room = GITHUB_BODY_LIMIT - len(marker(STATE_MARKER)) - 200
    if len(state) > room:
        raise GitHubForgeError(f"campaign state of {stored.campaign.id} is {len(state)} characters; a comment holds {room}")
    dashboard = render_campaign_summary(stored.campaign)
    body = f"{dashboard}\n{state}"
    return body if len(body) <= room else f"Campaign {stored.campaign.id}: the dashboard is too long to show here.\n\n{state}"


def parse_state(body: str) -> Stored | None:
    packed = _FENCE_Z.search(body)
    if packed:
        return Stored.model_validate_json(zlib.decompress(base64.b64decode("".join(packed.group(1).split()))))
    found = _FENCE.search(body)
    return Stored.model_validate_json(found.group(1)) if found else None


def load_state(forge: GitHubForge, issue: int) -> Stored | None:
    """The stored campaign of ``issue`` (only from a comment written by the bot), or None."""
    tag = marker(STATE_MARKER)
    for comment in forge._repo.get_issue(issue).get_comments():  # noqa: SLF001 - the forge's own repository
        if (comment.body or "").lstrip().startswith(tag) and forge._is_ours(comment):  # noqa: SLF001
            stored = parse_state(comment.body)
            if stored is not None:
                return stored
    return None


def save_state(forge: GitHubForge, stored: Stored) -> None:
    forge.upsert_comment(stored.issue, STATE_MARKER, render_state(stored))


class _IssueForge:
    """The GitHub forge as the shared driver expects it: target 0 is the campaign issue, a step's head is the one
    the bot measured or made (``Stored.heads``), and stacked steps branch from their parent step."""

    def __init__(self, forge: GitHubForge, issue: int, heads: dict[int, str]) -> None:
        self._forge, self._issue, self._heads = forge, issue, heads

    def __getattr__(self, name: str) -> Any:
        return getattr(self._forge, name)

    def upsert_comment(self, target: Any, name: str, body: str) -> None:
        self._forge.upsert_comment(self._issue if target == 0 else target, name, body)

    def find_step(self, campaign: str, n: int) -> StepRef | None:
        ref = self._forge.find_step(campaign, n)
        expected = self._heads.get(n)
        if ref is not None and expected and ref.state == "open" and ref.head_sha != expected:
            # someone else moved the branch: act on the head the bot knows; the forge refuses to build on it
            ref = ref.model_copy(update={"head_sha": expected})
        return ref

    def open_step(self, req: Any, base_ref: str | None = None) -> StepRef:
        ref = self._forge.open_step(req, base_ref=base_ref)
        self._heads[req.n] = ref.head_sha
        return ref

    def add_files(self, step: StepRef, files: dict[str, str], message: str) -> StepRef:
        ref = self._forge.add_files(step, files, message)
        self._heads[step.n] = ref.head_sha
        return ref


class GitHubDriver(Driver):
    """Runs the campaign's pending actions until one needs a self-hosted runner, which it dispatches and leaves
    pending."""

    def __init__(self, *, forge: GitHubForge, stored: Stored, dispatch_ref: str | None = None, redispatch: bool = False,
                 **kw: Any) -> None:
        from bot.agent.policy import get_policy
        from bot.gating import config_gate, convergence_gate
        from bot.lessons import load_lessons
        from bot.local_campaign import make_space

        self.gh = forge
        self.stored = stored
        self.heads: dict[int, str] = dict(stored.heads)
        self.dispatch_ref = dispatch_ref or forge.base_branch
        self.redispatch = redispatch  # dispatch the pending run even if it was dispatched before (resume, nudge)
        self._sim: bool | None = None
        c = stored.campaign
        lessons = kw.pop("lessons", None)
        super().__init__(
            forge=_IssueForge(forge, stored.issue, self.heads), runner=None,  # type: ignore[arg-type]
            policy=kw.pop("policy", None) or get_policy(c.policy), lessons=load_lessons() if lessons is None else lessons,
            recipe_path=c.recipe_path, work_dir=kw.pop("work_dir", "."), space_fn=kw.pop("space_fn", make_space),
            gate_config=kw.pop("gate_config", config_gate), gate_convergence=kw.pop("gate_convergence", convergence_gate), **kw,
        )

    # -- state on the issue
    def save(self, state: cm.Campaign) -> None:
        self.stored = self.stored.model_copy(update={"campaign": state, "heads": dict(self.heads)})
        save_state(self.gh, self.stored)

    def load(self, cid: str) -> cm.Campaign:
        return self.stored.campaign

    def advance(self, event: Any) -> cm.Campaign:
        """Feed ``event`` (a run result, a command) and persist; a run result also ends the run in flight."""
        state, _ = cm.advance(self.stored.campaign, event)
        if isinstance(event, cm.RunFinished | cm.Calibrated):
            self.stored = self.stored.model_copy(update={"dispatched": ""})
        self.save(state)
        return state

    # -- records on the records branch
    def _ensure_records_branch(self, cid: str) -> str:
        branch = records_branch(cid)
        if self.gh._branch_head(branch) is None:  # noqa: SLF001
            base = self.gh._branch_head(self.gh.base_branch)  # noqa: SLF001
            self.gh._repo.create_git_ref(f"refs/heads/{branch}", base)  # noqa: SLF001
        return branch

    def put_record_file(self, cid: str, path: str, text: str, message: str) -> str:
        branch = self._ensure_records_branch(cid)
        repo = self.gh._repo  # noqa: SLF001
        try:
            existing = self.gh._get_file(path, branch)  # noqa: SLF001
        except Exception:  # noqa: BLE001 - not there yet
            repo.create_file(path, message, text, branch=branch)
        else:
            if existing.text != text:
                repo.update_file(path, message, text, sha=existing.blob_sha, branch=branch)
        return f"{branch}:{path}"

    def record(self, ref: cm.RunRef) -> RunRecord | None:  # type: ignore[override]
        """The run's record from the records branch; None for a run that left none (crashed runner, no artifact)."""
        if not ref.record:
            return None
        branch, _, path = ref.record.partition(":")
        return RunRecord.model_validate_json(self.gh.read_file(path, branch))

    def latest_diagnosis(self, state: cm.Campaign) -> Any:
        """As the shared driver's, except that a failed run that left no record is not diagnosed (the incumbent is)."""
        from bot.agent.diagnose import diagnose

        last = state.steps[-1].runs[-1] if state.steps and state.steps[-1].runs else None
        if last is not None and (last.outcome in MEASURED_OUTCOMES or not last.record):
            last = None
        if last is None:
            inc = state.step(state.incumbent_step).runs if state.incumbent_step else state.baseline
            last = (inc or state.baseline)[-1]
        return diagnose(self.record(last))

    def base_text_at_start(self, state: cm.Campaign) -> str:
        path = f"campaigns/{state.id}/baseline-recipe.yaml"
        branch = self._ensure_records_branch(state.id)
        try:
            return self.gh.read_file(path, branch)
        except GitHubForgeError:
            text = self.base_text()
            self.put_record_file(state.id, path, text, "attune: the recipe as the baseline runs it")
            return text

    def simulated(self, state: cm.Campaign) -> bool:
        """Whether the campaign's recipe is simulated (its calibration needs no runs)."""
        if self._sim is None:
            from bot.drive import parse_recipe_text

            self._sim = parse_recipe_text(self.base_text_at_start(state), state.recipe_path).cluster.launcher == "sim"
        return self._sim

    def needs_runner(self, state: cm.Campaign, action: Any) -> bool:
        if isinstance(action, RUN_ACTIONS):
            return True
        return isinstance(action, cm.Calibrate) and not self.simulated(state)

    # -- actions that differ on GitHub
    def _calibrate(self, state: cm.Campaign) -> cm.Calibrated:
        """A simulated recipe's loss band (modelled, no runs): computed right here, in the hosted job."""
        from bot.gating import calibrate_loss_band

        reference = self.record(state.baseline[0])
        if reference is None:
            return cm.Calibrated(note="no loss band: the baseline left no record; tier-R/N steps fail closed")
        if self.calibrate is not None:
            return self.calibrate(self.base_text_at_start(state), reference)
        with tempfile.TemporaryDirectory(prefix="attune-cal-") as cache:
            return calibrate_loss_band(self.base_text_at_start(state), reference, cache_dir=Path(cache))

    def _open(self, state: cm.Campaign, n: int) -> cm.StepOpened:
        opened = super()._open(state, n)
        self.heads[n] = opened.head_sha
        return opened

    def _attach(self, state: cm.Campaign, n: int, files: dict[str, str], message: str) -> StepRef:
        """Files on the step branch (report, closing note), with the step's run records beside them.

        A branch that someone else moved after the bot measured it gets nothing more (its report is still
        commented and it can still be closed; ``_merge`` refuses it)."""
        ref = self.forge.find_step(state.id, n)
        if ref is None:
            raise GitHubForgeError(f"step {n} of {state.id} is not on GitHub")
        moved = self.gh._branch_head(ref.branch)  # noqa: SLF001
        if ref.state == "open" and moved != ref.head_sha:
            print(f"attune: {ref.branch} moved to {moved} after the bot's {ref.head_sha}; not committing on it", file=sys.stderr)
            return ref
        records: dict[str, str] = {}
        for run in state.step(n).runs:
            if run.record:
                branch, _, path = run.record.partition(":")
                records[f"campaigns/{state.id}/step-{n}/{run.kind}.json"] = self.gh.read_file(path, branch)
        return super()._attach(state, n, {**records, **files}, message)

    def execute(self, state: cm.Campaign, action: Any) -> Any:
        if isinstance(action, cm.SetStatus):
            ref = self.forge.find_step(state.id, action.n)
            if ref is None:
                raise GitHubForgeError(f"step {action.n} of {state.id} is not on GitHub")
            measured = state.step(action.n).head_sha
            for sha in dict.fromkeys([measured, ref.head_sha]):  # the measured head, then the bot's report head
                if sha:
                    self.gh.set_status(ref.model_copy(update={"head_sha": sha}), action.state, action.description)
            return cm.Done()
        return super().execute(state, action)

    def _merge(self, state: cm.Campaign, n: int) -> cm.StepMerged:
        merged = super()._merge(state, n)
        # the report comment was written before the merge: say it was kept (the same comment, edited in place)
        from bot.report import render_step_report

        view = state.model_copy(deep=True)
        st = view.step(n)
        st.state, st.kept = "merged", True
        trial = next((r for r in st.runs if r.kind == "trial"), None)
        ref = self.forge.find_step(state.id, n)
        if ref is not None:
            report = render_step_report(view, st, self.record(trial) if trial else None, self.record(state.baseline[0]))
            self.gh.upsert_comment(ref, f"attune:step-{n}", report)
        if any(r.outcome == "ok" and not r.simulated for r in state.step(n).runs):
            # A merge made with GITHUB_TOKEN starts no push workflow: ask for the leaderboard explicitly.
            try:
                self.gh.dispatch(LEADERBOARD_WORKFLOW, self.gh.base_branch, {})
            except Exception as exc:  # noqa: BLE001 - the merge stands; the next push to results/ regenerates it
                print(f"attune: could not dispatch {LEADERBOARD_WORKFLOW}: {exc}", file=sys.stderr)
        return merged

    # -- the loop: stop at a runner action, dispatch it once
    def loop(self, state: cm.Campaign) -> cm.Campaign:
        while state.pending:
            action = state.pending[0]
            if self.needs_runner(state, action):
                key = run_key(action)
                if self.redispatch or self.stored.dispatched != key:
                    self.dispatch_run(state, action)
                    self.stored = self.stored.model_copy(update={"dispatched": key})
                    self.save(state)
                return state
            event = self.execute(state, action)
            state, _ = cm.advance(state, event)
            self.save(state)
            self.transitions += 1
        return state

    def dispatch_run(self, state: cm.Campaign, action: Any) -> None:
        kind, n, attempt = run_kind(action)
        if kind in ("baseline", "calibrate"):
            self.base_text_at_start(state)
            pr, sha = 0, self.gh._branch_head(self.gh.base_branch)  # noqa: SLF001
        else:
            ref = self.forge.find_step(state.id, n)
            if ref is None:
                raise GitHubForgeError(f"step {n} of {state.id} is not on GitHub")
            pr, sha = ref.number, ref.head_sha
            self.heads[n] = sha
        self.gh.dispatch(TRIAL_WORKFLOW, self.dispatch_ref, {
            "campaign": state.id, "issue": self.stored.issue, "pr": pr, "sha": sha, "kind": kind, "attempt": attempt,
            "recipe": state.recipe_path, "runner_labels": json.dumps(self.stored.runner_labels),
            "limits": json.dumps(run_limits(state, kind)),
        })


def run_limits(state: cm.Campaign, kind: str) -> dict[str, float]:
    """What the self-hosted run may spend and when it may stop early (trial.yml's ``limits`` input, checked by
    ``check-trial``): ``max_wall_s``, the campaign's hard budget cap (what is left, in wall seconds on the recipe's
    devices), and for a trial of a campaign with ``early_stop`` the ``stop_below_tps`` bound
    (``Campaign.early_stop_bound``)."""
    limits = {"max_wall_s": round(max(0.0, state.budget - state.spent) * 3600.0 / max(state.devices, 1), 3)}
    bound = state.early_stop_bound() if kind == "trial" else None
    if bound is not None and round(bound, 3) > 0:
        limits["stop_below_tps"] = round(bound, 3)
    return {k: v for k, v in limits.items() if v > 0}  # check-trial refuses non-positive numbers: never send one
