"""GitHubForge: the Forge protocol on GitHub's REST API, through PyGithub.

A campaign step is a pull request from the branch ``attune/<campaign>/<n>-<lever>`` of this repository. Its body
carries the hidden marker ``<!-- attune:step:<campaign>/<n> -->`` so a resumed driver finds it again instead of
opening a second one. Every write is guarded:

- ``open_step`` edits the recipe *before* touching GitHub (a bad lever value changes nothing) and refuses any edit
  whose diff is not exactly one line;
- ``merge`` merges only the measured head sha (``PUT …/pulls/{n}/merge`` with ``sha``; GitHub answers 409 when the
  head moved), and only a pull request from a bot branch of this repository;
- ``check_trial`` (a step pull request) and ``check_default_run`` (a baseline or calibration run on the default
  branch) are what a workflow asks before a self-hosted runner executes anything.

PyGithub runs lazily here (``Github(lazy=True)``): objects are fetched only when an attribute is read, so each
operation sends the few requests listed in its docstring and nothing else.
"""

from __future__ import annotations

import base64
import difflib
import os
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from github import Auth, Github, GithubException, UnknownObjectException
from github.GithubRetry import GithubRetry
from pydantic import BaseModel
from urllib3.util import Retry

from bot.forge import markers
from bot.forge.base import StatusState, StepRef, StepRequest, step_branch

GATE_CONTEXT = "attune/gate"
BOT_BRANCH_PREFIX = "attune/"
MERGE_METHODS = ("merge", "squash", "rebase")
STATUS_STATES = ("pending", "success", "failure", "error")
WRITE_PERMISSIONS = frozenset({"admin", "write"})  # ``maintain`` is reported as ``write`` by this endpoint

_REPO_NAME = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
_LOGIN = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})(?:\[bot\])?$")
_WORKFLOW_FILE = re.compile(r"^[A-Za-z0-9_.-]+\.ya?ml$")
SHA_PATTERN = re.compile(r"^[0-9a-f]{40}\Z")  # a full commit sha as GitHub writes it (no trailing newline either)
_SHA = SHA_PATTERN
# Bot-written data a step branch may carry besides recipes/ and results/: the reports, closing notes and run records
# of the step it is stacked on (``campaigns/<campaign>/step-<n>/…``). Markdown and JSON only: nothing a runner executes.
DATA_PATHS = ("campaigns/",)
DATA_SUFFIXES = (".md", ".json")
ACTIONS_BOT_LOGIN = "github-actions[bot]"  # who GITHUB_TOKEN writes as

RecipeEditor = Callable[..., str]


class GitHubForgeError(RuntimeError):
    """A forge operation that could not be done; the message says what and why."""


class MergeRefused(GitHubForgeError):
    """GitHub (or the forge's own guard) refused to merge; nothing was merged."""


class Labels(BaseModel):
    """Label names the bot sets (labels mark state for people; they are never trusted as authorisation)."""

    bot: str = "attune"
    step: str = "attune:step"
    rejected: str = "attune:rejected"
    campaign: str = "attune:campaign"


COMPARE_FILE_LIMIT = 300  # GET /compare lists at most 300 files: a list that long may be cut, so it is refused


class TrialCheck(BaseModel):
    """Whether a self-hosted runner may execute the head of a step pull request, and why not."""

    ok: bool
    pr: int
    sha: str
    reason: str = ""
    branch: str = ""
    recipe: str = ""  # the one recipe file the step changes


class _File(BaseModel):
    text: str
    blob_sha: str


def _default_editor(text: str, lever: str, value: str, *, source: str) -> str:
    # Imported on use: bot.core.recipe belongs to the recipe layer and this module must load without it.
    from bot.core.recipe import set_lever_text

    return set_lever_text(text, lever, value, source=source)


def _diff_size(old: str, new: str) -> tuple[int, int]:
    """(removed, added) lines between two texts; a one-line edit is (1, 1), an added line (0, 1)."""
    removed = added = 0
    for line in difflib.ndiff(old.splitlines(keepends=True), new.splitlines(keepends=True)):
        if line.startswith("- "):
            removed += 1
        elif line.startswith("+ "):
            added += 1
    return removed, added


def _message(exc: GithubException) -> str:
    data = exc.data if isinstance(exc.data, Mapping) else {}
    return str(data.get("message") or exc.message or exc)


def _is_data(name: str) -> bool:
    """Bot-written data (reports, closing notes, run records) a step branch may carry: never code."""
    return name.startswith(DATA_PATHS) and name.endswith(DATA_SUFFIXES)


def _require_repo_path(path: str) -> str:
    parts = path.split("/")
    if not path or path.startswith("/") or "\\" in path or any(p in ("", ".", "..") for p in parts):
        raise GitHubForgeError(f"file path {path!r}: expected a relative path inside the repository")
    return path


class GitHubForge:
    """The Forge protocol for one GitHub repository (see ``bot.forge.base.Forge``)."""

    def __init__(
        self,
        repo_full_name: str,
        token: str,
        *,
        base_branch: str = "main",
        base_url: str = "https://api.github.com",
        labels: Labels | None = None,
        campaign_issue: int | None = None,
        merge_method: str = "merge",
        bot_login: str | None = None,
        run_url: str | None = None,
        seconds_between_requests: float | None = 0.25,
        seconds_between_writes: float | None = 1.0,
        retry: int | Retry | None = GithubRetry(),  # noqa: B008 - PyGithub's own default, immutable
        per_page: int = 100,
        timeout: int = 30,
        trial_paths: Iterable[str] = ("recipes/", "results/"),
        edit_recipe: RecipeEditor | None = None,
    ) -> None:
        if not _REPO_NAME.match(repo_full_name):
            raise ValueError(f"repository {repo_full_name!r}: expected 'owner/name'")
        if merge_method not in MERGE_METHODS:
            raise ValueError(f"merge_method {merge_method!r}: expected one of {', '.join(MERGE_METHODS)}")
        if not token:
            raise ValueError("token: empty; pass a GitHub App installation token or GITHUB_TOKEN")
        self.full_name = repo_full_name
        self.owner = repo_full_name.split("/")[0]
        self.base_branch = base_branch
        self.labels = labels or Labels()
        self.campaign_issue = campaign_issue
        self.merge_method = merge_method
        self.bot_login = bot_login
        self.run_url = run_url
        self.trial_paths = tuple(trial_paths)
        self._edit = edit_recipe or _default_editor
        self._gh = Github(
            auth=Auth.Token(token),
            base_url=base_url,
            per_page=per_page,
            timeout=timeout,
            retry=retry,
            seconds_between_requests=seconds_between_requests,
            seconds_between_writes=seconds_between_writes,
            lazy=True,
        )
        self._repo = self._gh.get_repo(repo_full_name)
        self._comments: dict[tuple[int, str], tuple[int, str]] = {}  # (issue, marker) -> (comment id, body sent)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **kwargs: Any) -> GitHubForge:
        """A forge for the repository of the running workflow (``GITHUB_REPOSITORY``, ``GITHUB_API_URL``).

        The token is ``ATTUNE_GITHUB_TOKEN`` (a GitHub App token) or else ``GITHUB_TOKEN``; the run's URL becomes
        the status link. ``ATTUNE_GITHUB_PACING=0`` drops PyGithub's pauses between calls (for a server without
        GitHub's secondary rate limits, e.g. a test fake; never needed against api.github.com). The bot's own login (whose marker comments it trusts) is ``ATTUNE_BOT_LOGIN`` (the App's
        ``<slug>[bot]``), else, inside GitHub Actions with ``GITHUB_TOKEN``, ``github-actions[bot]``.
        """
        env = os.environ if env is None else env
        repo = env.get("GITHUB_REPOSITORY", "")
        token = env.get("ATTUNE_GITHUB_TOKEN") or env.get("GITHUB_TOKEN", "")
        if not repo or not token:
            raise GitHubForgeError("GITHUB_REPOSITORY and ATTUNE_GITHUB_TOKEN or GITHUB_TOKEN must be set")
        run_url = None
        if env.get("GITHUB_SERVER_URL") and env.get("GITHUB_RUN_ID"):
            run_url = f"{env['GITHUB_SERVER_URL']}/{repo}/actions/runs/{env['GITHUB_RUN_ID']}"
        kwargs.setdefault("base_url", env.get("GITHUB_API_URL", "https://api.github.com"))
        kwargs.setdefault("run_url", run_url)
        if env.get("ATTUNE_GITHUB_PACING") == "0":  # no pause between calls (GitHub's own API wants the pacing)
            kwargs.setdefault("seconds_between_requests", None)
            kwargs.setdefault("seconds_between_writes", None)
        if env.get("ATTUNE_BOT_LOGIN"):
            kwargs.setdefault("bot_login", env["ATTUNE_BOT_LOGIN"])
        elif env.get("GITHUB_ACTIONS") == "true" and not env.get("ATTUNE_GITHUB_TOKEN"):
            kwargs.setdefault("bot_login", ACTIONS_BOT_LOGIN)
        return cls(repo, token, **kwargs)

    # -- finding and opening steps ------------------------------------------------------------------------

    def find_step(self, campaign: str, n: int) -> StepRef | None:
        """The step ``n`` of ``campaign`` in any state, or None.

        Calls ``GET /git/matching-refs/heads/attune/<campaign>/<n>-`` and ``GET /pulls?state=all&head=…`` for each
        branch; when the branch is gone (deleted after merge), ``GET /issues?labels=attune:step&state=all`` and
        ``GET /pulls/{n}``. A pull request counts only if its head is a branch of this repository with that prefix
        and its body carries the step marker.
        """
        prefix = f"{BOT_BRANCH_PREFIX}{campaign}/{n}-"
        tag = markers.step_marker(campaign, n)
        for ref in self._repo.get_git_matching_refs(f"heads/{prefix}"):
            branch = ref.ref.removeprefix("refs/heads/")
            for pr in self._repo.get_pulls(state="all", head=f"{self.owner}:{branch}"):
                if self._is_step_pr(pr, prefix, tag):
                    return self._step_ref(pr, campaign, n)
        for issue in self._repo.get_issues(state="all", labels=[self.labels.step]):
            if issue.pull_request is None or tag not in (issue.body or ""):
                continue
            pr = self._repo.get_pull(issue.number)
            if self._is_step_pr(pr, prefix, tag):
                return self._step_ref(pr, campaign, n)
        return None

    def open_step(self, req: StepRequest, base_ref: str | None = None) -> StepRef:
        """Branch from the base head, commit the one-line recipe edit, open the PR and label it.

        ``base_ref`` stacks the step on another step (an OOM retry built on a failed step's layout): the branch
        starts from that step branch's head, so it carries the parent's one-line change (and its report), and adds
        its own one-line commit; the pull request still targets the default branch. Only a bot branch of the same
        campaign can be a parent.

        Idempotent: an existing step is returned as it is; a branch left by a crash is reused when it holds exactly
        this edit. Calls ``GET /git/ref/heads/<base>``, ``GET /contents/<recipe>?ref=<sha>``,
        the Git Data calls of :meth:`add_files`, ``POST /git/refs``, ``POST /pulls``, ``POST /issues/{n}/labels`` (after
        ``find_step``'s look-ups).
        """
        existing = self.find_step(req.campaign, req.n)
        if existing is not None:
            return existing
        path = _require_repo_path(req.recipe_path)
        parent = base_ref or self.base_branch
        if base_ref is not None and not base_ref.startswith(f"{BOT_BRANCH_PREFIX}{req.campaign}/"):
            raise GitHubForgeError(
                f"base_ref {base_ref!r}: a step can only be stacked on a step branch of campaign {req.campaign}"
            )
        base_sha = self._branch_head(parent)
        if base_sha is None:
            what = "parent step branch" if base_ref else "base branch"
            raise GitHubForgeError(f"{what} {parent!r} not found in {self.full_name}")
        current = self._get_file(path, base_sha)
        new_text = self._edit(current.text, req.lever, req.value, source=path)
        removed, added = _diff_size(current.text, new_text)
        if (removed, added) not in ((1, 1), (0, 1)):  # one line changed, or one lever line added
            raise GitHubForgeError(
                f"{path}: setting {req.lever} to {req.value!r} removes {removed} and adds {added} lines; "
                "a step changes exactly one line"
            )
        branch = step_branch(req.campaign, req.n, req.lever)
        head_sha = self._commit_edit(branch, base_sha, path, current, new_text, req)
        pr = self._open_pull(branch, req)
        self._repo.get_issue(pr.number).add_to_labels(self.labels.bot, self.labels.step)
        return StepRef(
            campaign=req.campaign,
            n=req.n,
            branch=branch,
            head_sha=head_sha,
            number=pr.number,
            url=pr.html_url,
        )

    def add_files(self, step: StepRef, files: dict[str, str], message: str) -> StepRef:
        """Commit ``files`` on the step branch in one commit whose parent is ``step.head_sha`` (the head the bot
        measured or made), through the Git Data API, and move the branch to it only as a fast-forward.

        Refuses when the branch head is not ``step.head_sha`` (someone else pushed), and GitHub refuses the ref
        update (``force=false``) when someone pushes inside the window: the returned head is therefore always the
        bot's own commit on the expected head, never one on a head it did not expect. Unchanged files add nothing.
        Calls ``GET /git/ref/heads/<branch>``, per file ``GET /contents/<path>?ref=<sha>``, then ``GET
        /git/commits/{sha}``, per changed file ``POST /git/blobs``, ``POST /git/trees``, ``POST /git/commits`` and
        ``PATCH /git/refs/heads/<branch>``.
        """
        head = self._branch_head(step.branch)
        if head != step.head_sha:
            raise GitHubForgeError(
                f"branch {step.branch} is at {head or 'nothing'}, not at {step.head_sha}; not adding files"
            )
        made = self._write_commit(step.head_sha, files, message)
        if made is None:
            return step
        self._move_branch(step.branch, made, step.head_sha)
        return step.model_copy(update={"head_sha": made})

    def _write_commit(self, parent: str, files: Mapping[str, str], message: str) -> str | None:
        """A commit of ``files`` on top of ``parent`` (blobs, tree, commit; on no branch yet): its sha, or None when
        every file already has that text at ``parent``. GitHub signs it for the token: it is the bot's."""
        from github.InputGitTreeElement import InputGitTreeElement

        changed: dict[str, str] = {}
        for path, text in files.items():
            _require_repo_path(path)
            try:
                if self._get_file(path, parent).text == text:
                    continue
            except UnknownObjectException:
                pass
            changed[path] = text
        if not changed:
            return None
        base = self._repo.get_git_commit(self._require_sha(parent))
        elements = [
            InputGitTreeElement(
                path,
                "100644",
                "blob",
                sha=self._repo.create_git_blob(base64.b64encode(text.encode()).decode(), "base64").sha,
            )
            for path, text in changed.items()
        ]
        tree = self._repo.create_git_tree(elements, base_tree=base.tree)
        return self._repo.create_git_commit(message, tree, [base]).sha

    def _move_branch(self, branch: str, sha: str, expected: str) -> None:
        """Move ``branch`` to ``sha`` as a fast-forward only (``PATCH /git/refs/heads/<branch>``, ``force=false``):
        GitHub answers 422 when the branch is no longer an ancestor of ``sha`` (someone pushed after ``expected``)."""
        try:
            self._repo._requester.requestJsonAndCheck(  # noqa: SLF001 - PyGithub's transport: the one PATCH
                "PATCH", f"{self._repo.url}/git/refs/heads/{branch}", input={"sha": sha, "force": False}
            )
        except GithubException as exc:
            if exc.status in (409, 422):
                raise GitHubForgeError(
                    f"branch {branch} moved away from {expected} while the bot committed on it "
                    f"({exc.status}: {_message(exc)}); not committing on a head it did not expect"
                ) from exc
            raise

    # -- comments, statuses, dashboard --------------------------------------------------------------------

    def upsert_comment(self, target: int | StepRef, marker: str, body: str) -> None:
        """Create, or edit in place, the one comment that starts with ``<!-- attune:<marker> -->``.

        The body is capped at 65,536 characters with a truncation note; an unchanged body is not re-sent. Calls
        ``GET /issues/{n}/comments`` and then ``PATCH /issues/comments/{id}`` or ``POST /issues/{n}/comments``; a
        comment this forge found or made is edited again without listing (``PATCH`` only; listed again if it is
        gone). Idempotent.
        """
        number = self._number(target)
        tag = markers.marker(marker)
        rendered = markers.with_marker(marker, body)
        known = self._comments.get((number, marker))
        if known is not None:
            comment_id, sent = known
            if sent == rendered:
                return
            try:
                self._repo._requester.requestJsonAndCheck(  # noqa: SLF001 - PyGithub's own transport, no extra GET
                    "PATCH", f"{self._repo.url}/issues/comments/{comment_id}", input={"body": rendered}
                )
            except UnknownObjectException:
                self._comments.pop((number, marker), None)
            else:
                self._comments[(number, marker)] = (comment_id, rendered)
                return
        issue = self._repo.get_issue(number)
        for comment in issue.get_comments():
            if (comment.body or "").lstrip().startswith(tag) and self._is_ours(comment):
                if comment.body != rendered:
                    comment.edit(rendered)
                self._comments[(number, marker)] = (comment.id, rendered)
                return
        made = issue.create_comment(rendered)
        self._comments[(number, marker)] = (made.id, rendered)

    def update_dashboard(self, issue: int, body: str) -> None:
        """Keep the campaign dashboard (steps, status, gain, links) in one marker comment of the campaign issue.

        A comment, not the issue body: the body is the requester's form, re-read and re-validated on every
        transition, so the bot never rewrites it.
        """
        self.upsert_comment(issue, "dashboard", body)

    def set_status(self, step: StepRef, state: StatusState, description: str, target_url: str | None = None) -> None:
        """Set commit status ``attune/gate`` on ``step.head_sha`` (``POST /statuses/{sha}``).

        The link is ``target_url``, else the workflow run, else the pull request.
        """
        if state not in STATUS_STATES:
            raise ValueError(f"status state {state!r}: expected one of {', '.join(STATUS_STATES)}")
        sha = self._require_sha(step.head_sha)
        payload = {
            "state": state,
            "context": GATE_CONTEXT,
            "description": markers.one_line(description, markers.STATUS_DESCRIPTION_LIMIT),
        }
        link = target_url or self.run_url or step.url
        if link:
            payload["target_url"] = link
        # PyGithub's Commit.create_status needs a completed Commit (one more GET); the endpoint needs only the sha.
        self._gh.requester.requestJsonAndCheck("POST", f"{self._repo.url}/statuses/{sha}", input=payload)

    # -- merging and closing ------------------------------------------------------------------------------

    def merge(self, step: StepRef, message: str) -> StepRef:
        """Merge the step's pull request at exactly ``step.head_sha``; raise ``MergeRefused`` otherwise.

        Calls ``GET /pulls/{n}`` (bot branch? open? head still the measured sha?), ``GET /compare/<base>...<sha>``
        (every commit the head adds to the base branch is the bot's own: :meth:`foreign_commits`) and
        ``PUT /pulls/{n}/merge`` with ``sha``; GitHub's 409 (head moved meanwhile) and 405 (not mergeable) become
        ``MergeRefused`` with GitHub's reason. An already merged step at that sha is returned as merged.
        """
        number = self._require_number(step)
        sha = self._require_sha(step.head_sha)
        pr = self._repo.get_pull(number)
        if not self._is_bot_pr(pr):
            raise MergeRefused(f"PR #{number} is not a bot branch of {self.full_name}; not merging it")
        if pr.merged:
            if pr.head.sha == sha:
                return step.model_copy(update={"state": "merged"})
            raise MergeRefused(f"PR #{number} was merged at {pr.head.sha}, not at the measured {sha}")
        if pr.state != "open":
            raise MergeRefused(f"PR #{number} is {pr.state}; not merging it")
        if pr.head.sha != sha:
            raise MergeRefused(
                f"PR #{number} head is {pr.head.sha}, not the measured {sha}; not merging an unmeasured commit"
            )
        try:
            foreign = self.foreign_commits(self.base_branch, sha, require_descent=False)
        except GitHubForgeError as exc:
            raise MergeRefused(f"PR #{number} not merged: {exc}") from exc
        if foreign:
            raise MergeRefused(
                f"PR #{number} not merged: {sha[:12]} carries commits that are not the bot's own "
                f"since {self.base_branch}: {'; '.join(foreign[:5])}"
            )
        try:
            result = pr.merge(
                commit_message=message,
                commit_title=markers.one_line(f"{pr.title} (#{number})", markers.TITLE_LIMIT),
                merge_method=self.merge_method,
                sha=sha,
            )
        except GithubException as exc:
            if exc.status == 409:
                raise MergeRefused(
                    f"PR #{number} not merged: its head moved away from the measured {sha} ({_message(exc)})"
                ) from exc
            if exc.status in (403, 405, 422):
                raise MergeRefused(f"PR #{number} not merged: GitHub refused ({exc.status}: {_message(exc)})") from exc
            raise
        if not result.merged:
            raise MergeRefused(f"PR #{number} not merged: {result.message}")
        return step.model_copy(update={"state": "merged"})

    def close(self, step: StepRef, reason: str) -> StepRef:
        """Close the step without merging: a ``closed`` marker comment with the reason, state closed, label
        ``attune:rejected``. The branch stays (it is the record of what was tried).

        Calls ``GET /pulls/{n}``, the comment calls of ``upsert_comment``, ``PATCH /pulls/{n}`` and
        ``POST /issues/{n}/labels``.
        """
        number = self._require_number(step)
        pr = self._repo.get_pull(number)
        if pr.merged:
            raise GitHubForgeError(f"PR #{number} is already merged; it cannot be closed as rejected")
        self.upsert_comment(step, "closed", reason)
        if pr.state == "open":
            pr.edit(state="closed")
        self._repo.get_issue(number).add_to_labels(self.labels.rejected)
        return step.model_copy(update={"state": "closed"})

    # -- bot data pull requests (no step, no recipe: leaderboard.md) ---------------------------------------

    def open_data_pr(self, branch: str, files: dict[str, str], title: str, body: str) -> StepRef:
        """Branch ``branch`` (under ``attune/``) from the base head, commit ``files`` on it and open a pull request
        to the base branch: how the bot lands its own data without pushing to the base branch (a protected one
        then needs no bypass actor). The answer's ``head_sha`` is the bot's last commit; ``campaign`` is empty.

        Calls ``GET /git/ref/heads/<base>``, the Git Data calls of :meth:`add_files` (the commit is made first), then
        ``POST /git/refs`` at that commit and ``POST /pulls``.
        """
        if not branch.startswith(BOT_BRANCH_PREFIX) or not re.fullmatch(r"[A-Za-z0-9._/-]+", branch) or ".." in branch:
            raise GitHubForgeError(f"branch {branch!r}: expected a name under {BOT_BRANCH_PREFIX} of [A-Za-z0-9._/-]")
        base_sha = self._branch_head(self.base_branch)
        if base_sha is None:
            raise GitHubForgeError(f"base branch {self.base_branch!r} not found in {self.full_name}")
        made = self._write_commit(base_sha, files, title)
        if made is None:
            raise GitHubForgeError(
                f"{', '.join(files) or 'no file'}: already so on {self.base_branch}; nothing to open"
            )
        try:  # the branch is born holding the bot's commit: there is no window to push into
            self._repo.create_git_ref(f"refs/heads/{branch}", made)
        except GithubException as exc:
            if exc.status == 422:  # never build on a branch someone else may have filled
                raise GitHubForgeError(f"branch {branch} exists already; not reusing it") from exc
            raise
        ref = StepRef(campaign="", n=0, branch=branch, head_sha=made)
        pr = self._repo.create_pull(
            base=self.base_branch,
            head=branch,
            title=markers.one_line(title, markers.TITLE_LIMIT),
            body=markers.cap(body, markers.GITHUB_BODY_LIMIT),
            draft=False,
        )
        self._repo.get_issue(pr.number).add_to_labels(self.labels.bot)
        return ref.model_copy(update={"number": pr.number, "url": pr.html_url})

    def find_data_pr(self, branch: str) -> StepRef | None:
        """The bot pull request from ``branch`` in any state, or None: a rerun of :meth:`open_data_pr` on the same
        branch finds what an earlier run opened there instead of failing on the branch. ``GET /pulls?state=all&head=
        <owner>:<branch>``; read-only. A pull request counts only if its head is that branch of this repository."""
        for pr in self._repo.get_pulls(state="all", head=f"{self.owner}:{branch}"):
            if self._is_bot_pr(pr) and pr.head.ref == branch:
                return self._step_ref(pr, "", 0)
        return None

    # -- reading, permissions, dispatch, trust checks -----------------------------------------------------

    def base_head(self) -> str:
        """The base branch's head sha (``GET /git/ref/heads/<base>``)."""
        sha = self._branch_head(self.base_branch)
        if sha is None:
            raise GitHubForgeError(f"base branch {self.base_branch!r} not found in {self.full_name}")
        return sha

    def commit_exists(self, sha: str) -> bool:
        """Whether ``sha`` (40 hex digits) is a commit of this repository: ``GET /commits/{sha}``; read-only. GitHub
        answers 422 for a sha it does not have (404 for a name that is no ref); any other failure is raised."""
        try:
            self._repo.get_commit(self._require_sha(sha)).raw_data  # noqa: B018 - the one GET (PyGithub is lazy)
        except GithubException as exc:
            if exc.status in (404, 422):
                return False
            raise
        return True

    def read_file(self, path: str, ref: str | None = None) -> str:
        """A file's text on ``ref`` (default: the base branch). ``GET /contents/<path>``; files over 1 MB come
        through ``GET /git/blobs/{sha}``."""
        try:
            return self._get_file(_require_repo_path(path), ref or self.base_branch).text
        except UnknownObjectException as exc:
            raise GitHubForgeError(f"{path}: not found on {ref or self.base_branch}") from exc

    def permission(self, user: str) -> str:
        """``admin``, ``write``, ``read`` or ``none`` (``GET /collaborators/{user}/permission``).

        The only source the bot trusts for who may steer a campaign: not ``author_association``, not labels.
        """
        if not _LOGIN.match(user):
            return "none"
        try:
            return self._repo.get_collaborator_permission(user)
        except UnknownObjectException:
            return "none"

    def can_write(self, user: str) -> bool:
        """Whether ``user`` has write or admin permission on this repository."""
        return self.permission(user) in WRITE_PERMISSIONS

    def dispatch(self, workflow_file: str, ref: str, inputs: Mapping[str, object]) -> None:
        """Start ``workflow_file`` on ``ref`` (``POST /actions/workflows/{file}/dispatches``); inputs become strings."""
        if not _WORKFLOW_FILE.match(workflow_file):
            raise ValueError(f"workflow file {workflow_file!r}: expected a file name like 'trial.yml'")
        if len(inputs) > 25:
            raise ValueError(f"workflow_dispatch takes at most 25 inputs, got {len(inputs)}")
        values = {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in inputs.items()}
        self._repo.get_workflow(workflow_file).create_dispatch(ref, inputs=values, throw=True)

    def is_bot_branch(self, pr_number: int) -> bool:
        """Whether PR ``pr_number`` comes from a branch ``attune/…`` of this repository (not a fork)."""
        return self._is_bot_pr(self._repo.get_pull(pr_number))

    def check_trial(self, pr_number: int, sha: str) -> TrialCheck:
        """May a self-hosted runner execute ``sha`` for PR ``pr_number``?

        Yes only if the PR is open, comes from a bot branch of this repository, its head is exactly ``sha``, it
        changes files only under ``trial_paths`` (recipes and results: no code) or bot data (``campaigns/…`` Markdown
        and JSON, which a stacked step carries from its parent) and exactly one recipe file, which the answer
        names. ``GET /pulls/{n}``, then the files ``base...sha`` changes in one ``GET /compare/{base}...{sha}`` (the
        exact sha that will run, never the PR's file list, which follows whatever the head is when it is read).
        """

        def no(reason: str, branch: str = "") -> TrialCheck:
            return TrialCheck(ok=False, pr=pr_number, sha=sha, reason=reason, branch=branch)

        if not _SHA.match(sha):
            return no(f"sha {sha!r}: expected 40 hexadecimal characters")
        try:
            pr = self._repo.get_pull(pr_number)
            branch = pr.head.ref
        except UnknownObjectException:
            return no(f"PR #{pr_number} does not exist in {self.full_name}")
        if not self._is_bot_pr(pr):
            return no(f"PR #{pr_number} is not from an attune/ branch of {self.full_name}", branch)
        if pr.state != "open":
            return no(f"PR #{pr_number} is {pr.state}", branch)
        if pr.head.sha != sha:
            return no(f"PR #{pr_number} head is {pr.head.sha}, not {sha}", branch)
        comparison = self._repo.compare(self.base_branch, sha)  # the default branch: what the runner trusts
        files = comparison.files
        if len(files) >= COMPARE_FILE_LIMIT:
            return no(f"PR #{pr_number} changes {len(files)} or more files; a step changes one recipe", branch)
        changed = [f.filename for f in files]
        outside = [name for name in changed if not name.startswith(self.trial_paths) and not _is_data(name)]
        if outside:
            return no(f"PR #{pr_number} changes files outside {', '.join(self.trial_paths)}: {outside[:5]}", branch)
        recipes = [name for name in changed if name.startswith("recipes/") and name.endswith(".yaml")]
        if len(recipes) != 1:
            return no(f"PR #{pr_number} changes {len(recipes)} recipe files; a step changes exactly one", branch)
        return TrialCheck(ok=True, pr=pr_number, sha=sha, branch=branch, recipe=recipes[0])

    def check_default_run(self, sha: str, recipe: str) -> TrialCheck:
        """May a self-hosted runner execute ``recipe`` at ``sha`` for a run without a step PR (a baseline run, a
        calibration)? Yes only if ``sha`` is the default branch's head (its code is what the default branch holds)
        and ``recipe`` is a ``.yaml`` file under ``recipes/`` at that sha. ``GET /git/ref/heads/<base>`` and
        ``GET /contents/<recipe>?ref=<sha>``.
        """

        def no(reason: str) -> TrialCheck:
            return TrialCheck(ok=False, pr=0, sha=sha, reason=reason, branch=self.base_branch)

        if not _SHA.match(sha):
            return no(f"sha {sha!r}: expected 40 hexadecimal characters")
        parts = recipe.split("/")
        if (
            not re.fullmatch(r"[A-Za-z0-9_./-]+", recipe)
            or parts[0] != "recipes"
            or len(parts) < 2
            or not recipe.endswith(".yaml")
            or any(p in ("", ".", "..") for p in parts)
        ):
            return no(f"recipe {recipe[:80]!r}: expected a .yaml file under recipes/")
        head = self._branch_head(self.base_branch)
        if head != sha:
            return no(f"sha {sha} is not the head of {self.base_branch} ({head or 'missing'})")
        try:
            self._get_file(recipe, sha)
        except (UnknownObjectException, GitHubForgeError):
            return no(f"{recipe} is not a file at {sha}")
        return TrialCheck(ok=True, pr=0, sha=sha, branch=self.base_branch, recipe=recipe)

    def job_wall_seconds(self, run_id: int, job_name: str) -> float | None:
        """Wall seconds of the job ``job_name`` of workflow run ``run_id`` (started to completed), from
        ``GET /actions/runs/{id}/jobs``; None when the job is not there or not finished. Read-only."""
        from datetime import datetime

        _, data = self._repo._requester.requestJsonAndCheck(  # noqa: SLF001 - PyGithub's transport: one call
            "GET", f"{self._repo.url}/actions/runs/{int(run_id)}/jobs", parameters={"per_page": 100}
        )
        for job in (data or {}).get("jobs", []):
            if job.get("name") == job_name and job.get("started_at") and job.get("completed_at"):
                started = datetime.fromisoformat(job["started_at"].replace("Z", "+00:00"))
                completed = datetime.fromisoformat(job["completed_at"].replace("Z", "+00:00"))
                return max(0.0, (completed - started).total_seconds())
        return None

    # -- helpers ------------------------------------------------------------------------------------------

    def commit_signer(self, sha: str) -> tuple[str | None, bool]:
        """The GitHub login commit ``sha`` is linked to (None: none) and whether GitHub verified its signature.
        ``GET /commits/{sha}``; read-only. A push may name any author e-mail, so the login alone proves nothing:
        the commits GitHub's API makes for a token are signed by GitHub, a pushed one naming the bot is not."""
        data = self._repo.get_commit(sha).raw_data  # one call (``.commit`` would fetch the git commit again)
        verified = bool(((data.get("commit") or {}).get("verification") or {}).get("verified"))
        return ((data.get("author") or {}).get("login")), verified

    def foreign_commits(self, since: str, head: str, *, require_descent: bool = True) -> list[str]:
        """The commits on ``head`` since ``since`` (a branch or sha) that are not the bot's own -- linked to the
        bot's login *and* signed by GitHub, as its API writes are -- one short line each; [] when all are its own.
        ``require_descent``: ``head`` must descend from ``since`` (a rewritten history is reported). More commits
        than GitHub lists in one compare (250) are reported too. One ``GET /compare/{since}...{head}``; read-only.
        Raises :class:`GitHubForgeError` when the bot's login is unknown (no commit can be told to be its own)."""
        if not self.bot_login:
            raise GitHubForgeError("the bot's own login is unknown (set ATTUNE_BOT_LOGIN): no commit can be trusted")
        _, data = self._repo._requester.requestJsonAndCheck(  # noqa: SLF001 - one call, the JSON as GitHub sent it
            "GET", f"{self._repo.url}/compare/{since}...{head}"
        )
        data = data or {}
        found: list[str] = []
        if require_descent and int(data.get("behind_by") or 0):
            found.append(f"{head[:12]} does not descend from {since[:40]}")
        commits = data.get("commits") or []
        if int(data.get("total_commits") or 0) > len(commits):
            found.append(f"{data.get('total_commits')} commits since {since[:40]}, more than one compare lists")
        for commit in commits:
            login = (commit.get("author") or {}).get("login")
            verified = bool(((commit.get("commit") or {}).get("verification") or {}).get("verified"))
            if login != self.bot_login or not verified:
                found.append(
                    f"{str(commit.get('sha'))[:12]} (linked to {login or 'no account'}, "
                    f"{'signed' if verified else 'unsigned'})"
                )
        return found

    def _branch_head(self, branch: str) -> str | None:
        try:
            return self._repo.get_git_ref(f"heads/{branch}").object.sha
        except UnknownObjectException:
            return None

    def _get_file(self, path: str, ref: str) -> _File:
        content = self._repo.get_contents(path, ref=ref)
        if isinstance(content, list):
            raise GitHubForgeError(f"{path} is a directory on {ref}, expected a file")
        if content.encoding == "base64" and (content.content or not content.size):
            data = content.decoded_content
        else:  # files over 1 MB come back with encoding "none" and no content
            data = base64.b64decode(self._repo.get_git_blob(content.sha).content)
        return _File(text=data.decode("utf-8"), blob_sha=content.sha)

    def _commit_edit(
        self, branch: str, base_sha: str, path: str, current: _File, new_text: str, req: StepRequest
    ) -> str:
        """The step's one-line commit on ``base_sha`` (Git Data API); the branch is created at it, or moved to it as
        a fast-forward from ``base_sha``, so the branch never holds a commit of anyone else's under the bot's."""
        message = f"attune: {req.campaign} step {req.n}: set {req.lever} = {req.value}"
        head = self._branch_head(branch)
        if head is None or head == base_sha:
            made = self._write_commit(base_sha, {path: new_text}, message)
            if made is None:
                raise GitHubForgeError(f"{path}: setting {req.lever} to {req.value!r} changes nothing")
            if head is None:
                try:
                    self._repo.create_git_ref(f"refs/heads/{branch}", made)
                    return made
                except GithubException as exc:  # 422: another driver created it meanwhile
                    head = self._branch_head(branch) if exc.status == 422 else None
                    if head is None:
                        raise
            if head == base_sha:
                self._move_branch(branch, made, base_sha)
                return made
        if self._get_file(path, head).text != new_text:  # left by a crash: reuse only if it is this very edit
            raise GitHubForgeError(f"branch {branch} already exists with a different {path}; not reusing it")
        return head

    def _open_pull(self, branch: str, req: StepRequest):
        tail = "\n\n" + (f"Campaign: #{self.campaign_issue}\n" if self.campaign_issue else "")
        tail += markers.step_marker(req.campaign, req.n)
        body = markers.cap(req.body, markers.GITHUB_BODY_LIMIT - len(tail)) + tail
        title = markers.one_line(req.title, markers.TITLE_LIMIT)
        try:
            return self._repo.create_pull(base=self.base_branch, head=branch, title=title, body=body, draft=False)
        except GithubException as exc:
            if exc.status != 422:
                raise
            for pr in self._repo.get_pulls(state="open", head=f"{self.owner}:{branch}"):
                return pr
            raise GitHubForgeError(f"could not open a PR from {branch}: {_message(exc)}") from exc

    def _is_bot_pr(self, pr: Any) -> bool:
        repo = pr.head.repo
        return (
            repo is not None
            and repo.full_name.lower() == self.full_name.lower()
            and pr.head.ref.startswith(BOT_BRANCH_PREFIX)
        )

    def _is_step_pr(self, pr: Any, prefix: str, tag: str) -> bool:
        return self._is_bot_pr(pr) and pr.head.ref.startswith(prefix) and tag in (pr.body or "")

    def _is_ours(self, comment: Any) -> bool:
        return self.bot_login is None or (comment.user is not None and comment.user.login == self.bot_login)

    @staticmethod
    def _step_ref(pr: Any, campaign: str, n: int) -> StepRef:
        state = "merged" if pr.merged_at is not None else pr.state
        return StepRef(
            campaign=campaign,
            n=n,
            branch=pr.head.ref,
            head_sha=pr.head.sha,
            number=pr.number,
            url=pr.html_url,
            state=state,
        )

    @staticmethod
    def _number(target: int | StepRef) -> int:
        if isinstance(target, StepRef):
            return GitHubForge._require_number(target)
        if isinstance(target, bool) or not isinstance(target, int) or target <= 0:
            raise ValueError(f"comment target {target!r}: expected an issue number or a step")
        return target

    @staticmethod
    def _require_number(step: StepRef) -> int:
        if step.number is None:
            raise GitHubForgeError(f"step {step.campaign}/{step.n} has no pull request number")
        return step.number

    @staticmethod
    def _require_sha(sha: str) -> str:
        if not _SHA.match(sha):
            raise GitHubForgeError(f"sha {sha!r}: expected 40 hexadecimal characters")
        return sha
