"""The executor's ports on GitHub: a campaign advances one workflow run at a time.

The one executor (:mod:`bot.drive.executor`) runs every action; on GitHub its run port turns a run (baseline,
trial, re-measure) and, for a real (not simulated) recipe, the loss-band calibration into a ``trial.yml`` dispatch
and suspends, after which the workflow run ends; the trial's report job feeds ``RunFinished`` / ``Calibrated`` back
(``bot.github.trial_results``). The workflow run is stateless, so the campaign state lives on GitHub: one
hidden-marker comment on the campaign issue (``<!-- attune:state -->``), rewritten after every transition, which shows
the campaign dashboard (steps, outcomes, gate, gain) and carries the state as a JSON block (the state store). Run
records, the calibration and the recipe as the baseline ran it are committed on the bot branch
``attune/<campaign>/records`` (the record store).

Guards of these ports:

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

from pydantic import BaseModel, Field, PrivateAttr

from bot import campaign as cm
from bot.core.records import RunRecord
from bot.forge.base import StepRef
from bot.forge.github import GitHubForge, GitHubForgeError
from bot.forge.markers import GITHUB_BODY_LIMIT, marker

STATE_MARKER = "state"
TRIAL_WORKFLOW = "trial.yml"
LEADERBOARD_WORKFLOW = "leaderboard.yml"
_FENCE = re.compile(r"```json\n(.*?)\n```", re.S)
_FENCE_Z = re.compile(r"```attune-state-zlib-base64\n(.*?)\n```", re.S)
STATE_INFLATE_CAP = 16 * 1024 * 1024  # bytes a compressed state block may inflate to (the bot's are far smaller)
INLINE_STATE_LIMIT = 40_000  # above this the state JSON is stored compressed (a comment holds 65,536 characters)
RUN_ACTIONS = (cm.RunBaseline, cm.RunTrial, cm.MeasurePair)
RUNNER_ACTIONS = (*RUN_ACTIONS, cm.Calibrate)  # what a self-hosted runner may have to do


class Stored(BaseModel):
    """What is persisted of a campaign on GitHub: the state machine's state plus the request's GitHub facts.

    The authoritative copy is ``campaigns/<id>/state.json`` on the records branch, replaced only with the blob sha it
    was read at (a compare-and-swap: GitHub refuses the write with 409 when another run wrote first); the state
    comment on the issue is its view (rewritten after every transition, for people), and the bootstrap from which a
    campaign's id is found."""

    issue: int
    runner_labels: list[str] = Field(default_factory=list)
    campaign: cm.Campaign
    dispatched: str = ""  # the run dispatched to trial.yml and not answered yet (run_key), "" when none
    heads: dict[int, str] = Field(default_factory=dict)  # step -> the head the bot measured or made last
    handled: list[int] = Field(default_factory=list)  # ids of the /attune comments already applied (most recent last)
    # the records branch's head as the bot last verified or made it: every commit after it must be the bot's own
    records_head: str = ""
    _blob: str | None = PrivateAttr(default=None)  # blob sha of state.json as it was read (None: not written yet)
    _head: str | None = PrivateAttr(default=None)  # the records branch head this copy was read at, verified


class StateConflict(RuntimeError):
    """Another workflow run wrote the campaign state after this one read it: re-read and handle the event again."""


STATE_FILE = "state.json"
HANDLED_KEPT = 500  # command ids remembered (a re-delivery comes within minutes; the list stays small)


def records_branch(cid: str) -> str:
    return f"attune/{cid}/records"


def run_kind(action: Any) -> tuple[str, int, int]:
    """(kind, step, attempt) of a runner action: kind is baseline, trial, pair (attempt: the pair's number) or
    calibrate."""
    if isinstance(action, cm.RunBaseline):
        return "baseline", 0, action.attempt
    if isinstance(action, cm.Calibrate):
        return "calibrate", 0, 1
    if isinstance(action, cm.MeasurePair):
        return "pair", action.n, action.k
    return "trial", action.n, 1


def run_key(action: Any) -> str:
    """The name of a runner action's run: ``baseline-2``, ``step-3-trial``, ``step-3-pair2`` (the executor's
    names, :func:`bot.drive.executor.run_key`; a pair's two records are ``step-3-pair2-incumbent`` and
    ``-candidate``), or ``calibrate``."""
    from bot.drive.executor import run_key as executor_run_key

    kind, n, attempt = run_kind(action)
    if kind == "pair":
        return f"step-{n}-pair{attempt}"
    return "calibrate" if kind == "calibrate" else executor_run_key(kind, n, attempt)


def _state_block(stored: Stored) -> str:
    data = stored.model_dump_json()
    if len(data) <= INLINE_STATE_LIMIT:
        return f"```json\n{data}\n```"
    packed = base64.b64encode(zlib.compress(data.encode(), 9)).decode()
    lines = "\n".join(packed[i : i + 76] for i in range(0, len(packed), 76))
    return f"```attune-state-zlib-base64\n{lines}\n```"


def render_state(stored: Stored) -> str:
    """The state comment: the campaign dashboard, then the state in a folded block (dashboard dropped if too long)."""
    from bot.campaign.report import render_campaign_summary

    block = _state_block(stored)
    state = (
        "<details><summary>campaign state (written by the bot after every transition; do not edit)</summary>\n\n"
        f"{block}\n\n</details>"
    )
    room = GITHUB_BODY_LIMIT - len(marker(STATE_MARKER)) - 200
    if len(state) > room:
        raise GitHubForgeError(
            f"campaign state of {stored.campaign.id} is {len(state)} characters; a comment holds {room}"
        )
    dashboard = render_campaign_summary(stored.campaign)
    body = f"{dashboard}\n{state}"
    return (
        body
        if len(body) <= room
        else f"Campaign {stored.campaign.id}: the dashboard is too long to show here.\n\n{state}"
    )


def parse_state(body: str) -> Stored | None:
    """The state in a state comment's body: its LAST state block (a block quoted above it by anyone is not it).
    A block that is not a state raises ``ValueError`` (pydantic's ``ValidationError`` is one)."""
    blocks = [(m.start(), "z", m.group(1)) for m in _FENCE_Z.finditer(body)] + [
        (m.start(), "j", m.group(1)) for m in _FENCE.finditer(body)
    ]
    if not blocks:
        return None
    _, kind, data = max(blocks)
    if kind == "z":
        try:
            inflater = zlib.decompressobj()
            raw = inflater.decompress(base64.b64decode("".join(data.split())), STATE_INFLATE_CAP)
        except (ValueError, zlib.error) as exc:
            raise ValueError(f"the state block is not zlib-compressed base64: {exc}") from None
        if inflater.unconsumed_tail:  # a block that inflates beyond any state the bot writes: refused, not inflated
            raise ValueError(f"the state block inflates to more than {STATE_INFLATE_CAP:,} bytes")
        return Stored.model_validate_json(raw)
    return Stored.model_validate_json(data)


def load_state(forge: GitHubForge, issue: int) -> Stored | None:
    """The stored campaign of ``issue``, or None: found through the bot's own state comment (never another
    author's), read from the records branch's ``state.json`` (the authoritative copy, with the blob sha a write must
    match). With the bot's login unknown no comment can be trusted, so nothing is loaded (fail closed)."""
    if not forge.bot_login:
        raise GitHubForgeError("the bot's own login is unknown (set ATTUNE_BOT_LOGIN): no campaign state is trusted")
    tag = marker(STATE_MARKER)
    view = None
    for comment in forge._repo.get_issue(issue).get_comments():  # noqa: SLF001 - the forge's own repository
        if (comment.body or "").lstrip().startswith(tag) and forge._is_ours(comment):  # noqa: SLF001
            view = parse_state(comment.body)
            if view is not None:
                break
    if view is None or view.issue != issue:
        return None
    branch = records_branch(view.campaign.id)
    head = forge._branch_head(branch)  # noqa: SLF001
    if head is None:
        return view  # not written yet (the campaign's first workflow run): the view is all there is
    try:
        found = forge._get_file(f"campaigns/{view.campaign.id}/{STATE_FILE}", head)  # noqa: SLF001
    except Exception:  # noqa: BLE001 - not written yet
        return view
    records_provenance(forge, branch, view.records_head, head)
    stored = Stored.model_validate_json(found.text)
    stored._blob, stored._head = found.blob_sha, head  # noqa: SLF001
    return stored


def records_provenance(forge: GitHubForge, branch: str, since: str, head: str) -> None:
    """Trust the records branch at ``head`` only if every commit on it since ``since`` (the head the bot last verified
    or made, as its own state comment says; else since the default branch) is the bot's own -- linked to its login
    and signed by GitHub -- not just the head commit: a writer's push under the bot's next commit is caught too.
    Raises :class:`GitHubForgeError` naming the first foreign commits."""
    foreign = (
        forge.foreign_commits(since, head)
        if since
        else forge.foreign_commits(forge.base_branch, head, require_descent=False)
    )
    if foreign:
        raise GitHubForgeError(
            f"{branch} is not trusted: commits since {since[:12] or forge.base_branch} that are not the "
            f"bot's own: {'; '.join(foreign[:3])}; restore the branch to the bot's last commit"
        )


def save_state(forge: GitHubForge, stored: Stored) -> None:
    forge.upsert_comment(stored.issue, STATE_MARKER, render_state(stored))


class IssueForge:
    """The GitHub forge as the executor sees it: target 0 is the campaign issue, a step's head is the one the bot
    measured or made (``Stored.heads``), and a branch someone else moved after the bot measured it gets no more
    commits from the bot (its report is still commented and it can still be closed; the forge refuses to merge it).

    Steps are looked up once per workflow run and then kept up to date by the bot's own changes (open, add files,
    merge, close): a handler asks for the same step several times, and each lookup is two API calls."""

    def __init__(self, forge: GitHubForge, issue: int, heads: dict[int, str]) -> None:
        self._forge, self._issue, self._heads = forge, issue, heads
        self._steps: dict[tuple[str, int], StepRef] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._forge, name)

    def upsert_comment(self, target: Any, name: str, body: str) -> None:
        self._forge.upsert_comment(self._issue if target == 0 else target, name, body)

    def _keep(self, ref: StepRef) -> StepRef:
        self._steps[(ref.campaign, ref.n)] = ref
        return ref

    def find_step(self, campaign: str, n: int) -> StepRef | None:
        ref = self._steps.get((campaign, n)) or self._forge.find_step(campaign, n)
        if ref is None:
            return None
        self._keep(ref)
        expected = self._heads.get(n)
        if expected and ref.state == "open" and ref.head_sha != expected:
            # someone else moved the branch: act on the head the bot knows; the forge refuses to build on it
            ref = ref.model_copy(update={"head_sha": expected})
        return ref

    def open_step(self, req: Any, base_ref: str | None = None) -> StepRef:
        ref = self._keep(self._forge.open_step(req, base_ref=base_ref))
        self._heads[req.n] = ref.head_sha
        return ref

    def add_files(self, step: StepRef, files: dict[str, str], message: str) -> StepRef:
        moved = self._forge._branch_head(step.branch)  # noqa: SLF001 - the forge's own repository
        if step.state == "open" and moved != step.head_sha:
            print(
                f"attune: {step.branch} moved to {moved} after the bot's {step.head_sha}; not committing on it",
                file=sys.stderr,
            )
            return step
        ref = self._keep(self._forge.add_files(step, files, message))
        self._heads[step.n] = ref.head_sha
        return ref

    def merge(self, step: StepRef, message: str) -> StepRef:
        self._steps.pop((step.campaign, step.n), None)  # looked up afresh: merged, or refused
        return self._keep(self._forge.merge(step, message))

    def close(self, step: StepRef, reason: str) -> StepRef:
        self._steps.pop((step.campaign, step.n), None)
        return self._keep(self._forge.close(step, reason))


class GitHubPorts:
    """State store, record store and run port of one campaign issue (they share the stored state)."""

    def __init__(
        self,
        forge: GitHubForge,
        stored: Stored,
        *,
        dispatch_ref: str | None = None,
        redispatch: bool = False,
        calibrate: Any = None,
    ) -> None:
        self.gh, self.stored = forge, stored
        self.heads: dict[int, str] = dict(stored.heads)
        self.forge = IssueForge(forge, stored.issue, self.heads)
        self.dispatch_ref = dispatch_ref or forge.base_branch
        self.redispatch = redispatch  # dispatch the pending run even if it was dispatched before (resume, nudge)
        self.calibrator = calibrate
        self._sim: bool | None = None
        self._branches: set[str] = set()
        self._files: dict[str, str] = {}  # records-branch files read or written in this workflow run, by reference
        self._head: str | None = stored._head  # noqa: SLF001 - the records branch head, verified or made by the bot

    # -- state store: the state comment on the issue
    def load(self, cid: str) -> cm.Campaign | None:
        return self.stored.campaign if self.stored.campaign.id == cid else None

    def save(self, state: cm.Campaign) -> None:
        """The view: the state comment, rewritten after every transition (``settle`` writes the authority)."""
        self.stored = self.stored.model_copy(
            update={
                "campaign": state,
                "heads": dict(self.heads),
                "records_head": self._head or self.stored.records_head,
            }
        )
        save_state(self.gh, self.stored)

    def settle(self) -> None:
        """Write the authoritative state (``state.json`` on the records branch) over the copy this run read — a
        compare-and-swap: the bot's commit names the records head it read or made as its parent and the branch moves
        only as a fast-forward, so :class:`StateConflict` is raised when another run (or anyone) wrote in between."""
        cid = self.stored.campaign.id
        path = f"campaigns/{cid}/{STATE_FILE}"
        try:
            self._commit_records(cid, {path: self.stored.model_dump_json(indent=1) + "\n"}, f"attune: state of {cid}")
        except GitHubForgeError as exc:
            raise StateConflict(f"the state of {cid} was written by another run: {exc}") from exc

    def remember_command(self, comment_id: int) -> None:
        """Record that the ``/attune`` comment ``comment_id`` was applied (a re-delivery then changes nothing)."""
        handled = [*self.stored.handled, int(comment_id)][-HANDLED_KEPT:]
        self.stored = self.stored.model_copy(update={"handled": handled})

    def result_received(self) -> None:
        """A run result arrived (the report job): no run is in flight any more."""
        self.stored = self.stored.model_copy(update={"dispatched": ""})

    # -- record store: files on the records branch; references are ``branch:path``
    def _ensure_records_branch(self, cid: str) -> str:
        branch = records_branch(cid)
        if branch not in self._branches and self.gh._branch_head(branch) is None:  # noqa: SLF001
            base = self.gh._branch_head(self.gh.base_branch)  # noqa: SLF001
            assert base is not None, f"no branch {self.gh.base_branch}"
            self.gh._repo.create_git_ref(f"refs/heads/{branch}", base)  # noqa: SLF001
        self._branches.add(branch)  # a branch once there stays there (the bot never deletes it)
        return branch

    def _commit_records(self, cid: str, files: dict[str, str], message: str) -> str:
        """Commit ``files`` on the records branch on the head this run verified or made (Git Data API, fast-forward
        only: :meth:`GitHubForge.add_files`'s guard); the branch is checked first when this run has no such head."""
        branch = self._ensure_records_branch(cid)
        if self._head is None:
            head = self.gh._branch_head(branch)  # noqa: SLF001
            if head is None:
                raise GitHubForgeError(f"{branch} is gone")
            records_provenance(self.gh, branch, self.stored.records_head, head)
            self._head = head
        made = self.gh._write_commit(self._head, files, message)  # noqa: SLF001
        if made is not None:
            self.gh._move_branch(branch, made, self._head)  # noqa: SLF001
            self._head = made
        return branch

    def _put_file(self, cid: str, path: str, text: str, message: str) -> str:
        branch = self._commit_records(cid, {path: text}, message)
        self._files[f"{branch}:{path}"] = text
        return f"{branch}:{path}"

    def _get_file(self, cid: str, path: str) -> str | None:
        branch = records_branch(cid)
        if branch not in self._branches:  # no records branch yet reads as no file
            if self.gh._branch_head(branch) is None:  # noqa: SLF001
                return None
            self._branches.add(branch)
        return self.read_text(f"{branch}:{path}")

    def read_text(self, ref: str) -> str | None:
        """A records-branch file by reference; a file the bot wrote or read in this run is not fetched again (the
        bot writes each record once, and only the bot writes this branch)."""
        if not ref:
            return None
        if ref in self._files:
            return self._files[ref]
        branch, _, path = ref.partition(":")
        try:
            text = self.gh.read_file(path, branch)
        except GitHubForgeError:
            return None
        self._files[ref] = text
        return text

    def read(self, ref: str) -> RunRecord | None:
        """The run's record from the records branch; None for a run that left none (crashed runner, no artifact)."""
        text = self.read_text(ref)
        return RunRecord.model_validate_json(text) if text is not None else None

    def find_run(self, cid: str, key: str) -> tuple[RunRecord, str] | None:
        path = f"campaigns/{cid}/{key}.json"
        text = self._get_file(cid, path)
        return (RunRecord.model_validate_json(text), f"{records_branch(cid)}:{path}") if text is not None else None

    def put_run(self, cid: str, key: str, record: RunRecord) -> str:
        return self._put_file(
            cid, f"campaigns/{cid}/{key}.json", record.model_dump_json(indent=1) + "\n", f"attune: {key} record"
        )

    def get(self, cid: str, name: str) -> str | None:
        return self._get_file(cid, f"campaigns/{cid}/{name}")

    def put(self, cid: str, name: str, text: str) -> str:
        return self._put_file(cid, f"campaigns/{cid}/{name}", text, f"attune: {name}")

    # -- run port: a dispatch of trial.yml, once per run
    def simulated(self, state: cm.Campaign, recipe_text: str) -> bool:
        """Whether the campaign's recipe is simulated (its calibration needs no runs)."""
        if self._sim is None:
            from bot.drive.executor import parse_recipe_text

            self._sim = parse_recipe_text(recipe_text, state.recipe_path).cluster.launcher == "sim"
        return self._sim

    def run(self, state: cm.Campaign, request: Any) -> None:
        limits = {"max_wall_s": round(request.max_wall_s, 3)}
        if request.early_stop is not None and round(request.early_stop.below_tps, 3) > 0:
            limits["stop_below_tps"] = round(request.early_stop.below_tps, 3)
        self._dispatch_once(state, request.kind, request.n, request.attempt, {k: v for k, v in limits.items() if v > 0})
        return None

    def run_pair(self, state: cm.Campaign, action: cm.MeasurePair, texts: dict[str, str]) -> None:
        """A pair runs in one job on one runner (a label names a pool of machines): trial.yml's ``pair`` kind checks
        out the default branch head (the incumbent) beside the step's head and runs them in ``action.order``; its
        report job feeds both records back. Answers None: suspended."""
        limits = run_limits(state, "pair")
        self._dispatch_once(state, "pair", action.n, action.k, limits, order=action.order)
        return None

    def calibrate(self, state: cm.Campaign, recipe_text: str, reference: RunRecord | None) -> cm.Calibrated | None:
        """A simulated recipe's loss band is modelled right here, in the hosted job; a real one is measured on the
        self-hosted runner (a ``calibrate`` dispatch)."""
        if not self.simulated(state, recipe_text):
            self._dispatch_once(state, "calibrate", 0, 1, run_limits(state, "calibrate"))
            return None
        if reference is None:
            return cm.Calibrated(note="no loss band: the baseline left no record; tier-R/N steps fail closed")
        if self.calibrator is not None:
            return self.calibrator(recipe_text, reference)
        from bot.campaign.gate_calls import calibrate_loss_band

        with tempfile.TemporaryDirectory(prefix="attune-cal-") as cache:
            return calibrate_loss_band(recipe_text, reference, cache_dir=Path(cache))

    def _dispatch_once(
        self, state: cm.Campaign, kind: str, n: int, attempt: int, limits: dict[str, float], order: str = ""
    ) -> None:
        key = run_key(state.pending[0])
        if not self.redispatch and self.stored.dispatched == key:
            return
        pr: int | None
        if kind in ("baseline", "calibrate"):
            pr, sha = 0, self.gh._branch_head(self.gh.base_branch)  # noqa: SLF001
        else:
            ref = self.forge.find_step(state.id, n)
            if ref is None:
                raise GitHubForgeError(f"step {n} of {state.id} is not on GitHub")
            pr, sha = ref.number, ref.head_sha
            self.heads[n] = sha
        self.gh.dispatch(
            TRIAL_WORKFLOW,
            self.dispatch_ref,
            {
                "campaign": state.id,
                "issue": self.stored.issue,
                "pr": pr,
                "sha": sha,
                "kind": kind,
                "attempt": attempt,
                "recipe": state.recipe_path,
                "runner_labels": json.dumps(self.stored.runner_labels),
                "limits": json.dumps(limits),
                **({"order": order} if order else {}),
            },
        )
        self.stored = self.stored.model_copy(update={"dispatched": key})
        self.save(state)

    # -- after a merge: a merge made with GITHUB_TOKEN starts no push workflow, so ask for the leaderboard
    def after_merge(self, state: cm.Campaign, n: int) -> None:
        if any(r.outcome == "ok" and not r.simulated for r in state.step(n).runs):
            try:
                self.gh.dispatch(LEADERBOARD_WORKFLOW, self.gh.base_branch, {})
            except Exception as exc:  # noqa: BLE001 - the merge stands; the next push to results/ regenerates it
                print(f"attune: could not dispatch {LEADERBOARD_WORKFLOW}: {exc}", file=sys.stderr)


def github_executor(
    forge: GitHubForge,
    stored: Stored,
    *,
    dispatch_ref: str | None = None,
    redispatch: bool = False,
    policy: Any = None,
    lessons: list | None = None,
    space_fn: Any = None,
    gate_config: Any = None,
    gate_convergence: Any = None,
    calibrate: Any = None,
) -> tuple[Any, GitHubPorts]:
    """The one executor with GitHub's ports for the campaign stored on ``stored.issue`` (and those ports). Lessons:
    ATTUNE's packaged catalog with ``lessons/`` of the checkout the workflow runs in (the working directory)."""
    from bot.agent import get_policy
    from bot.agent.lessons import load_lessons
    from bot.agent.space import make_space
    from bot.campaign.gate_calls import config_gate, convergence_gate
    from bot.drive.executor import Executor

    ports = GitHubPorts(forge, stored, dispatch_ref=dispatch_ref, redispatch=redispatch, calibrate=calibrate)
    executor = Executor(
        forge=ports.forge,
        states=ports,
        records=ports,
        runs=ports,
        policy=policy or get_policy(stored.campaign.policy),
        lessons=load_lessons() if lessons is None else lessons,
        space_fn=space_fn or make_space,
        gate_config=gate_config or config_gate,
        gate_convergence=gate_convergence or convergence_gate,
        after_merge=ports.after_merge,
    )
    return executor, ports


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


def settled(handle: Any, attempts: int = 3) -> Any:
    """Run ``handle()`` (load, apply, execute, ``settle``) again from a fresh read when another workflow run wrote the
    state first; every action is idempotent, so a handled event is applied once to the state that wins."""
    for attempt in range(attempts):
        try:
            return handle()
        except StateConflict:
            if attempt == attempts - 1:
                raise
    return None
