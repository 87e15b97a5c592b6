"""The campaign state on the records branch is trusted only if every commit on it since the head the bot last verified
is the bot's own (against the OpenAPI-validated fake): a writer's push hidden under the bot's next commit is caught."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "github"))
import test_state_store  # noqa: E402
from test_state_store import command, started  # noqa: E402

from bot.forge.github import GitHubForgeError  # noqa: E402
from bot.github.github_ports import GitHubPorts, load_state, parse_state, records_branch  # noqa: E402


@pytest.fixture
def gh(contract):
    """The state-store tests' fake repository (a campaign's recipe seeded, trial.yml known, alice a writer)."""
    yield from test_state_store.gh.__wrapped__(contract)


def forged(gh, cid: str, budget: float) -> str:
    """A writer's push that raises the budget in state.json, unsigned under their own account."""
    branch, path = records_branch(cid), f"campaigns/{cid}/state.json"
    data = json.loads(gh.file(path, branch))
    data["campaign"]["budget"] = budget
    return gh.seed({path: json.dumps(data)}, "tweak", branch=branch, author="mallory")


def test_a_push_under_the_bots_next_commit_is_not_trusted(gh) -> None:
    forge, number = started(gh)
    cid = load_state(forge, number).campaign.id
    forged(gh, cid, 1e6)
    # the bot's next commit lands on top (as a Contents-API write did): the head commit alone looks like the bot's
    gh.seed({f"campaigns/{cid}/x.json": "{}"}, "attune: record", branch=records_branch(cid), by_bot=True)
    with pytest.raises(GitHubForgeError, match=r"not trusted: .*mallory"):
        load_state(forge, number)


def test_the_bot_never_commits_on_a_records_head_it_did_not_verify(gh) -> None:
    forge, number = started(gh)
    ports = GitHubPorts(forge, load_state(forge, number))
    cid = ports.stored.campaign.id
    pushed = forged(gh, cid, 1e6)  # after this run read the state
    with pytest.raises(GitHubForgeError, match="moved away"):
        ports.put(cid, "calibration.json", "{}\n")
    assert gh.head(records_branch(cid)) == pushed


def test_the_bots_own_history_stays_trusted_and_the_comment_names_its_head(gh) -> None:
    forge, number = started(gh)
    assert command(gh, forge, number, "/attune budget +5") == "budget: done"
    stored = load_state(forge, number)
    view = parse_state(next(c.body for c in gh.comments.values() if c.user == gh.actor and "attune:state" in c.body))
    assert view.records_head and view.records_head in gh._ancestors(gh.head(records_branch(stored.campaign.id)))
    assert forge.foreign_commits(view.records_head, gh.head(records_branch(stored.campaign.id))) == []
