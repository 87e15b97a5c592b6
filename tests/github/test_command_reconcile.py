"""bot/github/comments.py: GitHub keeps one pending run per concurrency group, so a command's own run may be replaced
and never come; the next run applies every writer's unhandled ``/attune`` command, oldest first, each once (against
the spec-validated fake)."""

from __future__ import annotations

import pytest
from forge_helpers import require

require("responses", "openapi_core")
import test_state_store  # noqa: E402
from fake_github import FakeGitHub  # noqa: E402
from test_state_store import command, started  # noqa: E402 - helpers of the state store

from bot.github.github_ports import load_state  # noqa: E402
from bot.github.router import nudge  # noqa: E402

gh = test_state_store.gh  # the state store's fixture, found by pytest under this name


def replaced(gh: FakeGitHub, number: int, body: str, user: str = "alice") -> int:
    """A comment whose own campaign.yml run never came (GitHub replaced it in the group)."""
    return gh.add_comment(number, body, user=user)


def test_the_next_run_applies_every_writers_unhandled_command_in_order_and_no_one_elses(gh: FakeGitHub) -> None:
    forge, number = started(gh)
    gh.permissions["bob"] = "read"  # a member (author_association passes) without write permission
    before = load_state(forge, number)
    budget = replaced(gh, number, "/attune budget +5")
    replaced(gh, number, "/attune stop", user="mallory")  # no association: never even asked about
    replaced(gh, number, "/attune budget +50", user="bob")
    replaced(gh, number, "looks good")
    stop = replaced(gh, number, "/attune stop")

    said = command(gh, forge, number, "/attune budget +1")

    assert (
        said == f"budget: done; unhandled commands applied in order: budget (comment {budget}), stop (comment {stop})"
    )
    after = load_state(forge, number)
    assert after.handled[-3:] == [budget, stop, max(gh.comments)], after.handled
    assert after.campaign.budget >= before.campaign.budget + 5.0 and after.campaign.budget < before.campaign.budget + 50
    assert after.campaign.stop_requested or after.campaign.phase == "finished"
    # a re-delivery of any of them changes nothing
    assert command(gh, forge, number, "/attune stop", stop).startswith(f"ignored: command {stop} was already applied")
    assert load_state(forge, number).campaign == after.campaign


def test_a_manual_nudge_applies_unhandled_commands_before_it_advances(gh: FakeGitHub) -> None:
    forge, number = started(gh)
    before = load_state(forge, number).campaign.budget
    first, second = replaced(gh, number, "/attune budget +3"), replaced(gh, number, "/attune budget +4")
    said = nudge(forge, {"inputs": {"issue": str(number)}}, lessons=[])
    assert said.endswith(f"unhandled commands applied in order: budget (comment {first}), budget (comment {second})")
    after = load_state(forge, number)
    assert after.campaign.budget == pytest.approx(before + 7.0) and after.handled[-2:] == [first, second]


def test_an_edited_comment_is_not_applied_as_a_command(gh: FakeGitHub) -> None:
    forge, number = started(gh)
    edited = replaced(gh, number, "/attune budget +9")
    gh.comments[edited].updated_at = "2099-01-01T00:00:00Z"  # edited after it was written
    before = load_state(forge, number).campaign.budget
    assert command(gh, forge, number, "/attune budget +1") == "budget: done"
    after = load_state(forge, number)
    assert after.campaign.budget == pytest.approx(before + 1.0) and edited not in after.handled
