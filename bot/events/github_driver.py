"""The GitHub driver: executes the campaign's actions (bot.campaign) on GitHub, one workflow run at a time.

Reuses :class:`bot.drive.Driver` for every action except the runs: a run (baseline, trial, re-measure) is a
``trial.yml`` dispatch, after which the workflow run ends; the trial's report job feeds ``RunFinished`` back
(``bot.events.trial_results``). The workflow run is stateless, so the campaign state lives on GitHub: a JSON block
in one hidden-marker comment on the campaign issue (``<!-- attune:state -->``), rewritten after every transition.
Run records and the recipe as the baseline ran it are committed on the bot branch ``attune/<campaign>/records``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel, Field

from bot import campaign as cm
from bot.drive import Driver
from bot.forge.github import GitHubForge, GitHubForgeError
from bot.forge.markers import marker
from bot.records import RunRecord

STATE_MARKER = "state"
TRIAL_WORKFLOW = "trial.yml"
_FENCE = re.compile(r"```json\n(.*?)\n```", re.S)
RUN_ACTIONS = (cm.RunBaseline, cm.RunTrial, cm.Confirm)


class Stored(BaseModel):
    """What is persisted on the campaign issue: the state machine's state plus the request's GitHub facts."""

    issue: int
    runner_labels: list[str] = Field(default_factory=list)
    campaign: cm.Campaign


def records_branch(cid: str) -> str:
    return f"attune/{cid}/records"


def load_state(forge: GitHubForge, issue: int) -> Stored | None:
    """The stored campaign of ``issue`` (only from a comment written by the bot), or None."""
    tag = marker(STATE_MARKER)
    for comment in forge._repo.get_issue(issue).get_comments():  # noqa: SLF001 - the forge's own repository
        if (comment.body or "").lstrip().startswith(tag) and forge._is_ours(comment):  # noqa: SLF001
            found = _FENCE.search(comment.body)
            if found:
                return Stored.model_validate_json(found.group(1))
    return None


def save_state(forge: GitHubForge, stored: Stored) -> None:
    body = (
        "Campaign state (written by the bot after every transition; do not edit).\n\n<details><summary>state</summary>\n\n"
        f"```json\n{stored.model_dump_json()}\n```\n\n</details>"
    )
    forge.upsert_comment(stored.issue, STATE_MARKER, body)


class _IssueForge:
    """The GitHub forge as the local driver expects it: target 0 is the campaign issue."""

    def __init__(self, forge: GitHubForge, issue: int) -> None:
        self._forge, self._issue = forge, issue

    def __getattr__(self, name: str) -> Any:
        return getattr(self._forge, name)

    def upsert_comment(self, target: Any, name: str, body: str) -> None:
        self._forge.upsert_comment(self._issue if target == 0 else target, name, body)

    def open_step(self, req: Any, base_ref: str | None = None) -> Any:
        if base_ref:
            raise GitHubForgeError("stacked steps (OOM retries on a parent step) are not supported on GitHub yet")
        return self._forge.open_step(req)


class GitHubDriver(Driver):
    """Runs the campaign's pending actions until one needs a trial run, which it dispatches and leaves pending."""

    def __init__(self, *, forge: GitHubForge, stored: Stored, dispatch_ref: str | None = None, **kw: Any) -> None:
        from bot.agent.policy import get_policy
        from bot.gating import config_gate, convergence_gate
        from bot.lessons import load_lessons
        from bot.local_campaign import make_space

        self.gh = forge
        self.stored = stored
        self.dispatch_ref = dispatch_ref or forge.base_branch
        c = stored.campaign
        super().__init__(
            forge=_IssueForge(forge, stored.issue), runner=None, policy=kw.pop("policy", None) or get_policy(c.policy),  # type: ignore[arg-type]
            lessons=kw.pop("lessons", None) or load_lessons(), recipe_path=c.recipe_path,
            work_dir=kw.pop("work_dir", "."), space_fn=make_space, gate_config=config_gate, gate_convergence=convergence_gate, **kw,
        )

    # -- state on the issue
    def save(self, state: cm.Campaign) -> None:
        self.stored = self.stored.model_copy(update={"campaign": state})
        save_state(self.gh, self.stored)

    def load(self, cid: str) -> cm.Campaign:
        return self.stored.campaign

    def advance(self, event: Any) -> cm.Campaign:
        state, _ = cm.advance(self.stored.campaign, event)
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

    def record(self, ref: cm.RunRef) -> RunRecord:
        branch, _, path = ref.record.partition(":")
        return RunRecord.model_validate_json(self.gh.read_file(path, branch))

    def base_text_at_start(self, state: cm.Campaign) -> str:
        path = f"campaigns/{state.id}/baseline-recipe.yaml"
        branch = self._ensure_records_branch(state.id)
        try:
            return self.gh.read_file(path, branch)
        except GitHubForgeError:
            text = self.base_text()
            self.put_record_file(state.id, path, text, "attune: the recipe as the baseline runs it")
            return text

    # -- the loop: stop at a run, dispatch it
    def loop(self, state: cm.Campaign) -> cm.Campaign:
        while state.pending:
            action = state.pending[0]
            if isinstance(action, RUN_ACTIONS):
                self.dispatch_run(state, action)
                return state
            event = self.execute(state, action)
            state, _ = cm.advance(state, event)
            self.save(state)
            self.transitions += 1
        return state

    def dispatch_run(self, state: cm.Campaign, action: Any) -> None:
        if isinstance(action, cm.RunBaseline):
            self.base_text_at_start(state)
            pr, sha = 0, self.gh._branch_head(self.gh.base_branch)  # noqa: SLF001
        else:
            ref = self.gh.find_step(state.id, action.n)
            if ref is None:
                raise GitHubForgeError(f"step {action.n} of {state.id} is not on GitHub")
            pr, sha = ref.number, ref.head_sha
        self.gh.dispatch(TRIAL_WORKFLOW, self.dispatch_ref, {
            "campaign": state.id, "issue": self.stored.issue, "pr": pr, "sha": sha,
            "runner_labels": json.dumps(self.stored.runner_labels),
        })


def run_kind(action: Any) -> tuple[str, int, int]:
    if isinstance(action, cm.RunBaseline):
        return "baseline", 0, action.attempt
    return ("trial" if isinstance(action, cm.RunTrial) else "confirm"), action.n, 1
