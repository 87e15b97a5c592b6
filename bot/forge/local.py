"""The local forge: campaign steps as real git branches in a local repository (the embedded default).

A step is a branch ``attune/<campaign>/<n>-<lever>`` whose first commit changes exactly one recipe
line; run records and the report are committed on it; a kept step is merged (``--no-ff``) into the
base branch with its record under ``results/``; a rejected step keeps its branch, records and
report, and its closing reason is recorded in a note file on the branch. Branch commits are made
with git plumbing (a private index), so the working tree is only touched by merges.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

from bot.core.recipe import set_lever_text
from bot.forge.base import StatusState, StepRef, StepRequest, step_branch


class ForgeError(Exception):
    pass


class LocalForge:
    def __init__(self, repo: str | Path, *, base_branch: str | None = None) -> None:
        self.repo = Path(repo).resolve()
        self.base = base_branch or self._git("rev-parse", "--abbrev-ref", "HEAD").strip()
        self.meta_dir = self.repo / ".attune" / "forge"

    # ------------------------------------------------------------ git helpers
    def _git(self, *args: str, env: dict[str, str] | None = None, input: str | None = None) -> str:
        # git runs in a session of its own: a Ctrl-C at the terminal reaches the whole foreground group, and a git killed
        # half-way was a ForgeError traceback; this process defers the signal to the end of the transition
        # (bot.drive.interrupt) and git finishes what it was doing
        proc = subprocess.run(
            ["git", *args],
            cwd=self.repo,
            capture_output=True,
            text=True,
            env={**os.environ, **(env or {})},
            input=input,
            start_new_session=True,
        )
        if proc.returncode != 0:
            raise ForgeError(f"git {' '.join(args)}: {proc.stderr.strip() or proc.stdout.strip()}")
        return proc.stdout

    def _rev(self, ref: str) -> str | None:
        proc = subprocess.run(
            ["git", "rev-parse", "--verify", "-q", ref + "^{commit}"],
            cwd=self.repo,
            capture_output=True,
            text=True,
            start_new_session=True,
        )
        return proc.stdout.strip() or None

    def _commit_files(self, parent: str, files: dict[str, str], message: str) -> str:
        """A commit on top of ``parent`` that writes ``files``; the working tree is untouched."""
        with tempfile.TemporaryDirectory() as tmp:
            env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
            self._git("read-tree", parent, env=env)
            for path, text in files.items():
                blob = self._git("hash-object", "-w", "--stdin", input=text).strip()
                self._git("update-index", "--add", "--cacheinfo", f"100644,{blob},{path}", env=env)
            tree = self._git("write-tree", env=env).strip()
        return self._git("commit-tree", tree, "-p", parent, "-m", message).strip()

    def _blob_text(self, ref: str, path: str) -> str | None:
        proc = subprocess.run(
            ["git", "show", f"{ref}:{path}"], cwd=self.repo, capture_output=True, text=True, start_new_session=True
        )
        return proc.stdout if proc.returncode == 0 else None

    def _meta(self, branch: str) -> Path:
        return self.meta_dir / (branch.replace("/", "__") + ".json")

    def _save(self, ref: StepRef) -> StepRef:
        self.meta_dir.mkdir(parents=True, exist_ok=True)
        self._meta(ref.branch).write_text(ref.model_dump_json())
        return ref

    # ------------------------------------------------------------ protocol
    def find_step(self, campaign: str, n: int) -> StepRef | None:
        prefix = f"refs/heads/attune/{campaign}/{n}-"
        for line in self._git("for-each-ref", "--format=%(refname)", prefix[:-1].rsplit("/", 1)[0]).splitlines():
            if line.startswith(prefix):
                branch = line.removeprefix("refs/heads/")
                meta = self._meta(branch)
                if meta.exists():
                    return StepRef.model_validate_json(meta.read_text())
                return StepRef(campaign=campaign, n=n, branch=branch, head_sha=self._rev(branch) or "")
        return None

    def open_step(self, req: StepRequest, *, base_ref: str | None = None) -> StepRef:
        existing = self.find_step(req.campaign, req.n)
        if existing is not None:
            return existing
        branch = step_branch(req.campaign, req.n, req.lever)
        parent = self._rev(base_ref or self.base)
        if parent is None:
            raise ForgeError(f"no such base ref {base_ref or self.base!r}")
        text = self._git("show", f"{parent}:{req.recipe_path}")
        new_text = set_lever_text(text, req.lever, req.value, source=req.recipe_path)
        sha = self._commit_files(parent, {req.recipe_path: new_text}, f"{req.title}\n\n{req.body}"[:4000])
        self._git("update-ref", f"refs/heads/{branch}", sha, "")
        return self._save(StepRef(campaign=req.campaign, n=req.n, branch=branch, head_sha=sha))

    def add_files(self, step: StepRef, files: dict[str, str], message: str) -> StepRef:
        parent = self._rev(step.branch) or step.head_sha
        if all(self._blob_text(parent, path) == text for path, text in files.items()):
            return self._save(
                step.model_copy(update={"head_sha": parent})
            )  # already there (a resumed driver): no empty commit
        sha = self._commit_files(parent, files, message)
        self._git("update-ref", f"refs/heads/{step.branch}", sha)
        return self._save(step.model_copy(update={"head_sha": sha}))

    def upsert_comment(self, target: int | StepRef, marker: str, body: str) -> None:
        """Locally a 'comment' is a file under .attune/comments, replaced in place."""
        name = f"{target.branch.replace('/', '__')}" if isinstance(target, StepRef) else f"issue-{target}"
        path = self.repo / ".attune" / "comments" / f"{name}--{marker}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body)

    def set_status(self, step: StepRef, state: StatusState, description: str) -> None:
        status = self.meta_dir / "status.json"
        data = json.loads(status.read_text()) if status.exists() else {}
        data[step.head_sha] = {"context": "attune/gate", "state": state, "description": description}
        self.meta_dir.mkdir(parents=True, exist_ok=True)
        status.write_text(json.dumps(data, indent=1))

    def status_of(self, sha: str) -> dict[str, str] | None:
        status = self.meta_dir / "status.json"
        return json.loads(status.read_text()).get(sha) if status.exists() else None

    def merge(self, step: StepRef, message: str) -> StepRef:
        head = self._rev(step.branch)
        if head != step.head_sha:
            raise ForgeError(
                f"{step.branch} moved ({head} != measured {step.head_sha}); refusing to merge an unmeasured head"
            )
        if self._git("rev-parse", "--abbrev-ref", "HEAD").strip() != self.base:
            self._git("checkout", "-q", self.base)
        self._git("merge", "--no-ff", "-q", "-m", message, step.branch)
        return self._save(step.model_copy(update={"state": "merged"}))

    def close(self, step: StepRef, reason: str) -> StepRef:
        closed = step.model_copy(update={"state": "closed"})
        return self._save(closed)

    def read_file(self, path: str, ref: str | None = None) -> str:
        return self._git("show", f"{ref or self.base}:{path}")

    def commit_on_base(self, files: dict[str, str], message: str) -> str:
        """Commit files on the base branch (campaign summary, baseline records, leaderboard)."""
        for path, text in files.items():
            target = self.repo / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        self._git("add", "--", *files)
        if not self._git("diff", "--cached", "--name-only", "--", *files).strip():
            return self._rev("HEAD") or ""
        self._git("commit", "-q", "-m", message, "--", *files)  # only these paths: what a user staged stays staged
        return self._rev("HEAD") or ""
