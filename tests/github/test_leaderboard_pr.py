"""bot/github/leaderboard_pr.py against the OpenAPI-validated GitHub fake: ``leaderboard.md`` reaches the default
branch only through a bot pull request that changes that one file, carries ``attune/gate`` and is merged at its
head -- never a push to the default branch, so a protected one needs no bypass actor."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "forge"))
from forge_helpers import TOKEN, require  # noqa: E402

require("responses", "openapi_core")
from fake_github import FakeGitHub  # noqa: E402

from bot.forge.github import GATE_CONTEXT, GitHubForge  # noqa: E402
from bot.github.leaderboard_pr import FILE, publish  # noqa: E402

OLD = "# TrainingThroughputBench\n\nNo measured result has landed yet.\n"
NEW = "# TrainingThroughputBench\n\n| model | tokens/s/device |\n|---|---|\n| llama3-tiny | 1,234 |\n"


@pytest.fixture
def gh(contract):
    fake = FakeGitHub(contract).start()
    fake.seed({FILE: OLD, "results/llama3-tiny/cpu/r1.json": "{}\n"})
    try:
        yield fake
    finally:
        fake.stop()
    fake.assert_contract_kept()


@pytest.fixture
def forge(gh: FakeGitHub) -> GitHubForge:
    return GitHubForge(
        gh.full_name, TOKEN, seconds_between_requests=None, seconds_between_writes=None, retry=None, bot_login=gh.actor
    )


def writes_to_main(gh: FakeGitHub) -> list[str]:
    """Calls that would change the default branch other than a pull request's merge."""
    return [
        f"{c.method} {c.path}"
        for c in gh.calls
        if c.operation_id in ("repos/create-or-update-file-contents", "git/update-ref", "git/create-ref")
        and (isinstance(c.body, dict) and (c.body.get("branch") == "main" or c.body.get("ref") == "refs/heads/main"))
    ]


def test_a_new_leaderboard_lands_through_a_bot_pr_merged_at_its_gated_head(gh: FakeGitHub, forge: GitHubForge) -> None:
    before = gh.head("main")
    out = publish(forge, NEW, run="4711-1")
    (pull,) = gh.pulls.values()
    assert out == f"{FILE} refreshed on main through PR #{pull.number}"
    assert (
        pull.head_ref == "attune/leaderboard/4711-1"
        and pull.merged_at is not None
        and "attune" in gh.issues[pull.number].labels
    )
    assert gh.file(FILE) == NEW and before in gh._ancestors(gh.head("main"))
    # the PR changed exactly leaderboard.md; attune/gate success on the head it was merged at
    (merge,) = [c for c in gh.calls if c.operation_id == "pulls/merge"]
    head = merge.body["sha"]
    assert gh.commits[head].tree == {**gh.commits[before].tree, FILE: NEW}
    assert [(s.sha, s.state) for s in gh.statuses if s.context == GATE_CONTEXT] == [(head, "success")]
    assert "no recipe changed" in gh.statuses[0].description
    assert writes_to_main(gh) == []  # nothing pushed to main itself


def test_an_unchanged_leaderboard_opens_nothing(gh: FakeGitHub, forge: GitHubForge) -> None:
    assert publish(forge, OLD, run="1") == f"{FILE} is up to date on main; nothing to merge"
    assert gh.pulls == {} and gh.statuses == [] and set(gh.refs) == {"heads/main"}


def test_a_branch_someone_pushed_onto_is_closed_unmerged(gh: FakeGitHub, forge: GitHubForge) -> None:
    def sneak(fake: FakeGitHub) -> None:  # right after the bot's commit, a person pushes code onto its branch
        fake.seed({"bot/cli/__init__.py": "import os\n"}, "a person's push", branch="attune/leaderboard/7-1")

    gh.after("pulls/create", sneak)
    out = publish(forge, NEW, run="7-1")
    (pull,) = gh.pulls.values()
    assert out.startswith(f"PR #{pull.number} closed unmerged:") and "not merging an unmeasured commit" in out
    assert pull.state == "closed" and pull.merged_at is None and gh.file(FILE) == OLD
    # the status is on the bot's own commit only: the person's head carries none, so no one can merge it as gated
    (status,) = [s for s in gh.statuses if s.context == GATE_CONTEXT]
    assert status.sha != gh.head_sha(pull) and gh.commits[status.sha].message == "attune: refresh leaderboard.md"


def test_a_rerun_never_builds_on_an_existing_branch(gh: FakeGitHub, forge: GitHubForge) -> None:
    from bot.forge.github import GitHubForgeError

    gh.create_branch("attune/leaderboard/9-1")
    with pytest.raises(GitHubForgeError, match="exists already"):
        publish(forge, NEW, run="9-1")
    assert gh.pulls == {} and gh.file(FILE) == OLD


def test_a_run_id_that_is_no_run_id_is_refused_before_anything_is_written(gh: FakeGitHub, forge: GitHubForge) -> None:
    with pytest.raises(ValueError, match="expected the workflow run id"):
        publish(forge, NEW, run="../main")
    assert gh.pulls == {} and set(gh.refs) == {"heads/main"}


def test_without_a_run_id_each_content_gets_a_branch_of_its_own(gh: FakeGitHub, forge: GitHubForge) -> None:
    """Without a run id every branch was ``attune/leaderboard/0``: the second regeneration collided with the first."""
    from bot.core.records import content_hash

    head = gh.head("main")
    publish(forge, NEW)
    newer = NEW + "| llama3-8b | 2,345 |\n"
    assert publish(forge, newer).startswith(f"{FILE} refreshed on main through PR #")
    first, second = gh.pulls.values()
    assert first.head_ref == f"attune/leaderboard/{head[:12]}-{content_hash(NEW)[:12]}"
    assert second.head_ref.endswith(f"-{content_hash(newer)[:12]}") and second.head_ref != first.head_ref
    assert first.merged_at is not None and second.merged_at is not None and gh.file(FILE) == newer


@pytest.mark.parametrize("run", ["", "5-1"])
def test_a_rerun_on_the_same_content_reports_the_open_pr_of_the_earlier_run(
    gh: FakeGitHub, forge: GitHubForge, run: str
) -> None:
    """The earlier run died between opening its pull request and merging it. A rerun naming the same branch reports
    that pull request (whose head it did not make this time, so it neither gates nor merges it) and opens no other."""

    def lost(*args: object, **kwargs: object) -> None:
        raise ConnectionError("the runner lost its network")

    forge.set_status = lost  # type: ignore[method-assign]
    with pytest.raises(ConnectionError):
        publish(forge, NEW, run=run)
    del forge.set_status
    (pull,) = gh.pulls.values()
    calls = len(gh.calls)
    said = publish(forge, NEW, run=run)
    assert (
        said == f"{FILE}: PR #{pull.number} from {pull.head_ref} is open already (an earlier run); not opening another"
    )
    assert len(gh.pulls) == 1 and pull.state == "open" and gh.statuses == [] and gh.file(FILE) == OLD
    assert {c.method for c in gh.calls[calls:]} == {"GET"}  # looked, wrote nothing


def test_a_rerun_after_a_refused_merge_opens_nothing_again(gh: FakeGitHub, forge: GitHubForge) -> None:
    def sneak(fake: FakeGitHub) -> None:  # a person pushes onto the bot's branch: the merge is refused, the PR closed
        (pull,) = fake.pulls.values()
        fake.seed({"bot/cli/__init__.py": "import os\n"}, "a person's push", branch=pull.head_ref)

    gh.after("pulls/create", sneak)
    assert "closed unmerged" in publish(forge, NEW)
    (pull,) = gh.pulls.values()
    assert (
        publish(forge, NEW)
        == f"{FILE}: PR #{pull.number} from {pull.head_ref} was closed by an earlier run; nothing to do"
    )
    assert len(gh.pulls) == 1 and gh.file(FILE) == OLD


@pytest.mark.parametrize("run", ["٣١", "31²", "0-", "-1", "1--2"])
def test_a_run_id_must_be_ascii_digits(gh: FakeGitHub, forge: GitHubForge, run: str) -> None:
    with pytest.raises(ValueError, match=r"expected the workflow run id \(digits 0-9, '-'\)"):
        publish(forge, NEW, run=run)
    assert gh.pulls == {} and set(gh.refs) == {"heads/main"}
