"""Campaign request scenarios against the spec-validated GitHub fake (tests/forge)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "forge"))
from forge_helpers import TOKEN, require  # noqa: E402

require("responses", "openapi_core")
from fake_github import FakeGitHub  # noqa: E402
from openapi_contract import Contract  # noqa: E402

from bot.forge.github import GitHubForge  # noqa: E402
from bot.github import campaign_requests  # noqa: E402
from bot.github.github_ports import load_state  # noqa: E402

RECIPE = "recipes/llama3-tiny/cpu.yaml"
FORM = (
    f"### Recipe path\n\n{RECIPE}\n\n### Budget (device-hours)\n\n1\n\n### Policy\n\nheuristic\n\n"
    "### Runner labels\n\ncpu\n\n### Bench steps\n\n_No response_"
)


@pytest.fixture
def gh(contract: Contract):
    fake = FakeGitHub(contract).start()
    fake.seed({RECIPE: (ROOT / RECIPE).read_text()})
    fake.workflows.add("trial.yml")
    fake.permissions["alice"] = "write"
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


def _event(gh: FakeGitHub, number: int, action: str = "opened") -> dict:
    issue = gh.issues[number]
    return {
        "action": action,
        "issue": {
            "number": number,
            "title": issue.title,
            "body": issue.body,
            "user": {"login": issue.user},
            "labels": [{"name": "attune:campaign"}],
        },
    }


def _bot_comments(gh: FakeGitHub, number: int) -> list[str]:
    return [c.body for c in gh.comments.values() if c.issue == number and c.user == gh.actor]


def test_a_maintainer_starts_a_campaign_state_stored_and_baseline_dispatched(
    gh: FakeGitHub, forge: GitHubForge
) -> None:
    n = gh.add_issue("tune $(rm -rf /) `id` ${{ secrets.X }}", FORM, user="alice", labels=["attune:campaign"])
    out = campaign_requests.handle(forge, _event(gh, n), lessons=[])
    assert "started" in out
    stored = load_state(forge, n)
    assert stored is not None and stored.campaign.pending[0].type == "run_baseline"
    assert len(gh.dispatches) == 1
    inputs = gh.dispatches[0]["inputs"]
    assert inputs["pr"] == "0" and inputs["campaign"] == stored.campaign.id and inputs["issue"] == str(n)
    before = len(_bot_comments(gh, n))
    # re-delivered: no second dispatch of a different kind, no new comment
    campaign_requests.handle(forge, _event(gh, n, "labeled"), lessons=[])
    assert len(_bot_comments(gh, n)) == before


def test_a_non_collaborator_gets_one_polite_refusal(gh: FakeGitHub, forge: GitHubForge) -> None:
    n = gh.add_issue("please", FORM, user="mallory", labels=["attune:campaign"])
    for _ in range(2):
        assert campaign_requests.handle(forge, _event(gh, n)).startswith("refused")
    comments = _bot_comments(gh, n)
    assert len(comments) == 1 and "Thank you" in comments[0]
    assert gh.dispatches == [] and set(gh.refs) == {"heads/main"}


def test_a_bad_form_gets_one_comment_and_changes_nothing(gh: FakeGitHub, forge: GitHubForge) -> None:
    n = gh.add_issue("bad", FORM.replace("\n1\n", "\nlots\n"), user="alice", labels=["attune:campaign"])
    campaign_requests.handle(forge, _event(gh, n))
    campaign_requests.handle(forge, _event(gh, n))
    comments = _bot_comments(gh, n)
    assert len(comments) == 1 and "Budget" in comments[0]
    assert gh.dispatches == [] and load_state(forge, n) is None
