"""GitHubForge against the stateful fake, where every request and response is checked against GitHub's OpenAPI.

Each test drives the real PyGithub client through ``GitHubForge``; the fake answers like github.com and the
fixture fails the test if any request or response left GitHub's published contract.
"""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import pytest
from forge_helpers import TOKEN, require, set_one_lever
from github import Auth, Github, GithubException

from bot.forge.base import StepRef, StepRequest
from bot.forge.github import GATE_CONTEXT, GitHubForge, GitHubForgeError, MergeRefused
from bot.forge.markers import GITHUB_BODY_LIMIT, marker

require("responses", "openapi_core")  # test-only packages: skipped locally when missing, an error under CI
from fake_github import FakeGitHub  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SHIPPED_RECIPE = ROOT / "recipes" / "llama3-tiny" / "cpu.yaml"
RECIPE_PATH = "recipes/llama3_8b/h100x8.yaml"
RECIPE = """\
# Llama 3 8B on one node of 8 H100 (comments and order must survive the edit)
workload:
  module: llama3
  config: llama3_8b
levers:
  compile: false
  activation_checkpoint: full
  fsdp_reshard_after_forward: default
pinned:
  global_batch_size: 64
  seq_len: 8192
"""


def request(n: int = 1, lever: str = "compile", value: str = "true", **kw: str) -> StepRequest:
    fields = {"title": f"Step {n}: set {lever} = {value}", "body": f"Why: try {lever}."} | kw
    return StepRequest(campaign="c7", n=n, recipe_path=RECIPE_PATH, lever=lever, value=value, **fields)


@pytest.fixture
def seeded(fake_github: FakeGitHub) -> FakeGitHub:
    fake_github.seed({RECIPE_PATH: RECIPE}, "add recipe")
    fake_github.workflows.add("trial.yml")
    return fake_github


def client() -> Github:
    """An independent PyGithub client, to look at the fake the way a reviewer's browser would."""
    return Github(
        auth=Auth.Token(TOKEN),
        retry=None,
        seconds_between_requests=None,
        seconds_between_writes=None,
        lazy=True,
    )


# -- open_step / find_step ---------------------------------------------------------------------------------


def test_open_step_opens_a_labelled_pr_whose_diff_is_one_line(seeded: FakeGitHub, forge: GitHubForge) -> None:
    base_before = seeded.head("main")
    step = forge.open_step(request())

    assert step.branch == "attune/c7/1-compile"
    assert step.state == "open" and step.number is not None
    assert step.url == f"https://github.com/{seeded.full_name}/pull/{step.number}"
    files = list(client().get_repo(seeded.full_name).get_pull(step.number).get_files())
    assert [(f.filename, f.additions, f.deletions) for f in files] == [(RECIPE_PATH, 1, 1)]
    changed = [line for line in files[0].patch.splitlines() if line[:1] in "+-"]
    assert changed == ["-  compile: false", "+  compile: true"]
    pull = seeded.pulls[step.number]
    assert pull.head_ref == step.branch and pull.base_ref == "main"
    assert seeded.head(step.branch) == step.head_sha
    assert seeded.commits[step.head_sha].parents == [base_before]
    assert seeded.head("main") == base_before  # nothing lands on main before the gate
    assert seeded.issues[step.number].labels == ["attune", "attune:step"]
    assert pull.title == "Step 1: set compile = true"
    assert pull.body.startswith("Why: try compile.") and marker("step:c7/1") in pull.body


def test_open_step_is_idempotent(seeded: FakeGitHub, forge: GitHubForge) -> None:
    first = forge.open_step(request())
    writes_before = [c for c in seeded.calls if c.method != "GET"]
    again = forge.open_step(request())

    assert again == first
    assert len(seeded.pulls) == 1
    assert [c for c in seeded.calls if c.method != "GET"] == writes_before  # the second call only looked


def test_open_step_resumes_a_branch_left_by_a_crash(seeded: FakeGitHub, forge: GitHubForge) -> None:
    # A driver created the branch and committed, then died before opening the PR.
    seeded.create_branch("attune/c7/1-compile")
    edited = set_one_lever(RECIPE, "compile", "true")
    sha = seeded.seed({RECIPE_PATH: edited}, "attune: c7 step 1", branch="attune/c7/1-compile")

    step = forge.open_step(request())

    assert step.head_sha == sha
    assert len(seeded.pulls) == 1 and "repos/create-or-update-file-contents" not in seeded.operations()


def test_open_step_survives_a_racing_driver_creating_the_branch(seeded: FakeGitHub, forge: GitHubForge) -> None:
    # After the forge saw no step branch (its second ref look-up), another driver creates it.
    seeded.after("git/get-ref", lambda f: f.after("git/get-ref", lambda g: g.create_branch("attune/c7/1-compile")))

    step = forge.open_step(request())

    (create,) = [c for c in seeded.calls if c.operation_id == "git/create-ref"]
    assert create.status == 422
    assert seeded.file(RECIPE_PATH, step.branch) == set_one_lever(RECIPE, "compile", "true")
    assert len(seeded.pulls) == 1


def test_open_step_stacks_a_step_on_its_parent_branch(seeded: FakeGitHub, forge: GitHubForge) -> None:
    # An OOM retry: step 2 is built on step 1's layout, which was closed with its report on the branch.
    base_before = seeded.head("main")
    parent = forge.open_step(request(1, "compile", "true"))
    parent = forge.add_files(parent, {"campaigns/c7/step-1/CLOSED.md": "Closed: trial oom\n"}, "attune: close step 1")
    forge.close(parent, "trial oom")

    child = forge.open_step(request(2, "activation_checkpoint", "selective"), base_ref=parent.branch)

    assert child.branch == "attune/c7/2-activation_checkpoint"
    assert seeded.commits[child.head_sha].parents == [parent.head_sha]  # one commit on top of the parent's head
    pull = seeded.pulls[child.number]
    assert pull.base_ref == "main" and pull.state == "open"
    text = seeded.file(RECIPE_PATH, child.branch)
    assert "  compile: true\n" in text and "  activation_checkpoint: selective\n" in text
    own = seeded.commits[child.head_sha]
    assert own.tree[RECIPE_PATH] == set_one_lever(
        seeded.file(RECIPE_PATH, parent.head_sha), "activation_checkpoint", "selective"
    )
    assert forge.check_trial(child.number, child.head_sha).ok  # recipe + the parent's campaigns/ note only
    assert forge.open_step(request(2, "activation_checkpoint", "selective"), base_ref=parent.branch) == child
    assert seeded.head("main") == base_before  # nothing lands on main before a gate


def test_open_step_stacks_only_on_a_step_of_the_same_campaign(seeded: FakeGitHub, forge: GitHubForge) -> None:
    for base_ref in ("main", "attune/other/1-compile", "feature/x"):
        with pytest.raises(GitHubForgeError, match="stacked on a step branch of campaign c7"):
            forge.open_step(request(2), base_ref=base_ref)
    with pytest.raises(GitHubForgeError, match="parent step branch 'attune/c7/1-gone' not found"):
        forge.open_step(request(2), base_ref="attune/c7/1-gone")
    assert seeded.pulls == {} and set(seeded.refs) == {"heads/main"}


def test_open_step_refuses_to_reuse_a_branch_with_other_content(seeded: FakeGitHub, forge: GitHubForge) -> None:
    seeded.create_branch("attune/c7/1-compile")
    seeded.seed(
        {RECIPE_PATH: RECIPE.replace("seq_len: 8192", "seq_len: 4096")},
        "someone",
        branch="attune/c7/1-compile",
    )

    with pytest.raises(GitHubForgeError, match="already exists with a different"):
        forge.open_step(request())
    assert seeded.pulls == {}


def test_bad_lever_value_changes_nothing(seeded: FakeGitHub, forge: GitHubForge) -> None:
    refs_before = dict(seeded.refs)
    with pytest.raises(ValueError, match="bad value"):
        forge.open_step(request(value=" true"))
    assert seeded.refs == refs_before and seeded.pulls == {}
    assert {c.method for c in seeded.calls} == {"GET"}


def test_an_edit_of_more_than_one_line_is_refused(seeded: FakeGitHub, fake_github: FakeGitHub) -> None:
    def two_lines(text: str, lever: str, value: str, *, source: str) -> str:
        return text.replace("compile: false", "compile: true").replace("seq_len: 8192", "seq_len: 1")

    forge = GitHubForge(
        seeded.full_name,
        TOKEN,
        retry=None,
        seconds_between_requests=None,
        seconds_between_writes=None,
        edit_recipe=two_lines,
    )
    with pytest.raises(GitHubForgeError, match="removes 2 and adds 2 lines"):
        forge.open_step(request())
    assert seeded.pulls == {} and set(seeded.refs) == {"heads/main"}


def test_a_step_may_add_one_lever_line(seeded: FakeGitHub) -> None:
    def add_line(text: str, lever: str, value: str, *, source: str) -> str:
        return text.replace("levers:\n", f"levers:\n  {lever}: {value}\n")

    forge = GitHubForge(
        seeded.full_name,
        TOKEN,
        retry=None,
        seconds_between_requests=None,
        seconds_between_writes=None,
        edit_recipe=add_line,
    )
    step = forge.open_step(request(lever="float8", value="true"))
    files = list(client().get_repo(seeded.full_name).get_pull(step.number).get_files())
    assert [(f.filename, f.additions, f.deletions) for f in files] == [(RECIPE_PATH, 1, 0)]


def test_open_step_with_the_real_recipe_editor_and_a_shipped_recipe(fake_github: FakeGitHub) -> None:
    recipe_module = pytest.importorskip("bot.core.recipe")
    if not hasattr(recipe_module, "set_lever_text") or not SHIPPED_RECIPE.is_file():
        pytest.skip("bot.core.recipe.set_lever_text or recipes/llama3-tiny/cpu.yaml is not there yet")
    path = SHIPPED_RECIPE.relative_to(ROOT).as_posix()
    text = SHIPPED_RECIPE.read_text()
    fake_github.seed({path: text})
    forge = GitHubForge(
        fake_github.full_name, TOKEN, retry=None, seconds_between_requests=None, seconds_between_writes=None
    )
    req = StepRequest(campaign="tiny", n=1, recipe_path=path, lever="compile.enable", value="true", title="t", body="b")

    with pytest.raises(recipe_module.RecipeError):
        forge.open_step(req.model_copy(update={"value": "maybe"}))
    assert set(fake_github.refs) == {"heads/main"}  # a refused value changed nothing

    step = forge.open_step(req)
    assert step.branch == "attune/tiny/1-compile-enable"
    files = list(client().get_repo(fake_github.full_name).get_pull(step.number).get_files())
    assert [(f.filename, f.additions, f.deletions) for f in files] == [(path, 1, 1)]
    assert "+  compile.enable: true" in files[0].patch
    assert fake_github.file(path, step.branch).startswith(text.split("\n", 1)[0])  # comments survive


def test_find_step_sees_merged_steps_after_their_branch_is_deleted(seeded: FakeGitHub, forge: GitHubForge) -> None:
    step = forge.open_step(request())
    forge.merge(step, "keep")
    del seeded.refs[f"heads/{step.branch}"]  # "automatically delete head branches"

    found = forge.find_step("c7", 1)

    assert found is not None and found.number == step.number and found.state == "merged"
    assert found.head_sha == step.head_sha
    assert forge.find_step("c7", 2) is None


def test_find_step_ignores_forks_and_pull_requests_without_the_marker(seeded: FakeGitHub, forge: GitHubForge) -> None:
    tag = marker("step:c7/1")
    seeded.add_pull("attune/c7/1-compile", body=tag, user="mallory", head_repo="mallory/tuning", head_sha="f" * 40)
    seeded.create_branch("attune/c7/1-lookalike")
    seeded.seed({"x.txt": "x"}, "x", branch="attune/c7/1-lookalike")
    seeded.add_pull("attune/c7/1-lookalike", body="no marker here", user="alice")

    assert forge.find_step("c7", 1) is None


# -- comments, dashboard, statuses -------------------------------------------------------------------------


def test_upsert_comment_twice_edits_one_comment(seeded: FakeGitHub, forge: GitHubForge) -> None:
    step = forge.open_step(request())
    forge.upsert_comment(step, "report", "throughput +3%")
    forge.upsert_comment(step, "report", "throughput +4%")

    comments = [c for c in seeded.comments.values() if c.issue == step.number]
    assert len(comments) == 1
    assert comments[0].body == f"{marker('report')}\nthroughput +4%"
    assert seeded.operations().count("issues/create-comment") == 1
    assert seeded.operations().count("issues/update-comment") == 1

    forge.upsert_comment(step, "report", "throughput +4%")  # unchanged: nothing is sent
    assert seeded.operations().count("issues/update-comment") == 1


def test_comments_with_different_markers_coexist(seeded: FakeGitHub, forge: GitHubForge) -> None:
    issue = seeded.add_issue("Tune: llama3", "form body")
    forge.upsert_comment(issue, "request", "ok")
    forge.update_dashboard(issue, "| step | status |\n|---|---|\n| 1 | open |")
    forge.update_dashboard(issue, "| step | status |\n|---|---|\n| 1 | merged |")

    bodies = sorted(c.body for c in seeded.comments.values() if c.issue == issue)
    assert bodies == [
        f"{marker('dashboard')}\n| step | status |\n|---|---|\n| 1 | merged |",
        f"{marker('request')}\nok",
    ]
    assert seeded.issues[issue].body == "form body"  # the requester's form is never rewritten


def test_a_marker_planted_by_someone_else_is_not_edited(seeded: FakeGitHub, forge: GitHubForge) -> None:
    issue = seeded.add_issue("Tune", "body")
    planted = seeded.add_comment(issue, f"{marker('dashboard')}\nfake numbers", user="mallory")
    forge.update_dashboard(issue, "real numbers")

    assert seeded.comments[planted].body.endswith("fake numbers")
    ours = [c for c in seeded.comments.values() if c.user == seeded.actor]
    assert [c.body for c in ours] == [f"{marker('dashboard')}\nreal numbers"]


def test_comment_bodies_are_capped_with_a_note(seeded: FakeGitHub, forge: GitHubForge) -> None:
    issue = seeded.add_issue("Tune", "body")
    forge.upsert_comment(issue, "report", "```\n" + "x" * 100_000)

    (comment,) = seeded.comments.values()
    assert len(comment.body) <= GITHUB_BODY_LIMIT
    assert comment.body.startswith(marker("report"))
    assert "characters were cut" in comment.body
    assert comment.body.count("```") % 2 == 0  # the cut code block is closed before the note


def test_set_status_on_the_measured_sha(seeded: FakeGitHub, forge: GitHubForge) -> None:
    step = forge.open_step(request())
    forge.set_status(step, "pending", "measuring")
    forge.set_status(step, "success", "gate passed: +4.1% tokens/s, loss within band " + "." * 200)

    assert [(s.sha, s.context, s.state) for s in seeded.statuses] == [
        (step.head_sha, GATE_CONTEXT, "pending"),
        (step.head_sha, GATE_CONTEXT, "success"),
    ]
    assert len(seeded.statuses[1].description) == 140
    assert seeded.statuses[1].target_url == step.url
    with pytest.raises(ValueError, match="expected one of"):
        forge.set_status(step, "green", "no")  # type: ignore[arg-type]


def test_set_status_links_the_workflow_run(seeded: FakeGitHub) -> None:
    env = {
        "GITHUB_REPOSITORY": seeded.full_name,
        "GITHUB_TOKEN": TOKEN,
        "GITHUB_SERVER_URL": "https://github.com",
        "GITHUB_RUN_ID": "99",
    }
    forge = GitHubForge.from_env(
        env, retry=None, seconds_between_requests=None, seconds_between_writes=None, edit_recipe=set_one_lever
    )
    step = forge.open_step(request())
    forge.set_status(step, "failure", "gate failed")
    assert seeded.statuses[-1].target_url == f"https://github.com/{seeded.full_name}/actions/runs/99"


# -- merge and close ----------------------------------------------------------------------------------------


def test_merge_with_the_measured_sha(seeded: FakeGitHub, forge: GitHubForge) -> None:
    step = forge.open_step(request())
    merged = forge.merge(step, "Gate passed; +4.1% tokens/s.")

    assert merged.state == "merged"
    (put,) = [c for c in seeded.calls if c.operation_id == "pulls/merge"]
    assert put.body["sha"] == step.head_sha and put.body["merge_method"] == "merge"
    assert seeded.file(RECIPE_PATH) == set_one_lever(RECIPE, "compile", "true")
    assert step.head_sha in seeded.commits[seeded.head("main")].parents
    assert forge.merge(step, "again") == merged  # a resumed driver sees it merged, nothing sent
    assert seeded.operations().count("pulls/merge") == 1


def test_merge_refuses_when_the_head_moved_after_measuring(seeded: FakeGitHub, forge: GitHubForge) -> None:
    step = forge.open_step(request())
    # Between the forge's look at the PR and its merge request, someone pushes to the step branch.
    seeded.after("pulls/get", lambda fake: fake.seed({"results/x.json": "{}"}, "late push", branch=step.branch))
    main_before = seeded.head("main")

    with pytest.raises(MergeRefused, match="head moved away from the measured"):
        forge.merge(step, "msg")

    (put,) = [c for c in seeded.calls if c.operation_id == "pulls/merge"]
    assert put.status == 409 and put.body["sha"] == step.head_sha
    assert seeded.head("main") == main_before and seeded.pulls[step.number].state == "open"


def test_merge_refuses_an_unmeasured_head_without_asking_github(seeded: FakeGitHub, forge: GitHubForge) -> None:
    step = forge.open_step(request())
    seeded.seed({"results/x.json": "{}"}, "late push", branch=step.branch)

    with pytest.raises(MergeRefused, match="not merging an unmeasured commit"):
        forge.merge(step, "msg")
    assert "pulls/merge" not in seeded.operations()


def test_merge_reports_githubs_refusal(seeded: FakeGitHub, forge: GitHubForge) -> None:
    step = forge.open_step(request())
    seeded.pulls[step.number].blocked_reason = 'Required status check "attune/gate" is expected.'

    with pytest.raises(MergeRefused, match=r"405: Required status check"):
        forge.merge(step, "msg")
    assert seeded.pulls[step.number].merged_at is None


def test_merge_refuses_pull_requests_that_are_not_bot_branches(seeded: FakeGitHub, forge: GitHubForge) -> None:
    seeded.create_branch("feature")
    sha = seeded.seed({"bot/x.py": "print(1)\n"}, "feature", branch="feature")
    number = seeded.add_pull("feature")
    step = StepRef(campaign="c7", n=1, branch="feature", head_sha=sha, number=number)

    with pytest.raises(MergeRefused, match="not a bot branch"):
        forge.merge(step, "msg")
    assert "pulls/merge" not in seeded.operations()


def test_close_with_reason_keeps_the_branch(seeded: FakeGitHub, forge: GitHubForge) -> None:
    step = forge.open_step(request())
    closed = forge.close(step, "Gate failed: loss diverged at step 40 (outside the noise band).")

    assert closed.state == "closed"
    pull = seeded.pulls[step.number]
    assert pull.state == "closed" and pull.merged_at is None
    assert "attune:rejected" in seeded.issues[step.number].labels
    (comment,) = [c for c in seeded.comments.values() if c.issue == step.number]
    assert comment.body == f"{marker('closed')}\nGate failed: loss diverged at step 40 (outside the noise band)."
    assert seeded.head(step.branch) == step.head_sha  # the record of what was tried stays
    assert forge.find_step("c7", 1).state == "closed"


# -- trust checks, permissions, dispatch, files -------------------------------------------------------------


def test_a_fork_branch_is_not_a_bot_branch(seeded: FakeGitHub, forge: GitHubForge) -> None:
    step = forge.open_step(request())
    fork = seeded.add_pull("attune/c7/2-compile", user="mallory", head_repo="mallory/tuning", head_sha="e" * 40)
    seeded.create_branch("my-feature")
    seeded.seed({"notes.md": "hi\n"}, "notes", branch="my-feature")
    human = seeded.add_pull("my-feature")

    assert forge.is_bot_branch(step.number) is True
    assert forge.is_bot_branch(fork) is False
    assert forge.is_bot_branch(human) is False


def test_check_trial(seeded: FakeGitHub, forge: GitHubForge) -> None:
    step = forge.open_step(request())
    fork = seeded.add_pull("attune/c7/2-x", user="mallory", head_repo="mallory/tuning", head_sha="e" * 40)

    check = forge.check_trial(step.number, step.head_sha)
    assert check.ok and check.recipe == RECIPE_PATH and check.branch == step.branch
    assert "not from an attune/ branch" in forge.check_trial(fork, "e" * 40).reason
    assert "head is" in forge.check_trial(step.number, "a" * 40).reason
    assert "40 hexadecimal" in forge.check_trial(step.number, "$(id)").reason
    assert "does not exist" in forge.check_trial(999, step.head_sha).reason

    two = seeded.seed({"recipes/other.yaml": "levers: {}\n"}, "second recipe", branch=step.branch)
    assert "changes 2 recipe files" in forge.check_trial(step.number, two).reason
    code = seeded.seed({"bot/cli.py": "import os; os.system('curl evil')\n"}, "sneak", branch=step.branch)
    check = forge.check_trial(step.number, code)
    assert not check.ok and "outside recipes/, results/" in check.reason and "bot/cli.py" in check.reason


def test_check_trial_diffs_the_exact_sha_in_one_compare_call(seeded: FakeGitHub, forge: GitHubForge) -> None:
    """The files are those of ``main...sha`` (one ``GET /compare``), not the PR's file list: a force-push right after
    the head check (a clean head in place of one that changes code) cannot make the code-changing sha pass."""
    step = forge.open_step(request())
    code = seeded.seed({"bot/cli.py": "import os; os.system('curl evil')\n"}, "sneak", branch=step.branch)
    clean = step.head_sha

    def force_push_clean(fake: FakeGitHub) -> None:  # the branch moves back to the clean head
        fake.refs[f"heads/{step.branch}"] = clean

    seeded.after("pulls/get", force_push_clean)
    before = len(seeded.calls)
    check = forge.check_trial(step.number, code)
    assert not check.ok and "bot/cli.py" in check.reason
    assert [c.operation_id for c in seeded.calls[before:]] == ["pulls/get", "repos/compare-commits"]
    assert seeded.compares == [f"main...{code}"]
    assert forge.check_trial(step.number, clean).ok  # the clean head itself still passes


def test_check_trial_refuses_a_comparison_github_may_have_cut_at_300_files(
    seeded: FakeGitHub, forge: GitHubForge
) -> None:
    step = forge.open_step(request())
    many = seeded.seed({f"results/m/{i}.json": "{}\n" for i in range(300)}, "many results", branch=step.branch)
    check = forge.check_trial(step.number, many)
    assert not check.ok and "300 or more files" in check.reason


def test_check_trial_accepts_bot_data_but_not_code_under_campaigns(seeded: FakeGitHub, forge: GitHubForge) -> None:
    step = forge.open_step(request())
    data = seeded.seed(
        {"campaigns/c7/step-1/report.md": "# report\n", "campaigns/c7/step-1/trial.json": "{}\n"},
        "attune: report",
        branch=step.branch,
    )
    assert forge.check_trial(step.number, data).ok
    code = seeded.seed({"campaigns/c7/setup.py": "import os\n"}, "sneak", branch=step.branch)
    check = forge.check_trial(step.number, code)
    assert not check.ok and "campaigns/c7/setup.py" in check.reason


def test_check_default_run(seeded: FakeGitHub, forge: GitHubForge) -> None:
    head = seeded.head("main")
    check = forge.check_default_run(head, RECIPE_PATH)
    assert check.ok and check.recipe == RECIPE_PATH and check.pr == 0
    assert "not the head of main" in forge.check_default_run("a" * 40, RECIPE_PATH).reason
    assert "40 hexadecimal" in forge.check_default_run("$(id)", RECIPE_PATH).reason
    for bad in ("", "bot/cli.py", "recipes/../bot/x.yaml", "/etc/passwd.yaml", "recipes/x.yaml; rm -rf /"):
        assert "expected a .yaml file under recipes/" in forge.check_default_run(head, bad).reason
    assert "is not a file at" in forge.check_default_run(head, "recipes/missing.yaml").reason


def test_from_env_knows_whose_comments_to_trust() -> None:
    env = {"GITHUB_REPOSITORY": "acme/tuning", "GITHUB_TOKEN": TOKEN}
    assert GitHubForge.from_env(env).bot_login is None  # outside Actions: the caller says (tests, local use)
    assert GitHubForge.from_env(env | {"GITHUB_ACTIONS": "true"}).bot_login == "github-actions[bot]"
    app = env | {"GITHUB_ACTIONS": "true", "ATTUNE_GITHUB_TOKEN": "ghs_app", "ATTUNE_BOT_LOGIN": "attune-bot[bot]"}
    assert GitHubForge.from_env(app).bot_login == "attune-bot[bot]"
    assert GitHubForge.from_env(env | {"GITHUB_ACTIONS": "true", "ATTUNE_GITHUB_TOKEN": "ghs_app"}).bot_login is None


def test_permission_comes_from_the_collaborator_api(seeded: FakeGitHub, forge: GitHubForge) -> None:
    seeded.permissions.update({"maya": "maintain", "tri": "triage", "reader": "read", "writer": "write"})

    assert forge.permission("acme") == "admin"
    assert forge.permission("maya") == "write" and forge.can_write("maya")
    assert forge.permission("writer") == "write"
    assert forge.permission("tri") == "read" and not forge.can_write("tri")
    assert forge.permission("reader") == "read"
    assert forge.permission("stranger") == "none"
    calls = len(seeded.calls)
    assert forge.permission("../../admin") == "none" and len(seeded.calls) == calls  # not even asked


def test_dispatch_sends_string_inputs(seeded: FakeGitHub, forge: GitHubForge) -> None:
    forge.dispatch("trial.yml", "main", {"campaign": "c7", "pr": 3, "sha": "a" * 40, "dry": True})

    assert seeded.dispatches == [
        {
            "workflow": "trial.yml",
            "ref": "main",
            "inputs": {"campaign": "c7", "pr": "3", "sha": "a" * 40, "dry": "true"},
        }
    ]
    with pytest.raises(GithubException) as missing:
        forge.dispatch("nope.yml", "main", {})
    assert missing.value.status == 404
    with pytest.raises(ValueError, match="file name"):
        forge.dispatch("../trial.yml", "main", {})


def test_read_file_on_base_refs_and_large_files(seeded: FakeGitHub, forge: GitHubForge) -> None:
    big = "# big\n" + "x" * (1024 * 1024 + 10) + "\n"
    seeded.seed({"results/big.json": big}, "big")
    step = forge.open_step(request())

    assert forge.read_file(RECIPE_PATH) == RECIPE
    assert forge.read_file(RECIPE_PATH, step.branch) == set_one_lever(RECIPE, "compile", "true")
    assert forge.read_file("results/big.json") == big
    assert "git/get-blob" in seeded.operations()
    with pytest.raises(GitHubForgeError, match="not found"):
        forge.read_file("recipes/missing.yaml")
    with pytest.raises(GitHubForgeError, match="relative path"):
        forge.read_file("../etc/passwd")


def test_add_files_commits_on_the_step_branch_only_from_the_measured_head(
    seeded: FakeGitHub, forge: GitHubForge
) -> None:
    step = forge.open_step(request())
    record = '{"outcome": "ok", "tokens_per_s": 1234.5}\n'
    after = forge.add_files(step, {"results/c7/1.json": record}, "attune: c7 step 1 record")

    assert seeded.file("results/c7/1.json", step.branch) == record
    assert seeded.commits[after.head_sha].parents == [step.head_sha]
    assert seeded.file("results/c7/1.json") is None  # not on main

    with pytest.raises(GitHubForgeError, match="not adding files"):
        forge.add_files(step, {"results/c7/2.json": "{}"}, "stale step ref")


# -- untrusted text ---------------------------------------------------------------------------------------


def test_shell_and_expression_syntax_in_text_is_stored_inert(
    seeded: FakeGitHub, forge: GitHubForge, monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    canary = tmp_path / "pwned"
    nasty = f"$(touch {canary}) `touch {canary}` ${{{{ github.token }}}} '; touch {canary}; echo '"

    def no_processes(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"the forge started a process: {args!r}")

    monkeypatch.setattr(subprocess.Popen, "__init__", no_processes)
    monkeypatch.setattr("os.system", no_processes)
    short = "$(id) `id` ${{ github.token }}"
    step = forge.open_step(request(title=f"Step 1 {short}", body=f"Why: {nasty}"))
    forge.upsert_comment(step, "report", nasty)
    forge.close(step, nasty)

    pull = seeded.pulls[step.number]
    assert pull.title == f"Step 1 {short}"
    assert pull.body.startswith(f"Why: {nasty}")
    bodies = {c.body for c in seeded.comments.values()}
    assert bodies == {f"{marker('report')}\n{nasty}", f"{marker('closed')}\n{nasty}"}
    assert not canary.exists()


def test_markers_cannot_smuggle_html(forge: GitHubForge) -> None:
    with pytest.raises(ValueError, match="marker name"):
        forge.upsert_comment(1, "x --><script>", "body")


# -- the default recipe editor ----------------------------------------------------------------------------


def test_the_default_editor_is_bot_recipe_set_lever_text(seeded: FakeGitHub, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, str, str]] = []

    def spy(text: str, lever: str, value: str, *, source: str = "<recipe>") -> str:
        seen.append((lever, value, source))
        return set_one_lever(text, lever, value, source=source)

    try:
        import bot.core.recipe as recipe_module

        has_real = hasattr(recipe_module, "set_lever_text")
    except ImportError:
        has_real = False
    if has_real:
        monkeypatch.setattr(recipe_module, "set_lever_text", spy)
    else:  # bot.core.recipe is written by another engineer; stand in for it here only
        stub = types.ModuleType("bot.core.recipe")
        stub.set_lever_text = spy
        monkeypatch.setitem(sys.modules, "bot.core.recipe", stub)

    forge = GitHubForge(seeded.full_name, TOKEN, retry=None, seconds_between_requests=None, seconds_between_writes=None)
    forge.open_step(request())
    assert seen == [("compile", "true", RECIPE_PATH)]


def test_constructor_validates_its_arguments() -> None:
    with pytest.raises(ValueError, match="owner/name"):
        GitHubForge("not a repo", TOKEN)
    with pytest.raises(ValueError, match="merge_method"):
        GitHubForge("a/b", TOKEN, merge_method="octopus")
    with pytest.raises(ValueError, match="token"):
        GitHubForge("a/b", "")
    with pytest.raises(GitHubForgeError, match="GITHUB_REPOSITORY"):
        GitHubForge.from_env({})


def test_commit_exists_asks_for_the_commit_and_takes_only_a_full_sha(
    fake_github: FakeGitHub, forge: GitHubForge
) -> None:
    head = fake_github.head("main")
    assert forge.commit_exists(head) is True
    assert forge.commit_exists("0123456789abcdef" * 2 + "01234567") is False  # GitHub's 422: no commit for that sha
    assert [c.operation_id for c in fake_github.calls] == ["repos/get-commit", "repos/get-commit"]
    for not_a_sha in ("main", head.upper(), head + "\n", head[:12]):
        with pytest.raises(GitHubForgeError, match="expected 40 hexadecimal characters"):
            forge.commit_exists(not_a_sha)
    assert len(fake_github.calls) == 2


def test_find_data_pr_finds_the_bot_pull_request_from_a_branch_in_any_state(
    fake_github: FakeGitHub, forge: GitHubForge
) -> None:
    assert forge.find_data_pr("attune/leaderboard/1") is None
    ref = forge.open_data_pr(
        "attune/leaderboard/1", {"leaderboard.md": "new\n"}, "attune: refresh leaderboard.md", "body"
    )
    found = forge.find_data_pr("attune/leaderboard/1")
    assert found is not None and (found.number, found.head_sha, found.state) == (ref.number, ref.head_sha, "open")
    forge.close(ref, "not needed")
    closed = forge.find_data_pr("attune/leaderboard/1")
    assert closed is not None and closed.state == "closed" and forge.find_data_pr("attune/leaderboard/2") is None
