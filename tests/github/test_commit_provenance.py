"""The bot commits only on the head it expects and merges only its own commits (against the OpenAPI-validated fake).

A writer who pushes to a step branch, or to ``attune/leaderboard/<run>``, inside the window between the bot's look at
the head and its commit must not get the bot's commit on top of theirs (the Git Data API commit names its parent, the
ref moves only as a fast-forward), and a head that carries a commit that is not the bot's own since the default branch
is never merged.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "forge"))
from forge_helpers import TOKEN, require, set_one_lever  # noqa: E402

require("responses", "openapi_core")
from fake_github import FakeGitHub  # noqa: E402

from bot.forge.base import StepRequest  # noqa: E402
from bot.forge.github import GitHubForge, GitHubForgeError, MergeRefused  # noqa: E402
from bot.github.leaderboard_pr import FILE, publish  # noqa: E402

RECIPE = "recipes/m/r.yaml"
TEXT = "levers:\n  compile: false\n"


@pytest.fixture
def gh(contract):
    fake = FakeGitHub(contract).start()
    fake.seed({RECIPE: TEXT, FILE: "# old\n"})
    try:
        yield fake
    finally:
        fake.stop()
    fake.assert_contract_kept()


@pytest.fixture
def forge(gh: FakeGitHub) -> GitHubForge:
    return GitHubForge(
        gh.full_name,
        TOKEN,
        seconds_between_requests=None,
        seconds_between_writes=None,
        retry=None,
        bot_login=gh.actor,
        edit_recipe=set_one_lever,
    )


def open_step(forge: GitHubForge):
    req = StepRequest(campaign="c1", n=1, recipe_path=RECIPE, lever="compile", value="true", title="t", body="b")
    return forge.open_step(req)


def push(gh: FakeGitHub, branch: str, path: str = "recipes/m/evil.yaml") -> str:
    """A writer's push (unsigned, linked to their account)."""
    return gh.seed({path: "pwned: true\n"}, "writer's commit", branch=branch, author="mallory")


def test_a_push_inside_the_window_gets_no_bot_commit_on_top(gh: FakeGitHub, forge: GitHubForge) -> None:
    step = open_step(forge)
    pushed: list[str] = []
    # right after the bot read the branch head (the one check the old code made), a writer pushes onto it
    gh.after("git/get-ref", lambda f: pushed.append(push(f, step.branch)))
    with pytest.raises(GitHubForgeError, match="moved away"):
        forge.add_files(step, {"campaigns/c1/step-1/report.md": "# report\n"}, "attune: report")
    assert gh.head(step.branch) == pushed[0]  # the writer's commit is the head; nothing of the bot's is on it
    update = [c for c in gh.calls if c.operation_id == "git/update-ref"][-1]
    assert update.status == 422 and update.body["force"] is False
    assert not [c for c in gh.calls if c.operation_id == "repos/create-or-update-file-contents"]


def test_the_bots_commit_names_the_measured_head_as_its_parent(gh: FakeGitHub, forge: GitHubForge) -> None:
    step = open_step(forge)
    out = forge.add_files(step, {"a/b.md": "x\n", "campaigns/c1/step-1/r.json": "{}\n"}, "attune: results")
    made = gh.commits[out.head_sha]
    assert made.parents == [step.head_sha] and made.author == gh.actor and made.verified  # one commit, the bot's
    assert forge.add_files(out, {"a/b.md": "x\n"}, "again") == out  # unchanged files add nothing
    assert forge.foreign_commits("main", out.head_sha) == []


def test_a_head_with_a_writers_commit_below_the_bots_is_not_merged(gh: FakeGitHub, forge: GitHubForge) -> None:
    step = open_step(forge)
    push(gh, step.branch)  # what the old Contents-API write let happen: a writer's commit, then the bot's on top
    head = gh.seed({"campaigns/c1/step-1/report.md": "r\n"}, "attune: report", branch=step.branch, by_bot=True)
    with pytest.raises(MergeRefused, match="not the bot's own"):
        forge.merge(step.model_copy(update={"head_sha": head}), "merge")
    assert "pulls/merge" not in gh.operations() and gh.pulls[step.number].merged_at is None


def test_the_bots_own_head_is_merged(gh: FakeGitHub, forge: GitHubForge) -> None:
    step = forge.add_files(open_step(forge), {"campaigns/c1/step-1/report.md": "r\n"}, "attune: report")
    assert forge.merge(step, "merge").state == "merged"
    assert gh.file("campaigns/c1/step-1/report.md") == "r\n"


def test_a_push_to_the_leaderboard_branch_is_never_merged(gh: FakeGitHub, forge: GitHubForge) -> None:
    before = gh.head("main")
    # the moment the branch exists, a writer pushes onto it
    gh.after("git/create-ref", lambda f: push(f, "attune/leaderboard/77-1", "recipes/m/x.yaml"))
    out = publish(forge, "# new\n", run="77-1")
    assert "closed unmerged" in out
    assert gh.head("main") == before and gh.file("recipes/m/x.yaml") is None
    (pull,) = gh.pulls.values()
    # the bot's one commit sits directly on main's head: nothing of the writer's is under it
    ours = [c for c in gh.commits.values() if c.message == "attune: refresh leaderboard.md"]
    assert len(ours) == 1 and ours[0].parents == [before] and pull.merged_at is None
