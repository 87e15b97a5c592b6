"""A stateful, in-process fake of the GitHub REST endpoints the bot uses, held to GitHub's own contract.

``FakeGitHub`` patches ``requests`` through the ``responses`` library (PyGithub's transport), so a real
``github.Github`` client talks to it unchanged. It keeps one repository's state — commits and file trees, refs,
pull requests, issues, comments, labels, commit statuses, collaborator permissions, workflow dispatches — and
answers like github.com does, including its refusals (409 when a merge ``sha`` is not the head, 422 for an existing
ref, 405 for an unmergeable pull request).

Every request is validated against the operation in GitHub's OpenAPI description (``openapi_contract.Contract``)
before the fake acts on it: an invalid request is answered 422 *and* recorded in ``violations``, and the fixture
fails the test when any was recorded, even if the code under test swallowed the error. Every response the fake
builds is validated against the operation's response schema too, so the fake cannot drift from the contract
(a drifted response is answered 500 and recorded). Responses are built from the spec's own examples.
"""

from __future__ import annotations

import base64
import difflib
import hashlib
import itertools
import json
import re
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import responses
from openapi_contract import API_HOST, Contract, ContractViolation

WEB_HOST = "https://github.com"
DOCS = "https://docs.github.com/rest"
LARGE_FILE = 1024 * 1024  # the contents API returns no content above 1 MB
ANY_URL = re.compile(r"^https://api\.github\.com(:443)?/.*")


class HTTPError(Exception):
    """An error answer of the fake, shaped like GitHub's."""

    def __init__(self, status: int, message: str, errors: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.errors = errors

    def payload(self) -> dict[str, Any]:
        body: dict[str, Any] = {"message": self.message, "documentation_url": DOCS}
        if self.errors is not None:
            body["errors"] = self.errors
        elif self.status not in (409, 405):
            body["status"] = str(self.status)
        return body


def blob_sha(text: str) -> str:
    data = text.encode()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class Commit:
    sha: str
    tree: dict[str, str]
    parents: list[str]
    message: str
    author: str | None = None  # the GitHub login the commit is linked to (None: an e-mail GitHub knows no account of)
    verified: bool = False  # GitHub verified its signature (it signs the commits its API makes)


@dataclass
class Pull:
    number: int
    title: str
    body: str | None
    user: str
    head_ref: str
    head_repo: str  # full name of the repository the head branch lives in
    base_ref: str
    frozen_head_sha: str
    created_at: str
    state: str = "open"
    draft: bool = False
    merged_at: str | None = None
    closed_at: str | None = None
    merge_commit_sha: str | None = None
    blocked_reason: str | None = None  # e.g. a required status check: merge answers 405


@dataclass
class Issue:
    number: int
    title: str
    body: str | None
    user: str
    created_at: str
    state: str = "open"
    labels: list[str] = field(default_factory=list)
    is_pull: bool = False


@dataclass
class Comment:
    id: int
    issue: int
    body: str
    user: str
    created_at: str
    updated_at: str


@dataclass
class Status:
    id: int
    sha: str
    state: str
    context: str
    description: str | None
    target_url: str | None
    created_at: str


@dataclass
class Call:
    method: str
    path: str
    operation_id: str | None
    body: Any
    status: int = 0


class FakeGitHub:
    """One repository on a fake github.com; see the module docstring."""

    def __init__(
        self,
        contract: Contract,
        owner: str = "acme",
        name: str = "tuning",
        default_branch: str = "main",
        actor: str = "attune-bot[bot]",
    ) -> None:
        self.contract = contract
        self.owner, self.name = owner, name
        self.full_name = f"{owner}/{name}"
        self.default_branch = default_branch
        self.actor = actor
        self.commits: dict[str, Commit] = {}
        self.refs: dict[str, str] = {}  # "heads/main" -> sha
        self.blobs: dict[str, str] = {}  # blob sha -> text (Git Data API writes)
        self.trees: dict[str, dict[str, str]] = {}  # tree sha -> its files (every tree a commit named)
        self.pulls: dict[int, Pull] = {}
        self.issues: dict[int, Issue] = {}
        self.comments: dict[int, Comment] = {}
        self.statuses: list[Status] = []
        self.permissions: dict[str, str] = {owner: "admin", actor: "write"}
        self.workflows: set[str] = set()
        self.dispatches: list[dict[str, Any]] = []
        self.compares: list[str] = []  # the basehead of every compare call, in order
        # workflow run id -> its jobs' timings, as whoever runs the workflow records them (record_job)
        self.jobs: dict[int, list[dict[str, Any]]] = {}
        self.calls: list[Call] = []
        self.violations: list[str] = []
        self._hooks: dict[str, list[Callable[[FakeGitHub], None]]] = {}
        self._numbers = itertools.count(1)
        self._ids = itertools.count(1000)
        self._clock = itertools.count(0)
        self._mock: responses.RequestsMock | None = None
        self._commit({"README.md": "# tuning\n"}, [], "initial commit", branch=default_branch)

    # -- lifecycle ----------------------------------------------------------------------------------------

    def start(self) -> FakeGitHub:
        """Intercept every request to api.github.com (anything else fails: there is no network)."""
        self._mock = responses.RequestsMock(assert_all_requests_are_fired=False)
        self._mock.start()
        for method in ("GET", "POST", "PUT", "PATCH", "DELETE"):
            self._mock.add_callback(method, ANY_URL, callback=self._handle)
        return self

    def stop(self) -> None:
        if self._mock is not None:
            self._mock.stop()
            self._mock.reset()
            self._mock = None

    def assert_contract_kept(self) -> None:
        """Fail loudly when any request or response broke GitHub's contract."""
        if self.violations:
            raise ContractViolation("\n\n".join(self.violations))

    def after(self, operation_id: str, hook: Callable[[FakeGitHub], None]) -> None:
        """Run ``hook`` once, right after the next answered call of ``operation_id`` (to stage races)."""
        self._hooks.setdefault(operation_id, []).append(hook)

    def operations(self) -> list[str]:
        """The operation ids called so far, in order."""
        return [c.operation_id or "?" for c in self.calls]

    # -- seeding and acting as people ---------------------------------------------------------------------

    def seed(
        self,
        files: dict[str, str],
        message: str = "seed",
        branch: str | None = None,
        author: str | None = None,
        *,
        by_bot: bool = False,
    ) -> str:
        """Commit ``files`` on ``branch`` (default branch by default), as a person pushing would: unsigned, linked to
        ``author``'s account (a push may name any author e-mail, so any login; only its signature is GitHub's).
        ``by_bot``: as the bot's API write would have made it instead (linked to the bot's login, signed by GitHub)."""
        branch = branch or self.default_branch
        parent = self.refs[f"heads/{branch}"]
        tree = dict(self.commits[parent].tree) | files
        sha = self._commit(tree, [parent], message, branch=branch)
        self.commits[sha].author, self.commits[sha].verified = (self.actor, True) if by_bot else (author, False)
        return sha

    def create_branch(self, branch: str, from_branch: str | None = None) -> str:
        sha = self.refs[f"heads/{from_branch or self.default_branch}"]
        self.refs[f"heads/{branch}"] = sha
        return sha

    def add_issue(self, title: str, body: str, user: str = "alice", labels: list[str] | None = None) -> int:
        number = next(self._numbers)
        self.issues[number] = Issue(number, title, body, user, self._now(), labels=list(labels or []))
        return number

    def add_comment(self, issue: int, body: str, user: str = "alice") -> int:
        """A comment written by a person."""
        now = self._now()
        comment = Comment(next(self._ids), issue, body, user, now, now)
        self.comments[comment.id] = comment
        return comment.id

    def add_pull(
        self,
        head_ref: str,
        *,
        title: str = "a change",
        body: str = "",
        user: str = "alice",
        head_repo: str | None = None,
        head_sha: str | None = None,
    ) -> int:
        """A pull request opened by a person; ``head_repo`` other than this repository makes it a fork PR."""
        head_repo = head_repo or self.full_name
        if head_repo == self.full_name:
            head_sha = self.refs[f"heads/{head_ref}"]
        number = next(self._numbers)
        self.issues[number] = Issue(number, title, body, user, self._now(), is_pull=True)
        self.pulls[number] = Pull(
            number,
            title,
            body,
            user,
            head_ref,
            head_repo,
            self.default_branch,
            head_sha or "0" * 40,
            self._now(),
        )
        return number

    def record_job(
        self,
        run_id: int,
        name: str,
        *,
        started_at: str,
        completed_at: str | None = None,
        conclusion: str | None = None,
        workflow: str = "",
        head_sha: str | None = None,
    ) -> None:
        """A job of workflow run ``run_id`` started (``completed_at`` None) or finished; served by list-jobs."""
        jobs = self.jobs.setdefault(run_id, [])
        job = next((j for j in jobs if j["name"] == name), None)
        if job is None:
            job = {
                "name": name,
                "started_at": started_at,
                "workflow": workflow,
                "head_sha": head_sha or self.refs[f"heads/{self.default_branch}"],
            }
            jobs.append(job)
        job.update(completed_at=completed_at, conclusion=conclusion)

    def file(self, path: str, ref: str | None = None) -> str | None:
        """A file's text on a branch or commit, or None."""
        return self.commits[self._resolve(ref or self.default_branch)].tree.get(path)

    def head(self, branch: str) -> str:
        return self.refs[f"heads/{branch}"]

    def head_sha(self, pull: Pull) -> str:
        if pull.state == "open" and pull.head_repo == self.full_name and f"heads/{pull.head_ref}" in self.refs:
            return self.refs[f"heads/{pull.head_ref}"]
        return pull.frozen_head_sha

    # -- the HTTP side ------------------------------------------------------------------------------------

    def _handle(self, request: Any) -> tuple[int, dict[str, str], str]:
        url = urllib.parse.urlsplit(request.url)
        query = urllib.parse.parse_qs(url.query, keep_blank_values=True)
        raw = request.body
        if isinstance(raw, bytes):
            raw = raw.decode()
        try:
            body = json.loads(raw) if raw else None
        except json.JSONDecodeError:
            body = raw
        call = Call(request.method, url.path, None, body)
        self.calls.append(call)
        match = self.contract.match(request.method, url.path)
        if match is None:
            return self._fail(call, 404, f"no GitHub REST operation is {request.method} {url.path}")
        call.operation_id = match.operation_id
        content_type = request.headers.get("Content-Type", "") or ""
        try:
            self.contract.check_request(match, query, body, content_type.split(";")[0])
        except ContractViolation as exc:
            return self._fail(call, 422, str(exc))
        handler = getattr(self, "_op_" + re.sub(r"[^a-z0-9]", "_", match.operation_id.lower()), None)
        if handler is None:
            return self._fail(call, 501, f"the fake does not implement {match.operation_id}")
        if match.params.get("owner", "").lower() != self.owner.lower() or (
            match.params.get("repo", "").lower() != self.name.lower()
        ):
            status, payload, headers = 404, HTTPError(404, "Not Found").payload(), {}
        else:
            try:
                status, payload, headers = self._unpack(
                    handler(match.params, query, self.contract.normalise_body(match, body))
                )
            except HTTPError as err:
                status, payload, headers = err.status, err.payload(), {}
        try:
            self.contract.check_response(match, query, status, payload)
        except ContractViolation as exc:
            return self._fail(call, 500, f"the fake drifted from the contract: {exc}")
        call.status = status
        for hook in self._hooks.pop(match.operation_id, []):
            hook(self)
        text = "" if payload is None else json.dumps(payload)
        return status, {"Content-Type": "application/json; charset=utf-8", **headers}, text

    def _fail(self, call: Call, status: int, message: str) -> tuple[int, dict[str, str], str]:
        call.status = status
        self.violations.append(f"{call.method} {call.path}: {message}")
        payload = {"message": message, "documentation_url": DOCS, "errors": [{"code": "invalid"}]}
        return status, {"Content-Type": "application/json; charset=utf-8"}, json.dumps(payload)

    @staticmethod
    def _unpack(result: Any) -> tuple[int, Any, dict[str, str]]:
        if len(result) == 3:
            return result
        status, payload = result
        return status, payload, {}

    # -- git ----------------------------------------------------------------------------------------------

    def _now(self) -> str:
        tick = next(self._clock)
        return f"2026-01-01T{tick // 3600 % 24:02d}:{tick // 60 % 60:02d}:{tick % 60:02d}Z"

    def _commit(self, tree: dict[str, str], parents: list[str], message: str, branch: str | None = None) -> str:
        seed = json.dumps([sorted(tree.items()), parents, message, next(self._ids)])
        sha = hashlib.sha1(seed.encode()).hexdigest()
        self.commits[sha] = Commit(sha, dict(tree), list(parents), message)
        if branch is not None:
            self.refs[f"heads/{branch}"] = sha
        return sha

    def _resolve(self, ref: str) -> str:
        for candidate in (ref, f"heads/{ref}", ref.removeprefix("refs/")):
            if candidate in self.refs:
                return self.refs[candidate]
        if ref in self.commits:
            return ref
        raise HTTPError(404, f"No commit found for the ref {ref}")

    def _ancestors(self, sha: str) -> list[str]:
        seen: list[str] = []
        queue = [sha]
        while queue:
            current = queue.pop(0)
            if current in seen:
                continue
            seen.append(current)
            queue.extend(self.commits[current].parents)
        return seen

    def _merge_base(self, a: str, b: str) -> str:
        ours = set(self._ancestors(a))
        return next(s for s in self._ancestors(b) if s in ours)

    def _three_way(self, base_head: str, head: str) -> dict[str, str] | None:
        """The merged tree, or None on a conflict."""
        mb = self.commits[self._merge_base(base_head, head)].tree
        ours, theirs = self.commits[base_head].tree, self.commits[head].tree
        merged: dict[str, str] = {}
        for path in set(mb) | set(ours) | set(theirs):
            o, t, m = ours.get(path), theirs.get(path), mb.get(path)
            if t == m:
                value = o
            elif o in (m, t):
                value = t
            else:
                return None
            if value is not None:
                merged[path] = value
        return merged

    # -- object builders (from the spec's examples) -------------------------------------------------------

    def _api(self, rest: str = "") -> str:
        return f"{API_HOST}/repos/{self.full_name}{rest}"

    def _rewrite(self, obj: Any, full_name: str | None = None) -> Any:
        text = json.dumps(obj).replace("octocat/Hello-World", full_name or self.full_name)
        return json.loads(text)

    def _user(self, login: str) -> dict[str, Any]:
        user = self.contract.example("issue-comment")["user"]
        plain = login.removesuffix("[bot]")
        user.update(
            login=login,
            id=int(hashlib.sha1(login.encode()).hexdigest()[:8], 16),
            url=f"{API_HOST}/users/{urllib.parse.quote(login)}",
            html_url=f"{WEB_HOST}/{plain}",
            type="Bot" if login.endswith("[bot]") else "User",
            site_admin=False,
        )
        return user

    def _label(self, name: str) -> dict[str, Any]:
        label = self.contract.example("label-items")[0]
        label.update(
            id=int(hashlib.sha1(name.encode()).hexdigest()[:8], 16),
            name=name,
            url=self._api(f"/labels/{urllib.parse.quote(name)}"),
            description="",
            color="ededed",
            default=False,
        )
        return label

    def _repo_obj(self, template: dict[str, Any], full_name: str) -> dict[str, Any]:
        repo = self._rewrite(template, full_name)
        owner, name = full_name.split("/")
        repo.update(name=name, full_name=full_name, fork=full_name != self.full_name)
        repo["owner"] = self._user(owner)
        return repo

    def _pull_obj(self, pull: Pull, example: str) -> dict[str, Any]:
        template = self.contract.example(example)
        obj = self._rewrite(template[0] if isinstance(template, list) else template)
        number = pull.number
        head_sha = self.head_sha(pull)
        base_sha = self.refs.get(f"heads/{pull.base_ref}", head_sha)
        head_owner = pull.head_repo.split("/")[0]
        api = self._api(f"/pulls/{number}")
        obj.update(
            url=api,
            id=number,
            node_id=f"PR_{number}",
            html_url=f"{WEB_HOST}/{self.full_name}/pull/{number}",
            diff_url=f"{WEB_HOST}/{self.full_name}/pull/{number}.diff",
            patch_url=f"{WEB_HOST}/{self.full_name}/pull/{number}.patch",
            issue_url=self._api(f"/issues/{number}"),
            commits_url=f"{api}/commits",
            review_comments_url=f"{api}/comments",
            comments_url=self._api(f"/issues/{number}/comments"),
            statuses_url=self._api(f"/statuses/{head_sha}"),
            number=number,
            state=pull.state,
            locked=False,
            title=pull.title,
            body=pull.body,
            user=self._user(pull.user),
            labels=[self._label(n) for n in self.issues[number].labels],
            milestone=None,
            active_lock_reason=None,
            created_at=pull.created_at,
            updated_at=pull.created_at,
            closed_at=pull.closed_at,
            merged_at=pull.merged_at,
            merge_commit_sha=pull.merge_commit_sha,
            assignee=None,
            assignees=[],
            requested_reviewers=[],
            requested_teams=[],
            draft=pull.draft,
            auto_merge=None,
            author_association="MEMBER" if pull.user in self.permissions else "CONTRIBUTOR",
        )
        obj["head"] = {
            "label": f"{head_owner}:{pull.head_ref}",
            "ref": pull.head_ref,
            "sha": head_sha,
            "user": self._user(head_owner),
            "repo": self._repo_obj(obj["head"]["repo"], pull.head_repo),
        }
        obj["base"] = {
            "label": f"{self.owner}:{pull.base_ref}",
            "ref": pull.base_ref,
            "sha": base_sha,
            "user": self._user(self.owner),
            "repo": self._repo_obj(obj["base"]["repo"], self.full_name),
        }
        obj["_links"] = {
            "self": {"href": api},
            "html": {"href": obj["html_url"]},
            "issue": {"href": obj["issue_url"]},
            "comments": {"href": obj["comments_url"]},
            "review_comments": {"href": obj["review_comments_url"]},
            "review_comment": {"href": f"{self._api('/pulls/comments')}{{/number}}"},
            "commits": {"href": obj["commits_url"]},
            "statuses": {"href": obj["statuses_url"]},
        }
        if "merged" in obj:  # the full pull-request schema
            files = self._diff(pull)
            obj.update(
                merged=pull.merged_at is not None,
                mergeable=None if pull.state != "open" else self._mergeable(pull),
                rebaseable=None,
                mergeable_state="clean" if pull.state == "open" and self._mergeable(pull) else "unknown",
                merged_by=self._user(self.actor) if pull.merged_at else None,
                comments=sum(1 for c in self.comments.values() if c.issue == number),
                review_comments=0,
                maintainer_can_modify=False,
                commits=max(1, len(self._ancestors(head_sha)) - len(self._ancestors(base_sha)))
                if head_sha in self.commits
                else 1,
                additions=sum(f["additions"] for f in files),
                deletions=sum(f["deletions"] for f in files),
                changed_files=len(files),
            )
        return obj

    def _issue_obj(self, issue: Issue) -> dict[str, Any]:
        obj = self._rewrite(self.contract.example("issue"))
        n = issue.number
        kind = "pull" if issue.is_pull else "issues"
        obj.update(
            id=n,
            node_id=f"I_{n}",
            url=self._api(f"/issues/{n}"),
            repository_url=self._api(),
            labels_url=self._api(f"/issues/{n}/labels{{/name}}"),
            comments_url=self._api(f"/issues/{n}/comments"),
            events_url=self._api(f"/issues/{n}/events"),
            html_url=f"{WEB_HOST}/{self.full_name}/{kind}/{n}",
            number=n,
            state=issue.state,
            title=issue.title,
            body=issue.body,
            user=self._user(issue.user),
            labels=[self._label(name) for name in issue.labels],
            assignee=None,
            assignees=[],
            milestone=None,
            locked=False,
            comments=sum(1 for c in self.comments.values() if c.issue == n),
            created_at=issue.created_at,
            updated_at=issue.created_at,
            closed_at=None,
            closed_by=None,
            author_association="MEMBER" if issue.user in self.permissions else "NONE",
        )
        for key in ("pinned_comment", "state_reason", "active_lock_reason"):
            obj.pop(key, None)
        if issue.is_pull:
            pull = self.pulls[n]
            obj["pull_request"] = {
                "url": self._api(f"/pulls/{n}"),
                "html_url": f"{WEB_HOST}/{self.full_name}/pull/{n}",
                "diff_url": f"{WEB_HOST}/{self.full_name}/pull/{n}.diff",
                "patch_url": f"{WEB_HOST}/{self.full_name}/pull/{n}.patch",
                "merged_at": pull.merged_at,
            }
        else:
            obj.pop("pull_request", None)
        return obj

    def _comment_obj(self, comment: Comment) -> dict[str, Any]:
        obj = self._rewrite(self.contract.example("issue-comment"))
        obj.update(
            id=comment.id,
            node_id=f"IC_{comment.id}",
            url=self._api(f"/issues/comments/{comment.id}"),
            html_url=f"{WEB_HOST}/{self.full_name}/issues/{comment.issue}#issuecomment-{comment.id}",
            issue_url=self._api(f"/issues/{comment.issue}"),
            body=comment.body,
            user=self._user(comment.user),
            created_at=comment.created_at,
            updated_at=comment.updated_at,
            author_association="MEMBER" if comment.user in self.permissions else "NONE",
        )
        return obj

    def _ref_obj(self, name: str) -> dict[str, Any]:
        sha = self.refs[name]
        return {
            "ref": f"refs/{name}",
            "node_id": f"REF_{name}",
            "url": self._api(f"/git/refs/{name}"),
            "object": {"type": "commit", "sha": sha, "url": self._api(f"/git/commits/{sha}")},
        }

    def _content_obj(self, path: str, text: str, ref: str) -> dict[str, Any]:
        sha = blob_sha(text)
        raw = base64.b64encode(text.encode()).decode()
        large = len(text.encode()) > LARGE_FILE
        url = self._api(f"/contents/{urllib.parse.quote(path)}?ref={urllib.parse.quote(ref, safe='')}")
        html = f"{WEB_HOST}/{self.full_name}/blob/{ref}/{path}"
        git = self._api(f"/git/blobs/{sha}")
        return {
            "type": "file",
            "encoding": "none" if large else "base64",
            "size": len(text.encode()),
            "name": path.rsplit("/", 1)[-1],
            "path": path,
            "content": "" if large else "\n".join(raw[i : i + 60] for i in range(0, len(raw), 60)) + "\n",
            "sha": sha,
            "url": url,
            "git_url": git,
            "html_url": html,
            "download_url": f"https://raw.githubusercontent.com/{self.full_name}/{ref}/{path}",
            "_links": {"self": url, "git": git, "html": html},
        }

    def _file_commit_obj(self, path: str, text: str, commit: Commit, branch: str) -> dict[str, Any]:
        obj = self._rewrite(self.contract.example("file-commit-example-for-updating-a-file"))
        content = self._content_obj(path, text, branch)
        content.pop("encoding")
        content.pop("content")
        obj["content"] = content
        obj["commit"].update(
            sha=commit.sha,
            node_id=f"C_{commit.sha[:12]}",
            url=self._api(f"/git/commits/{commit.sha}"),
            html_url=f"{WEB_HOST}/{self.full_name}/commit/{commit.sha}",
            message=commit.message,
            parents=[
                {
                    "url": self._api(f"/git/commits/{p}"),
                    "html_url": f"{WEB_HOST}/{self.full_name}/commit/{p}",
                    "sha": p,
                }
                for p in commit.parents
            ],
        )
        return obj

    def _status_obj(self, status: Status) -> dict[str, Any]:
        obj = self._rewrite(self.contract.example("status"))
        obj.update(
            url=self._api(f"/statuses/{status.sha}"),
            id=status.id,
            node_id=f"S_{status.id}",
            state=status.state,
            description=status.description,
            target_url=status.target_url,
            context=status.context,
            created_at=status.created_at,
            updated_at=status.created_at,
            creator=self._user(self.actor),
        )
        return obj

    def _diff(self, pull: Pull) -> list[dict[str, Any]]:
        head = self.head_sha(pull)
        if head not in self.commits:
            return []
        base = self.refs.get(f"heads/{pull.base_ref}")
        old = self.commits[self._merge_base(base, head)].tree if base else {}
        return self._tree_diff(old, head)

    def _tree_diff(self, old: dict[str, str], head: str) -> list[dict[str, Any]]:
        """GitHub's changed-file entries from the tree ``old`` to commit ``head``'s tree."""
        new = self.commits[head].tree
        files = []
        for path in sorted(set(old) | set(new)):
            a, b = old.get(path), new.get(path)
            if a == b:
                continue
            patch = list(difflib.unified_diff((a or "").splitlines(), (b or "").splitlines(), lineterm="", n=3))[2:]
            additions = sum(1 for line in patch if line.startswith("+"))
            deletions = sum(1 for line in patch if line.startswith("-"))
            files.append(
                {
                    "sha": blob_sha(b or ""),
                    "filename": path,
                    "status": "added" if a is None else "removed" if b is None else "modified",
                    "additions": additions,
                    "deletions": deletions,
                    "changes": additions + deletions,
                    "blob_url": f"{WEB_HOST}/{self.full_name}/blob/{head}/{path}",
                    "raw_url": f"{WEB_HOST}/{self.full_name}/raw/{head}/{path}",
                    "contents_url": self._api(f"/contents/{path}?ref={head}"),
                    "patch": "\n".join(patch),
                }
            )
        return self._renames(files, old, new)

    @staticmethod
    def _renames(files: list[dict[str, Any]], old: dict[str, str], new: dict[str, str]) -> list[dict[str, Any]]:
        """A removed file whose exact content was added under another path is one ``renamed`` entry, named by its
        new path with the old one as ``previous_filename`` (as GitHub lists an exact rename)."""
        removed = {old[f["filename"]]: f["filename"] for f in files if f["status"] == "removed"}
        out, gone = [], set()
        for f in files:
            was = removed.get(new.get(f["filename"], "")) if f["status"] == "added" else None
            if was is not None and was not in gone:
                gone.add(was)
                f = {
                    **f,
                    "status": "renamed",
                    "previous_filename": was,
                    "additions": 0,
                    "deletions": 0,
                    "changes": 0,
                    "patch": "",
                }
            out.append(f)
        return [f for f in out if not (f["status"] == "removed" and f["filename"] in gone)]

    def _mergeable(self, pull: Pull) -> bool:
        head = self.head_sha(pull)
        base = self.refs.get(f"heads/{pull.base_ref}")
        if head not in self.commits or base is None:
            return False
        return self._three_way(base, head) is not None

    def _page(self, items: list[Any], query: dict[str, list[str]], path: str) -> tuple[int, Any, dict[str, str]]:
        per_page = int(query.get("per_page", ["30"])[0])
        page = int(query.get("page", ["1"])[0])
        chunk = items[(page - 1) * per_page : page * per_page]
        headers = {}
        if page * per_page < len(items):
            params = {k: v[0] for k, v in query.items()} | {"page": str(page + 1)}
            headers["Link"] = f'<{API_HOST}{path}?{urllib.parse.urlencode(params)}>; rel="next"'
        return 200, chunk, headers

    def _pull(self, params: dict[str, str]) -> Pull:
        pull = self.pulls.get(int(params["pull_number"]))
        if pull is None:
            raise HTTPError(404, "Not Found")
        return pull

    def _issue(self, params: dict[str, str]) -> Issue:
        issue = self.issues.get(int(params["issue_number"]))
        if issue is None:
            raise HTTPError(404, "Not Found")
        return issue

    # -- operations (named after GitHub's operationId) -----------------------------------------------------

    def _op_git_get_ref(self, params: dict[str, str], query: Any, body: Any) -> Any:
        name = params["ref"]
        if name not in self.refs:
            raise HTTPError(404, "Not Found")
        return 200, self._ref_obj(name)

    def _op_git_list_matching_refs(self, params: dict[str, str], query: Any, body: Any) -> Any:
        prefix = params["ref"]
        return 200, [self._ref_obj(n) for n in sorted(self.refs) if n.startswith(prefix)]

    def _op_git_create_ref(self, params: dict[str, str], query: Any, body: dict[str, Any]) -> Any:
        ref, sha = body["ref"], body["sha"]
        if not ref.startswith("refs/") or ref.count("/") < 2:
            raise HTTPError(422, f"{ref} is not a valid ref name.")
        if sha not in self.commits:
            raise HTTPError(422, "Object does not exist")
        name = ref.removeprefix("refs/")
        if name in self.refs:
            raise HTTPError(422, "Reference already exists")
        self.refs[name] = sha
        return 201, self._ref_obj(name)

    # -- the Git Data API: blobs, trees, commits, ref updates (how the bot commits on the head it expects) ----

    def _tree_sha(self, tree: dict[str, str]) -> str:
        """A tree's sha (the fake's own, stable for equal trees); the tree is kept so a commit can name it."""
        sha = hashlib.sha1(json.dumps(sorted(tree.items())).encode()).hexdigest()
        self.trees[sha] = dict(tree)
        return sha

    def _git_commit_obj(self, commit: Commit) -> dict[str, Any]:
        obj = self._rewrite(self.contract.example("git-commit"))
        tree = self._tree_sha(commit.tree)
        obj.update(
            sha=commit.sha,
            node_id=f"C_{commit.sha[:12]}",
            url=self._api(f"/git/commits/{commit.sha}"),
            html_url=f"{WEB_HOST}/{self.full_name}/commit/{commit.sha}",
            message=commit.message,
            tree={"sha": tree, "url": self._api(f"/git/trees/{tree}")},
            parents=[
                {"sha": p, "url": self._api(f"/git/commits/{p}"), "html_url": f"{WEB_HOST}/{self.full_name}/commit/{p}"}
                for p in commit.parents
            ],
            verification={
                "verified": commit.verified,
                "reason": "valid" if commit.verified else "unsigned",
                "signature": "-----BEGIN PGP SIGNATURE-----" if commit.verified else None,
                "payload": f"tree {tree}" if commit.verified else None,
                "verified_at": self._now() if commit.verified else None,
            },
        )
        return obj

    def _op_git_get_commit(self, params: dict[str, str], query: Any, body: Any) -> Any:
        commit = self.commits.get(params["commit_sha"])
        if commit is None:
            raise HTTPError(404, "Not Found")
        return 200, self._git_commit_obj(commit)

    def _op_git_create_blob(self, params: dict[str, str], query: Any, body: dict[str, Any]) -> Any:
        try:
            text = (
                base64.b64decode(body["content"], validate=True).decode()
                if body.get("encoding") == "base64"
                else body["content"]
            )
        except (ValueError, UnicodeDecodeError) as exc:  # the fake keeps text files only
            raise HTTPError(
                422, "content is not valid Base64 of UTF-8 text", [{"code": "invalid", "field": "content"}]
            ) from exc
        sha = blob_sha(text)
        self.blobs[sha] = text
        return 201, {"url": self._api(f"/git/blobs/{sha}"), "sha": sha}

    def _op_git_create_tree(self, params: dict[str, str], query: Any, body: dict[str, Any]) -> Any:
        base = body.get("base_tree")
        if base is not None and base not in self.trees:
            raise HTTPError(422, f"base_tree {base} does not exist", [{"code": "invalid", "field": "base_tree"}])
        tree = dict(self.trees[base]) if base else {}
        for entry in body["tree"]:
            if entry.get("type", "blob") != "blob" or entry.get("mode", "100644") != "100644":
                raise HTTPError(422, "the fake keeps regular files only", [{"code": "invalid", "field": "tree"}])
            if "content" in entry:
                tree[entry["path"]] = entry["content"]
            elif entry.get("sha") is None:
                tree.pop(entry["path"], None)
            elif entry["sha"] in self.blobs:
                tree[entry["path"]] = self.blobs[entry["sha"]]
            else:
                raise HTTPError(
                    422, f"tree.sha {entry['sha']} is not a valid blob", [{"code": "invalid", "field": "tree"}]
                )
        sha = self._tree_sha(tree)
        obj = self._rewrite(self.contract.example("git-tree"))
        obj.update(
            sha=sha,
            url=self._api(f"/git/trees/{sha}"),
            truncated=False,
            tree=[
                {
                    "path": path,
                    "mode": "100644",
                    "type": "blob",
                    "size": len(text.encode()),
                    "sha": blob_sha(text),
                    "url": self._api(f"/git/blobs/{blob_sha(text)}"),
                }
                for path, text in sorted(tree.items())
            ],
        )
        return 201, obj

    def _op_git_create_commit(self, params: dict[str, str], query: Any, body: dict[str, Any]) -> Any:
        if body["tree"] not in self.trees:
            raise HTTPError(422, f"Tree SHA does not exist: {body['tree']}")
        parents = list(body.get("parents") or [])
        if any(p not in self.commits for p in parents):
            raise HTTPError(422, "Parent SHA does not exist or is not a commit object")
        sha = self._commit(self.trees[body["tree"]], parents, body["message"])
        # GitHub signs the commits its API makes for a token unless the caller names an author or a signature
        by_token = not any(k in body for k in ("author", "committer", "signature"))
        self.commits[sha].author, self.commits[sha].verified = self.actor, by_token
        return 201, self._git_commit_obj(self.commits[sha])

    def _op_git_update_ref(self, params: dict[str, str], query: Any, body: dict[str, Any]) -> Any:
        name, sha = params["ref"], body["sha"]
        if name not in self.refs:
            raise HTTPError(422, "Reference does not exist")
        if sha not in self.commits:
            raise HTTPError(422, "Object does not exist")
        if not body.get("force") and self.refs[name] not in self._ancestors(sha):
            raise HTTPError(422, "Update is not a fast forward")
        self.refs[name] = sha
        return 200, self._ref_obj(name)

    def _op_repos_get_content(self, params: dict[str, str], query: dict[str, list[str]], body: Any) -> Any:
        ref = query.get("ref", [self.default_branch])[0]
        text = self.commits[self._resolve(ref)].tree.get(params["path"])
        if text is None:
            raise HTTPError(404, "Not Found")
        return 200, self._content_obj(params["path"], text, ref)

    def _op_git_get_blob(self, params: dict[str, str], query: Any, body: Any) -> Any:
        for commit in self.commits.values():
            for text in commit.tree.values():
                if blob_sha(text) == params["file_sha"]:
                    raw = base64.b64encode(text.encode()).decode()
                    return 200, {
                        "content": raw,
                        "encoding": "base64",
                        "url": self._api(f"/git/blobs/{params['file_sha']}"),
                        "sha": params["file_sha"],
                        "size": len(text.encode()),
                        "node_id": f"B_{params['file_sha'][:12]}",
                    }
        raise HTTPError(404, "Not Found")

    def _op_repos_create_or_update_file_contents(self, params: dict[str, str], query: Any, body: dict[str, Any]) -> Any:
        path = params["path"]
        branch = body.get("branch") or self.default_branch
        if f"heads/{branch}" not in self.refs:
            raise HTTPError(404, f"Branch {branch} not found")
        parent = self.refs[f"heads/{branch}"]
        tree = dict(self.commits[parent].tree)
        try:
            text = base64.b64decode(body["content"], validate=True).decode()
        except (ValueError, UnicodeDecodeError) as exc:
            raise HTTPError(422, "content is not valid Base64", [{"code": "invalid", "field": "content"}]) from exc
        existing = tree.get(path)
        if existing is not None:
            if "sha" not in body:
                raise HTTPError(422, 'Invalid request.\n\n"sha" wasn\'t supplied.', [{"code": "missing_field"}])
            if body["sha"] != blob_sha(existing):
                raise HTTPError(409, f"{path} does not match {body['sha']}")
        tree[path] = text
        sha = self._commit(tree, [parent], body["message"], branch=branch)
        self.commits[sha].author, self.commits[sha].verified = (
            self.actor,
            True,
        )  # made and signed by GitHub for the token
        return (200 if existing is not None else 201), self._file_commit_obj(path, text, self.commits[sha], branch)

    def _op_pulls_list(self, params: dict[str, str], query: dict[str, list[str]], body: Any) -> Any:
        state = query.get("state", ["open"])[0]
        head = query.get("head", [None])[0]
        base = query.get("base", [None])[0]
        found = []
        for pull in sorted(self.pulls.values(), key=lambda p: -p.number):
            if state != "all" and pull.state != state:
                continue
            if head is not None:
                owner, _, branch = head.partition(":")
                if (pull.head_repo.split("/")[0].lower(), pull.head_ref) != (owner.lower(), branch):
                    continue
            if base is not None and pull.base_ref != base:
                continue
            found.append(self._pull_obj(pull, "pull-request-simple-items"))
        return self._page(found, query, f"/repos/{self.full_name}/pulls")

    def _op_pulls_create(self, params: dict[str, str], query: Any, body: dict[str, Any]) -> Any:
        head_ref = body["head"].split(":", 1)[-1]
        base_ref = body["base"]
        if f"heads/{base_ref}" not in self.refs:
            raise HTTPError(422, "Validation Failed", [{"resource": "PullRequest", "field": "base", "code": "invalid"}])
        if f"heads/{head_ref}" not in self.refs:
            raise HTTPError(422, "Validation Failed", [{"resource": "PullRequest", "field": "head", "code": "invalid"}])
        for pull in self.pulls.values():
            if pull.state == "open" and pull.head_ref == head_ref and pull.head_repo == self.full_name:
                message = f"A pull request already exists for {self.owner}:{head_ref}."
                raise HTTPError(
                    422,
                    "Validation Failed",
                    [{"resource": "PullRequest", "code": "custom", "message": message}],
                )
        head_sha = self.refs[f"heads/{head_ref}"]
        if head_sha in self._ancestors(self.refs[f"heads/{base_ref}"]):
            message = f"No commits between {base_ref} and {head_ref}"
            raise HTTPError(
                422, "Validation Failed", [{"resource": "PullRequest", "code": "custom", "message": message}]
            )
        number = next(self._numbers)
        self.issues[number] = Issue(
            number, body.get("title", ""), body.get("body"), self.actor, self._now(), is_pull=True
        )
        pull = Pull(
            number,
            body.get("title", ""),
            body.get("body"),
            self.actor,
            head_ref,
            self.full_name,
            base_ref,
            head_sha,
            self._now(),
            draft=bool(body.get("draft", False)),
        )
        self.pulls[number] = pull
        return 201, self._pull_obj(pull, "pull-request")

    def _op_pulls_get(self, params: dict[str, str], query: Any, body: Any) -> Any:
        return 200, self._pull_obj(self._pull(params), "pull-request")

    def _op_pulls_update(self, params: dict[str, str], query: Any, body: dict[str, Any]) -> Any:
        pull = self._pull(params)
        issue = self.issues[pull.number]
        if "title" in body:
            pull.title = issue.title = body["title"]
        if "body" in body:
            pull.body = issue.body = body["body"]
        if body.get("state") == "closed" and pull.state == "open":
            pull.frozen_head_sha = self.head_sha(pull)
            pull.state = issue.state = "closed"
            pull.closed_at = self._now()
        elif body.get("state") == "open" and pull.state == "closed" and pull.merged_at is None:
            pull.state = issue.state = "open"
            pull.closed_at = None
        return 200, self._pull_obj(pull, "pull-request")

    def _op_pulls_merge(self, params: dict[str, str], query: Any, body: dict[str, Any] | None) -> Any:
        pull = self._pull(params)
        body = body or {}
        head = self.head_sha(pull)
        if pull.state != "open":
            raise HTTPError(405, "Pull Request is not mergeable")
        if body.get("sha") is not None and body["sha"] != head:
            raise HTTPError(409, "Head branch was modified. Review and try the merge again.")
        if pull.blocked_reason:
            raise HTTPError(405, pull.blocked_reason)
        base_name = f"heads/{pull.base_ref}"
        base_head = self.refs[base_name]
        tree = self._three_way(base_head, head)
        if tree is None:
            raise HTTPError(405, "Pull Request is not mergeable")
        method = body.get("merge_method", "merge")
        message = body.get("commit_title") or f"Merge pull request #{pull.number}"
        if body.get("commit_message"):
            message += "\n\n" + body["commit_message"]
        parents = [base_head, head] if method == "merge" else [base_head]
        sha = self._commit(tree, parents, message)
        self.commits[sha].author, self.commits[sha].verified = self.actor, True
        self.refs[base_name] = sha
        pull.frozen_head_sha = head
        pull.state = self.issues[pull.number].state = "closed"
        pull.merged_at = pull.closed_at = self._now()
        pull.merge_commit_sha = sha
        return 200, {"sha": sha, "merged": True, "message": "Pull Request successfully merged"}

    def _op_pulls_list_files(self, params: dict[str, str], query: dict[str, list[str]], body: Any) -> Any:
        pull = self._pull(params)
        return self._page(self._diff(pull), query, f"/repos/{self.full_name}/pulls/{pull.number}/files")

    def _op_repos_get_commit(self, params: dict[str, str], query: Any, body: Any) -> Any:
        """``GET /commits/{ref}``: the commit, the account it is linked to (``author``) and GitHub's verdict on its
        signature (``commit.verification``). A full sha it does not have is GitHub's 422, any other unknown ref 404."""
        if re.fullmatch(r"[0-9a-f]{40}", params["ref"]) and params["ref"] not in self.commits:
            raise HTTPError(422, f"No commit found for SHA: {params['ref']}")
        sha = self._resolve(params["ref"])
        commit = self.commits[sha]
        out = self._rewrite(self.contract.example("commit"))
        out.update(
            sha=sha,
            url=self._api(f"/commits/{sha}"),
            html_url=f"{WEB_HOST}/{self.full_name}/commit/{sha}",
            comments_url=self._api(f"/commits/{sha}/comments"),
            parents=[
                {"sha": p, "url": self._api(f"/commits/{p}"), "html_url": f"{WEB_HOST}/{self.full_name}/commit/{p}"}
                for p in commit.parents
            ],
            # no linked account: GitHub sends null, which the description's nullable oneOf does not admit here;
            # its empty-object branch stands for it (the bot reads both as "no login")
            author=self._user(commit.author) if commit.author else {},
            committer=self._user("web-flow") if commit.verified else self._user(commit.author) if commit.author else {},
        )
        out["commit"].update(
            message=commit.message,
            url=self._api(f"/git/commits/{sha}"),
            verification={
                "verified": commit.verified,
                "reason": "valid" if commit.verified else "unsigned",
                "signature": "-----BEGIN PGP SIGNATURE-----" if commit.verified else None,
                "payload": f"tree {sha}" if commit.verified else None,
                "verified_at": self._now() if commit.verified else None,
            },
        )
        out["files"] = self._tree_diff(self.commits[commit.parents[0]].tree if commit.parents else {}, sha)[:300]
        out["stats"] = {
            "total": sum(f["changes"] for f in out["files"]),
            "additions": sum(f["additions"] for f in out["files"]),
            "deletions": sum(f["deletions"] for f in out["files"]),
        }
        return 200, out

    def _op_repos_compare_commits(self, params: dict[str, str], query: Any, body: Any) -> Any:
        """``GET /compare/{base}...{head}``: the commits and files on ``head`` since its merge base with ``base``
        (three dots; two dots are not served). GitHub lists at most 300 files."""
        if "basehead" in params:  # the description has both /compare/{basehead} and /compare/{base}...{head}
            base_ref, dots, head_ref = params["basehead"].partition("...")
            if not dots:
                raise HTTPError(404, "Not Found")
        else:
            base_ref, head_ref = params["base"], params["head"]
        basehead = f"{base_ref}...{head_ref}"
        base, head = self._resolve(base_ref), self._resolve(head_ref)
        point = self._merge_base(base, head)
        ahead = [c for c in self._ancestors(head) if c not in set(self._ancestors(base))]
        behind = [c for c in self._ancestors(base) if c not in set(self._ancestors(head))]
        out = self._rewrite(self.contract.example("commit-comparison"))
        template = out["base_commit"]

        def commit(sha: str) -> dict[str, Any]:
            obj = json.loads(json.dumps(template))
            obj.update(
                sha=sha,
                url=self._api(f"/commits/{sha}"),
                html_url=f"{WEB_HOST}/{self.full_name}/commit/{sha}",
                parents=[{"sha": p, "url": self._api(f"/commits/{p}")} for p in self.commits[sha].parents],
            )
            obj["commit"]["message"] = self.commits[sha].message
            c = self.commits[sha]  # who it is linked to and GitHub's verdict on its signature, as get-commit says
            obj["author"] = self._user(c.author) if c.author else {}
            obj["committer"] = self._user("web-flow") if c.verified else self._user(c.author) if c.author else {}
            obj["commit"]["verification"] = {
                "verified": c.verified,
                "reason": "valid" if c.verified else "unsigned",
                "signature": None,
                "payload": None,
                "verified_at": None,
            }
            return obj

        url = self._api(f"/compare/{basehead}")
        out.update(
            url=url,
            html_url=f"{WEB_HOST}/{self.full_name}/compare/{basehead}",
            permalink_url=f"{WEB_HOST}/{self.full_name}/compare/{base}...{head}",
            diff_url=f"{WEB_HOST}/{self.full_name}/compare/{basehead}.diff",
            patch_url=f"{WEB_HOST}/{self.full_name}/compare/{basehead}.patch",
            base_commit=commit(base),
            merge_base_commit=commit(point),
            status="identical" if base == head else "ahead" if not behind else "behind" if not ahead else "diverged",
            ahead_by=len(ahead),
            behind_by=len(behind),
            total_commits=len(ahead),
            commits=[commit(c) for c in reversed(ahead)],
            files=self._tree_diff(self.commits[point].tree, head)[:300],
        )
        self.compares.append(basehead)
        return 200, out

    def _op_issues_list_for_repo(self, params: dict[str, str], query: dict[str, list[str]], body: Any) -> Any:
        state = query.get("state", ["open"])[0]
        wanted = [x for x in query.get("labels", [""])[0].split(",") if x]
        found = [
            self._issue_obj(issue)
            for issue in sorted(self.issues.values(), key=lambda i: -i.number)
            if (state == "all" or issue.state == state) and all(x in issue.labels for x in wanted)
        ]
        return self._page(found, query, f"/repos/{self.full_name}/issues")

    def _op_issues_add_labels(self, params: dict[str, str], query: Any, body: dict[str, Any]) -> Any:
        issue = self._issue(params)
        for label in body["labels"]:
            name = label if isinstance(label, str) else label["name"]
            if name not in issue.labels:
                issue.labels.append(name)
        return 200, [self._label(n) for n in issue.labels]

    def _op_issues_list_comments(self, params: dict[str, str], query: dict[str, list[str]], body: Any) -> Any:
        issue = self._issue(params)
        found = [
            self._comment_obj(c) for c in sorted(self.comments.values(), key=lambda c: c.id) if c.issue == issue.number
        ]
        return self._page(found, query, f"/repos/{self.full_name}/issues/{issue.number}/comments")

    def _op_issues_create_comment(self, params: dict[str, str], query: Any, body: dict[str, Any]) -> Any:
        issue = self._issue(params)
        self._check_body_size(body["body"])
        now = self._now()
        comment = Comment(next(self._ids), issue.number, body["body"], self.actor, now, now)
        self.comments[comment.id] = comment
        return 201, self._comment_obj(comment)

    def _op_issues_update_comment(self, params: dict[str, str], query: Any, body: dict[str, Any]) -> Any:
        comment = self.comments.get(int(params["comment_id"]))
        if comment is None:
            raise HTTPError(422, "Validation Failed", [{"resource": "IssueComment", "code": "missing"}])
        self._check_body_size(body["body"])
        comment.body = body["body"]
        comment.updated_at = self._now()
        return 200, self._comment_obj(comment)

    @staticmethod
    def _check_body_size(text: str) -> None:
        if len(text) > 65_536:
            message = "Body is too long (maximum is 65536 characters)"
            raise HTTPError(
                422, "Validation Failed", [{"resource": "IssueComment", "code": "custom", "message": message}]
            )

    def _op_repos_create_commit_status(self, params: dict[str, str], query: Any, body: dict[str, Any]) -> Any:
        sha = params["sha"]
        if sha not in self.commits:
            raise HTTPError(422, f"No commit found for SHA: {sha}")
        status = Status(
            next(self._ids),
            sha,
            body["state"],
            body.get("context", "default"),
            body.get("description"),
            body.get("target_url"),
            self._now(),
        )
        self.statuses.append(status)
        return 201, self._status_obj(status)

    def _op_repos_get_collaborator_permission_level(self, params: dict[str, str], query: Any, body: Any) -> Any:
        login = params["username"]
        if login not in self.permissions:
            raise HTTPError(404, "Not Found")
        role = self.permissions[login]
        permission = {"maintain": "write", "triage": "read"}.get(role, role)
        user = self._user(login) | {"role_name": role}
        return 200, {"permission": permission, "role_name": role, "user": user}

    def _op_actions_list_jobs_for_workflow_run(
        self, params: dict[str, str], query: dict[str, list[str]], body: Any
    ) -> Any:
        run_id = int(params["run_id"])  # a run nobody recorded has no jobs (the description documents no 404)
        template = self.contract.example("job-paginated")["jobs"][0]
        found = []
        # jobs still running are left out: GitHub answers them with conclusion null, which the description's
        # nullable enum does not admit under the validator (an OpenAPI 3.0 quirk); the bot reads finished jobs only
        for i, job in enumerate(j for j in self.jobs.get(run_id, []) if j.get("completed_at")):
            obj = self._rewrite(template)
            job_id = run_id * 1000 + i + 1
            obj.update(
                id=job_id,
                node_id=f"J_{job_id}",
                run_id=run_id,
                run_url=self._api(f"/actions/runs/{run_id}"),
                url=self._api(f"/actions/jobs/{job_id}"),
                html_url=f"{WEB_HOST}/{self.full_name}/actions/runs/{run_id}/job/{job_id}",
                check_run_url=self._api(f"/check-runs/{job_id}"),
                head_sha=job["head_sha"],
                head_branch=self.default_branch,
                workflow_name=job["workflow"],
                name=job["name"],
                status="completed" if job["completed_at"] else "in_progress",
                conclusion=job["conclusion"] if job["completed_at"] else None,
                created_at=job["started_at"],
                started_at=job["started_at"],
                completed_at=job["completed_at"],
                steps=[],
                labels=[],
            )
            found.append(obj)
        status, chunk, headers = self._page(found, query, f"/repos/{self.full_name}/actions/runs/{run_id}/jobs")
        return status, {"total_count": len(found), "jobs": chunk}, headers

    def _op_actions_create_workflow_dispatch(self, params: dict[str, str], query: Any, body: dict[str, Any]) -> Any:
        workflow = params["workflow_id"]
        if workflow not in self.workflows:
            raise HTTPError(404, "Not Found")
        if f"heads/{body['ref']}" not in self.refs and f"tags/{body['ref']}" not in self.refs:
            raise HTTPError(422, f"No ref found for: {body['ref']}")
        self.dispatches.append({"workflow": workflow, "ref": body["ref"], "inputs": dict(body.get("inputs") or {})})
        return 204, None
