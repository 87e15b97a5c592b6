"""bot/github/github_ports.py as the campaign's state store on GitHub: a compare-and-swap on the records branch's
``state.json``, commands applied once, and identity that fails closed (against the spec-validated fake)."""

from __future__ import annotations

from pathlib import Path

import pytest
from forge_helpers import TOKEN, require

require("responses", "openapi_core")
from fake_github import FakeGitHub  # noqa: E402
from openapi_contract import Contract  # noqa: E402

from bot.forge.github import GitHubForge, GitHubForgeError  # noqa: E402
from bot.github import campaign_requests, comments  # noqa: E402
from bot.github.github_ports import GitHubPorts, StateConflict, load_state, parse_state, records_branch, render_state  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RECIPE = "recipes/llama3.1-405b/h200x128.yaml"
SOURCE = ROOT / "bot" / "bench" / "tasks" / "llama3.1-405b" / "h200x128.yaml"  # the benchmark task placed at RECIPE
FORM = (
    f"### Recipe path\n\n{RECIPE}\n\n### Budget (device-hours)\n\n300\n\n### Policy\n\nheuristic\n\n"
    "### Runner labels\n\ngpu\n\n### Bench steps\n\n_No response_"
)


@pytest.fixture
def gh(contract: Contract):
    fake = FakeGitHub(contract).start()
    fake.seed({RECIPE: SOURCE.read_text()})
    fake.workflows.update({"trial.yml", "leaderboard.yml"})
    fake.permissions["alice"] = "write"
    try:
        yield fake
    finally:
        fake.stop()
    fake.assert_contract_kept()


def forge_for(gh: FakeGitHub, bot_login: str | None) -> GitHubForge:
    return GitHubForge(
        gh.full_name, TOKEN, seconds_between_requests=None, seconds_between_writes=None, retry=None, bot_login=bot_login
    )


def started(gh: FakeGitHub) -> tuple[GitHubForge, int]:
    forge = forge_for(gh, gh.actor)
    number = gh.add_issue("tune it", FORM, user="alice", labels=["attune:campaign"])
    event = {
        "action": "opened",
        "issue": {
            "number": number,
            "title": "tune it",
            "body": FORM,
            "user": {"login": "alice"},
            "labels": [{"name": "attune:campaign"}],
        },
    }
    assert campaign_requests.handle(forge, event, lessons=[]).endswith("started")
    return forge, number


def command(gh: FakeGitHub, forge: GitHubForge, number: int, body: str, comment_id: int | None = None) -> str:
    cid = comment_id or gh.add_comment(number, body, user="alice")
    return comments.handle(
        forge,
        {
            "action": "created",
            "issue": {"number": number},
            "comment": {"id": cid, "body": body, "user": {"login": "alice"}},
        },
        lessons=[],
    )


def test_the_authoritative_state_is_on_the_records_branch_and_a_lost_race_is_refused(gh: FakeGitHub) -> None:
    forge, number = started(gh)
    a, b = load_state(forge, number), load_state(forge, number)  # two workflow runs read the same state
    cid = a.campaign.id
    assert gh.file(f"campaigns/{cid}/state.json", records_branch(cid)) is not None
    first = GitHubPorts(forge, a)
    first.stored = first.stored.model_copy(update={"runner_labels": ["gpu", "first"]})
    first.settle()
    second = GitHubPorts(forge, b)
    second.stored = second.stored.model_copy(update={"runner_labels": ["gpu", "second"]})
    with pytest.raises(StateConflict):
        second.settle()
    assert load_state(forge, number).runner_labels == ["gpu", "first"]  # the winner's write stands


def test_a_command_racing_another_writer_is_applied_once_to_the_state_that_won(gh: FakeGitHub, monkeypatch) -> None:
    forge, number = started(gh)
    budget = load_state(forge, number).campaign.budget
    real_settle = GitHubPorts.settle
    raced = []

    def settle_after_a_rival(self: GitHubPorts) -> None:
        if not raced:  # another run (a second budget command) writes between this run's read and its write
            raced.append(True)
            rival = GitHubPorts(forge, load_state(forge, number))
            rival.stored = rival.stored.model_copy(
                update={
                    "campaign": rival.stored.campaign.model_copy(update={"budget": rival.stored.campaign.budget + 7.0})
                }
            )
            real_settle(rival)
        real_settle(self)

    monkeypatch.setattr(GitHubPorts, "settle", settle_after_a_rival)
    assert command(gh, forge, number, "/attune budget +5") == "budget: done"
    assert raced and load_state(forge, number).campaign.budget == pytest.approx(budget + 7.0 + 5.0)


def test_a_redelivered_command_changes_nothing(gh: FakeGitHub) -> None:
    forge, number = started(gh)
    budget = load_state(forge, number).campaign.budget
    cid = gh.add_comment(number, "/attune budget +4", user="alice")
    assert command(gh, forge, number, "/attune budget +4", cid) == "budget: done"
    assert command(gh, forge, number, "/attune budget +4", cid).startswith("ignored: command")
    assert load_state(forge, number).campaign.budget == pytest.approx(budget + 4.0)
    assert cid in load_state(forge, number).handled


def test_no_state_is_trusted_when_the_bots_login_is_unknown(gh: FakeGitHub) -> None:
    forge, number = started(gh)
    with pytest.raises(GitHubForgeError, match="login is unknown"):
        load_state(forge_for(gh, None), number)


def test_only_the_last_state_block_of_the_bots_comment_is_parsed(gh: FakeGitHub) -> None:
    forge, number = started(gh)
    stored = load_state(forge, number)
    forged = stored.model_copy(update={"issue": 999})
    body = f"someone quoted an old state:\n\n{render_state(forged)}\n\n{render_state(stored)}"
    assert parse_state(body).issue == number


def test_permission_is_checked_before_a_stored_campaign_is_reconciled(gh: FakeGitHub) -> None:
    forge, number = started(gh)
    dispatches = len(gh.dispatches)
    event = {
        "action": "labeled",
        "issue": {
            "number": number,
            "title": "tune it",
            "body": FORM,
            "user": {"login": "mallory"},
            "labels": [{"name": "attune:campaign"}],
        },
    }
    assert campaign_requests.handle(forge, event, lessons=[]).startswith("refused")
    assert len(gh.dispatches) == dispatches


@pytest.mark.parametrize("event", ["edited", "deleted", "on-a-pull-request"])
def test_an_edited_or_deleted_comment_or_one_on_a_pull_request_is_no_command(gh: FakeGitHub, event: str) -> None:
    """campaign.yml lets only new comments on issues through, but the handler does not rely on the workflow's filter:
    ``/attune stop`` edited into an old comment, a deleted one, or one on a step PR stops nothing."""
    forge, number = started(gh)
    before = load_state(forge, number)
    cid = gh.add_comment(number, "/attune stop", user="alice")
    issue: dict = {"number": number}
    if event == "on-a-pull-request":
        issue["pull_request"] = {"url": f"https://api.github.com/repos/{gh.full_name}/pulls/{number}"}
    payload = {
        "action": "created" if event == "on-a-pull-request" else event,
        "issue": issue,
        "comment": {"id": cid, "body": "/attune stop", "user": {"login": "alice"}},
    }
    assert comments.handle(forge, payload, lessons=[]).startswith("ignored: a comment")
    after = load_state(forge, number)
    assert after.campaign == before.campaign and cid not in after.handled
