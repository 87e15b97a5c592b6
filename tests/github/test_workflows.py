"""The workflow files and the issue form, checked offline: zizmor (security), check-jsonschema (structure, job
timeouts) and static rules of this project (permissions, no injection, guarded self-hosted job, pinned actions)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
ISSUE_FORMS = sorted((ROOT / ".github" / "ISSUE_TEMPLATE").glob("*.yml"))
PINNED = re.compile(r"^[\w.-]+/[\w.-]+(/[\w./-]+)?@[0-9a-f]{40}$")
EXPECTED = {"ci.yml", "campaign.yml", "trial.yml", "leaderboard.yml"}


def tool(name: str) -> str:
    """The path of a checking tool installed beside this Python; skipped locally (failed in CI) when missing."""
    found = Path(sys.executable).with_name(name)
    path = str(found) if found.exists() else shutil.which(name)
    if path is None:
        message = f"{name} is not installed (pip install zizmor check-jsonschema)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path


def load(path: Path) -> dict[str, Any]:
    return YAML(typ="safe").load(path.read_text())  # YAML 1.2: `on` stays a string key


def jobs(path: Path) -> dict[str, dict[str, Any]]:
    return load(path)["jobs"]


def run_scripts(path: Path) -> list[str]:
    return [step["run"] for job in jobs(path).values() for step in job.get("steps", []) if "run" in step]


def uses(path: Path) -> list[dict[str, Any]]:
    return [step for job in jobs(path).values() for step in job.get("steps", []) if "uses" in step]


def zizmor(*args: str) -> tuple[int, list[dict[str, Any]]]:
    done = subprocess.run(
        [tool("zizmor"), "--offline", "--format", "json", *args], capture_output=True, text=True, timeout=120
    )
    return done.returncode, json.loads(done.stdout or "[]")


def test_the_four_workflows_exist() -> None:
    assert {p.name for p in WORKFLOWS} == EXPECTED


# -- zizmor -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("persona", ["regular", "pedantic"])
def test_zizmor_finds_nothing(persona: str) -> None:
    code, findings = zizmor("--persona", persona, *map(str, WORKFLOWS))
    summary = [(f["ident"], f["determinations"]["severity"], f["locations"][0]["symbolic"]["key"]) for f in findings]
    assert findings == [], summary
    assert code == 0


def test_every_zizmor_ignore_says_why() -> None:
    for path in WORKFLOWS:
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            if "zizmor: ignore[" not in line:
                continue
            after = line.split("]", 1)[1].strip()
            before = lines[i - 1].strip() if i else ""
            assert after or before.startswith("#"), f"{path.name}:{i + 1}: an ignore needs a reason beside or above it"


def test_zizmor_does_flag_a_dangerous_workflow(tmp_path: Path) -> None:
    """Control: the same call reports the classic mistakes, so an empty report above means something."""
    bad = tmp_path / "bad.yml"
    bad.write_text(
        "on:\n  pull_request_target:\njobs:\n  x:\n    runs-on: ubuntu-latest\n    steps:\n"
        "      - uses: actions/checkout@v4\n        with:\n          ref: ${{ github.event.pull_request.head.sha }}\n"
        '      - run: echo "${{ github.event.pull_request.title }}"\n'
    )
    code, findings = zizmor(str(bad))
    idents = {f["ident"] for f in findings}
    assert {"template-injection", "dangerous-triggers", "unpinned-uses", "excessive-permissions"} <= idents
    assert code >= 10


# -- check-jsonschema ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schema", "files"),
    [
        ("vendor.github-workflows", WORKFLOWS),
        ("custom.github-workflows-require-timeout", WORKFLOWS),
        ("vendor.github-issue-forms", ISSUE_FORMS),
    ],
)
def test_check_jsonschema(schema: str, files: list[Path]) -> None:
    assert files
    done = subprocess.run(
        [tool("check-jsonschema"), "--builtin-schema", schema, *map(str, files)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_require_timeout_schema_does_reject_a_job_without_one(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text("on: push\njobs:\n  x:\n    runs-on: ubuntu-latest\n    steps:\n      - run: true\n")
    done = subprocess.run(
        [tool("check-jsonschema"), "--builtin-schema", "custom.github-workflows-require-timeout", str(bad)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0 and "timeout-minutes" in done.stdout


# -- static rules -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_no_pull_request_target(path: Path) -> None:
    assert "pull_request_target" not in load(path)["on"]
    assert "pull_request_target" not in path.read_text()


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_no_expressions_inside_run_scripts(path: Path) -> None:
    for script in run_scripts(path):
        assert "${{" not in script, f"{path.name}: pass values through env:, not ${{{{ }}}} in run:\n{script}"


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_permissions_are_empty_at_the_top_and_set_per_job(path: Path) -> None:
    workflow = load(path)
    assert workflow["permissions"] == {}
    for name, job in workflow["jobs"].items():
        assert isinstance(job.get("permissions"), dict), f"{path.name}:{name} must state its permissions"
        assert set(job["permissions"].values()) <= {"read", "write"}


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_every_job_has_a_timeout(path: Path) -> None:
    for name, job in jobs(path).items():
        assert isinstance(job.get("timeout-minutes"), int), f"{path.name}:{name}"


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_actions_are_pinned_to_a_commit_with_a_version_comment(path: Path) -> None:
    text = path.read_text()
    for step in uses(path):
        assert PINNED.match(step["uses"]), f"{path.name}: {step['uses']} is not pinned to a full sha"
        assert re.search(re.escape(step["uses"]) + r" # v\d+\.\d+\.\d+", text), f"{step['uses']} lacks # vX.Y.Z"
        if step["uses"].startswith("actions/checkout@"):
            assert step["with"]["persist-credentials"] is False


def test_the_self_hosted_job_is_guarded() -> None:
    trial = load(ROOT / ".github" / "workflows" / "trial.yml")
    check, run, report = trial["jobs"]["check"], trial["jobs"]["run"], trial["jobs"]["report"]
    # The gate runs on GitHub's runners with read-only permissions, from default-branch code.
    assert check["runs-on"] == "ubuntu-latest"
    assert set(check["permissions"].values()) == {"read"}
    assert any("attune github check-trial" in s.get("run", "") for s in check["steps"])
    checkout = next(s for s in check["steps"] if s.get("uses", "").startswith("actions/checkout@"))
    assert checkout["with"]["ref"] == "${{ github.event.repository.default_branch }}"
    # The GPU job runs only after an ok, on labels the check emitted, read-only, with no secrets or tokens.
    assert run["needs"] == "check" and run["if"] == "needs.check.outputs.ok == 'true'"
    assert run["runs-on"] == "${{ fromJSON(needs.check.outputs.runs_on) }}"
    assert run["permissions"] == {"contents": "read"}
    run_text = json.dumps(run)
    assert "secrets." not in run_text and "github.token" not in run_text and "GITHUB_TOKEN" not in run_text
    checkout = next(s for s in run["steps"] if s.get("uses", "").startswith("actions/checkout@"))
    assert checkout["with"] == {"ref": "${{ inputs.sha }}", "persist-credentials": False}
    assert any('attune" run "$RECIPE" --json --out "$work/run"' in s.get("run", "") for s in run["steps"])
    # Writes happen only in the short hosted job after it.
    assert report["runs-on"] == "ubuntu-latest" and report["timeout-minutes"] <= 30
    # ...also when check refused (so the campaign closes the step with check's reason), never on a failed check job;
    # the artifact is read only after an ok
    assert report["if"] == "always() && needs.check.result == 'success'"
    download = next(s for s in report["steps"] if s.get("uses", "").startswith("actions/download-artifact@"))
    assert download["if"] == "needs.check.outputs.ok == 'true'"
    assert not any(
        s.get("uses", "").startswith("actions/checkout@")
        and s["with"]["ref"] != "${{ github.event.repository.default_branch }}"
        for s in report["steps"]
    )  # nothing of the (maybe refused) sha is checked out there
    assert set(trial["on"]["workflow_dispatch"]["inputs"]) == {
        "campaign",
        "issue",
        "pr",
        "sha",
        "runner_labels",
        "kind",
        "attempt",
        "recipe",
        "limits",
        "order",
    }
    # A pair's incumbent is the default branch head as `check` checked it, never an input.
    incumbent = next(s for s in run["steps"] if s.get("with", {}).get("path") == "attune-incumbent")
    assert incumbent["with"] == {
        "ref": "${{ needs.check.outputs.base_sha }}",
        "path": "attune-incumbent",
        "persist-credentials": False,
    }
    assert incumbent["if"] == "needs.check.outputs.kind == 'pair'"
    # The dispatcher's inputs reach the runner only as what `check` validated and emitted.
    run_env = [s.get("env", {}) for s in run["steps"] if "run" in s]
    assert all("inputs." not in json.dumps(env) for env in run_env)


def test_the_calibration_runs_on_the_gpu_runner_from_checked_records() -> None:
    trial = load(ROOT / ".github" / "workflows" / "trial.yml")
    check, run, report = trial["jobs"]["check"], trial["jobs"]["run"], trial["jobs"]["report"]
    script = next(s for s in check["steps"] if s.get("id") == "check")
    assert '--kind "$KIND"' in script["run"] and '--recipe "$RECIPE"' in script["run"]
    assert {"kind", "recipe", "campaign", "records_sha", "runs_on", "ok"} <= set(check["outputs"])
    records = next(s for s in run["steps"] if s.get("with", {}).get("path") == "attune-records")
    assert records["if"] == "needs.check.outputs.kind == 'calibrate'"
    assert records["with"] == {
        "ref": "${{ needs.check.outputs.records_sha }}",
        "path": "attune-records",
        "persist-credentials": False,
    }
    body = next(s["run"] for s in run["steps"] if "attune" in s.get("run", ""))
    assert 'attune" github calibrate --out "$work/run/calibrated.json"' in body
    handler = next(s for s in report["steps"] if "attune github handle" in s.get("run", ""))
    assert '--kind "$KIND" --attempt "$ATTEMPT"' in handler["run"]
    assert handler["env"]["KIND"] == "${{ needs.check.outputs.kind || inputs.kind }}"


def test_a_refused_check_reaches_the_report_job_with_its_reason() -> None:
    trial = load(ROOT / ".github" / "workflows" / "trial.yml")
    check, report = trial["jobs"]["check"], trial["jobs"]["report"]
    assert check["outputs"]["reason"] == "${{ steps.check.outputs.reason }}"
    handler = next(s for s in report["steps"] if "attune github handle" in s.get("run", ""))
    assert handler["env"]["CHECK_OK"] == "${{ needs.check.outputs.ok }}"
    assert handler["env"]["CHECK_REASON"] == "${{ needs.check.outputs.reason }}"
    assert 'if [ "$CHECK_OK" != true ]; then refused=(--check-refused' in handler["run"]
    assert '"${refused[@]}"' in handler["run"]


def test_the_bot_names_the_run_job_as_trial_yml_does() -> None:
    """The report job reads the run job's wall time by its name (it bounds a real record's device-hours): a renamed
    job would leave every record bounded only by the job's timeout."""
    from bot.cli.github import RUN_JOB

    assert load(ROOT / ".github" / "workflows" / "trial.yml")["jobs"]["run"]["name"] == RUN_JOB


def test_the_bot_knows_the_run_jobs_timeout_as_trial_yml_sets_it() -> None:
    """Without the run job's wall time, its timeout bounds a record's device-hours: GitHub cancels the job then."""
    from bot.github.uploads import RUN_JOB_TIMEOUT_S

    assert (
        load(ROOT / ".github" / "workflows" / "trial.yml")["jobs"]["run"]["timeout-minutes"] * 60 == RUN_JOB_TIMEOUT_S
    )


def test_the_bot_knows_its_own_login_when_the_app_writes() -> None:
    for name in ("campaign.yml", "trial.yml"):
        steps = [s for job in jobs(ROOT / ".github" / "workflows" / name).values() for s in job["steps"]]
        handler = next(s for s in steps if "attune github handle" in s.get("run", ""))
        assert "steps.app-token.outputs.app-slug" in handler["env"]["ATTUNE_BOT_LOGIN"]


def test_only_the_trial_workflow_uses_self_hosted_runners() -> None:
    for path in WORKFLOWS:
        for name, job in jobs(path).items():
            if path.name == "trial.yml" and name == "run":
                continue
            assert job["runs-on"] == "ubuntu-latest", f"{path.name}:{name}"


def test_campaign_workflow_triggers_and_handler() -> None:
    workflow = load(ROOT / ".github" / "workflows" / "campaign.yml")
    assert workflow["on"]["issues"]["types"] == ["opened", "labeled"]
    assert workflow["on"]["issue_comment"]["types"] == ["created"]
    assert "workflow_dispatch" in workflow["on"]
    (job,) = workflow["jobs"].values()
    scripts = [s.get("run", "") for s in job["steps"]]
    assert 'attune github handle --event-path "$GITHUB_EVENT_PATH" --event-name "$GITHUB_EVENT_NAME"' in scripts
    assert job["permissions"] == {
        "contents": "write",
        "pull-requests": "write",
        "issues": "write",
        "actions": "write",
    }


def concurrency_problems(workflow: dict[str, Any]) -> list[str]:
    """Why a workflow's concurrency could let an event the bot ignores cancel or replace a pending command: GitHub
    claims a workflow-level group before it evaluates a job's ``if`` (a skipped run still replaces the pending one);
    a job skipped by its ``if`` never joins a job-level group."""
    problems = []
    if "concurrency" in workflow:
        problems.append("workflow-level concurrency: every event joins the group before the job's `if` filters it")
    for name, job in workflow["jobs"].items():
        group = job.get("concurrency")
        if not isinstance(group, dict):
            problems.append(f"{name}: no job-level concurrency group")
            continue
        if group.get("cancel-in-progress") is not False:
            problems.append(f"{name}: cancel-in-progress must be false (a handler between two side effects)")
        if "github.event.issue.number" not in group["group"] or "inputs.issue" not in group["group"]:
            problems.append(f"{name}: the group must be the campaign issue's, for comments and the manual nudge alike")
    return problems


def test_a_comment_the_bot_ignores_cannot_cancel_a_pending_command() -> None:
    """campaign.yml: the group is claimed by the filtered job only, per campaign issue (issue events, /attune comments
    and the manual nudge of one issue share it), and a running handler is never cancelled."""
    workflow = load(ROOT / ".github" / "workflows" / "campaign.yml")
    assert concurrency_problems(workflow) == []
    (job,) = workflow["jobs"].values()
    assert "startsWith(github.event.comment.body, '/attune')" in job["if"]  # a "+1" is skipped, so never joins
    assert job["concurrency"]["group"] == "attune-campaign-${{ github.event.issue.number || inputs.issue }}"


def test_the_concurrency_rule_does_flag_a_workflow_level_group() -> None:
    """Control: the previous campaign.yml (group at the workflow level) and a cancelling group are reported."""
    workflow = load(ROOT / ".github" / "workflows" / "campaign.yml")
    ((name, job),) = workflow["jobs"].items()
    old = {
        **workflow,
        "concurrency": job["concurrency"],
        "jobs": {name: {k: v for k, v in job.items() if k != "concurrency"}},
    }
    assert len(concurrency_problems(old)) == 2
    cancelling = {
        **workflow,
        "jobs": {name: {**job, "concurrency": {**job["concurrency"], "cancel-in-progress": True}}},
    }
    assert any("cancel-in-progress" in p for p in concurrency_problems(cancelling))


def test_app_tokens_are_optional_and_scoped() -> None:
    for name in ("campaign.yml", "trial.yml", "leaderboard.yml"):
        for step in uses(ROOT / ".github" / "workflows" / name):
            if step["uses"].startswith("actions/create-github-app-token@"):
                assert step["if"] == "vars.ATTUNE_APP_ID != ''"
                assert any(k.startswith("permission-") for k in step["with"])


def test_leaderboard_lands_through_a_bot_pull_request_never_a_push() -> None:
    """No bypass actor is needed on a protected main: the job has no push of its own (no credentials persisted, no
    git push), it opens, gates and merges a pull request (bot/github/leaderboard_pr.py, tested against the fake)."""
    workflow = load(ROOT / ".github" / "workflows" / "leaderboard.yml")
    assert workflow["on"]["push"] == {"branches": ["main"], "paths": ["results/**"]}
    (job,) = workflow["jobs"].values()
    assert job["permissions"] == {"contents": "write", "pull-requests": "write", "statuses": "write"}
    scripts = run_scripts(ROOT / ".github" / "workflows" / "leaderboard.yml")
    assert 'attune github publish-leaderboard --run-id "$GITHUB_RUN_ID-$GITHUB_RUN_ATTEMPT"' in scripts
    assert not any("git push" in s or "push-regenerated" in s or "extraheader" in s for s in scripts)
    checkout = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/checkout@"))
    assert checkout["with"]["fetch-depth"] == 0  # the commit column needs the history (a shallow clone has one commit)


def test_the_readme_table_states_each_jobs_permissions_exactly() -> None:
    """docs/github.md's workflow table is read from the YAML; this keeps the two from drifting apart."""
    readme = (ROOT / "docs" / "github.md").read_text()
    rows = re.findall(r"^\| `(\w+)` / `(\w+)` \|.*\| ([^|]+) \|$", readme, re.M)
    stated = {(wf, job): dict(p.split(": ") for p in re.findall(r"`([\w-]+: \w+)`", perms)) for wf, job, perms in rows}
    actual = {(path.stem, name): job["permissions"] for path in WORKFLOWS for name, job in jobs(path).items()}
    assert stated == actual


def test_the_optional_anthropic_key_reaches_only_the_hosted_handlers() -> None:
    for path in WORKFLOWS:
        for name, job in jobs(path).items():
            for step in job.get("steps", []):
                if "ANTHROPIC_API_KEY" in json.dumps(step):
                    assert (path.name, name) in {("campaign.yml", "handle"), ("trial.yml", "report")}
                    assert step["env"]["ANTHROPIC_API_KEY"] == "${{ secrets.ANTHROPIC_API_KEY }}"


def test_the_run_step_execs_attune_run_so_a_cancelled_workflow_reaches_it() -> None:
    """The runner signals the step's entry process (SIGINT, then SIGTERM; GitHub's workflow cancellation reference):
    with ``exec`` that is ``attune run`` itself, which stops its ranks or scancels its Slurm job
    (tests/runner/test_slurm.py proves the latter against a real Slurm)."""
    run = load(ROOT / ".github" / "workflows" / "trial.yml")["jobs"]["run"]
    body = next(s["run"] for s in run["steps"] if 'attune" run "$RECIPE"' in s.get("run", ""))
    lines = [ln.strip() for ln in body.splitlines() if 'attune" run "$RECIPE"' in ln]
    single = [ln for ln in lines if ln.startswith("exec ")]
    assert single == ['exec "$work/venv/bin/attune" run "$RECIPE" --json --out "$work/run" "${limits[@]}"']
    assert body.rstrip().splitlines()[-1].strip() == "fi"  # nothing after it in the step would run anyway
    # a pair runs two: each in the background, waited for, and a trap passes SIGTERM/SIGINT on to the one running
    (pair,) = [ln for ln in lines if not ln.startswith("exec ")]
    assert pair.startswith('(cd "$dir" && exec "$work/venv/bin/attune" run "$RECIPE"') and pair.endswith("& pid=$!")
    assert """trap 'if [ -n "$pid" ]; then kill -TERM "$pid"; wait "$pid"; fi; exit 143' TERM INT""" in body


def test_the_runner_job_trusts_nothing_outside_its_own_folder() -> None:
    """Runner hygiene (issue #12 item 6): no implicit sys.path entry, and every file the job writes or reads back
    (venv, run, calibration runs, TMPDIR, compiler caches that hold loaded code) in a folder of its own under
    $RUNNER_TEMP, which the runner empties around every job; a lasting calibration cache only when the runner's
    operator asks for one, kept per repository; the artifact uploaded from that folder."""
    run = load(ROOT / ".github" / "workflows" / "trial.yml")["jobs"]["run"]
    assert run["env"] == {"PYTHONSAFEPATH": "1"}
    body = next(s["run"] for s in run["steps"] if 'attune" run "$RECIPE"' in s.get("run", ""))
    lines = [ln.strip() for ln in body.splitlines()]
    assert lines[0] == 'work="$RUNNER_TEMP/attune"'
    exported = {
        m.group(1): m.group(2) for ln in lines if ln.startswith("export ") for m in re.finditer(r'(\w+)="([^"]*)"', ln)
    }
    assert exported == {
        "TMPDIR": "$work/tmp",
        "XDG_CACHE_HOME": "$work/cache",
        "TORCHINDUCTOR_CACHE_DIR": "$work/cache/torchinductor",
        "TRITON_CACHE_DIR": "$work/cache/triton",
        # nothing of the runner's $HOME: its own HOME, no user site, no pip configuration file
        "HOME": "$work/home",
        "PYTHONNOUSERSITE": "1",
        "PIP_CONFIG_FILE": "/dev/null",
    }
    assert lines.index('export HOME="$work/home" PYTHONNOUSERSITE="1" PIP_CONFIG_FILE="/dev/null"') < next(
        i for i, ln in enumerate(lines) if "python3" in ln
    )  # before any Python starts
    assert "$HOME" not in body and "~/" not in body and not re.search(r"(?<![\w$])/tmp", body)
    assert 'python3 -m venv --system-site-packages "$work/venv"' in lines
    assert 'cache="$work/calibration"' in lines
    assert 'if [ -n "${ATTUNE_CACHE_DIR:-}" ]; then cache="$ATTUNE_CACHE_DIR/$GITHUB_REPOSITORY_ID"; fi' in lines
    assert all(
        ref.startswith("$work/")
        or ref in ("$work", "$RUNNER_TEMP/attune", "$cache", "$ATTUNE_CACHE_DIR/$GITHUB_REPOSITORY_ID")
        for ref in re.findall(r'"(\$[^"]*)"', body)
        if "/" in ref
    ), body
    upload = next(s for s in run["steps"] if s.get("uses", "").startswith("actions/upload-artifact@"))
    paths = upload["with"]["path"].splitlines()  # the records only, never run/ as a whole (a batch script, node names)
    assert paths and all(p.startswith("${{ runner.temp }}/attune/run/") and p.endswith(".json") for p in paths), paths


def test_the_app_key_is_read_only_by_jobs_in_the_main_only_environment() -> None:
    """The App's private key is an environment secret (docs/github.md: environment ``attune``, deployment branches
    ``main`` only); every job that mints an App token names that environment, and no other job does."""
    minting = set()
    for path in WORKFLOWS:
        for name, job in jobs(path).items():
            if "ATTUNE_APP_PRIVATE_KEY" in json.dumps(job):
                minting.add((path.name, name))
                assert job.get("environment") == "attune", f"{path.name}:{name}"
            else:
                assert "environment" not in job, f"{path.name}:{name} needs no environment"
    assert minting == {
        ("campaign.yml", "handle"),
        ("trial.yml", "check"),
        ("trial.yml", "report"),
        ("leaderboard.yml", "regenerate"),
    }
    # check mints a token only to learn the App's login (whose state comment names the step's levers): read-only
    check = jobs(ROOT / ".github" / "workflows" / "trial.yml")["check"]
    token = next(s for s in check["steps"] if s.get("uses", "").startswith("actions/create-github-app-token@"))
    assert {v for k, v in token["with"].items() if k.startswith("permission-")} == {"read"}
    step = next(s for s in check["steps"] if s.get("id") == "check")
    assert '--issue "$ISSUE"' in step["run"] and step["env"]["ISSUE"] == "${{ inputs.issue }}"
    assert (
        step["env"]["ATTUNE_BOT_LOGIN"]
        == jobs(ROOT / ".github" / "workflows" / "trial.yml")["report"]["steps"][-1]["env"]["ATTUNE_BOT_LOGIN"]
    )


def test_the_readme_sets_up_the_anthropic_key_in_the_environment_and_attune_gate_from_the_app() -> None:
    """``ANTHROPIC_API_KEY`` is an environment secret of ``attune`` (a repository secret is readable by any writer's
    branch workflow), every job that reads it names that environment, and the ruleset takes ``attune/gate`` only from
    the bot's App (any token with ``statuses: write`` can post a status of that name)."""
    readme = (ROOT / "docs" / "github.md").read_text()
    row = next(line for line in readme.splitlines() if line.strip().startswith("| `ANTHROPIC_API_KEY` |"))
    assert "**environment** secret of the environment `attune`" in row and "never as a repository secret" in row
    assert "**from the bot's App**" in readme and "pick the App as its source" in readme
    for path in WORKFLOWS:
        for name, job in jobs(path).items():
            if "secrets.ANTHROPIC_API_KEY" in json.dumps(job):
                assert job.get("environment") == "attune", f"{path.name}:{name}"
