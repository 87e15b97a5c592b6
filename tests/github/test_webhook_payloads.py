"""The request and command parsers on real-shaped webhook payloads (``@octokit/webhooks-examples``, pinned in
package.json): every example body is handled without an exception, and a form/command put into an example payload
is read back."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest

from bot.github import comments
from bot.github.commands import Command, parse_command
from bot.github.request import CampaignRequest, RequestError, validate_request

EXAMPLES = Path(__file__).resolve().parents[2] / "node_modules/@octokit/webhooks-examples/api.github.com/index.json"
FORM = (
    "### Recipe path\n\nrecipes/llama3-tiny/cpu.yaml\n\n### Budget (device-hours)\n\n1\n\n### Policy\n\nheuristic\n\n"
    "### Runner labels\n\ncpu\n\n### Bench steps\n\n_No response_"
)


@pytest.fixture(scope="module")
def examples() -> dict[str, list[dict[str, Any]]]:
    if not EXAMPLES.is_file():
        reason = "node_modules/@octokit/webhooks-examples is missing: run `npm ci --ignore-scripts` at the repo root"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    return {entry["name"]: entry["examples"] for entry in json.loads(EXAMPLES.read_text())}


def test_issue_bodies_of_every_example_are_answered_not_raised(
    examples: dict[str, list[dict[str, Any]]],
) -> None:
    bodies = [e["issue"].get("body") for e in examples["issues"] if "issue" in e]
    assert len(bodies) > 20
    assert all(isinstance(validate_request(body), RequestError) for body in bodies)


def test_a_campaign_form_in_an_opened_issue_payload(examples: dict[str, list[dict[str, Any]]]) -> None:
    event = copy.deepcopy(next(e for e in examples["issues"] if e["action"] == "opened"))
    event["issue"]["body"] = FORM
    request = validate_request(event["issue"]["body"])
    assert isinstance(request, CampaignRequest) and request.runner_labels == ["cpu"]


def test_comment_examples_are_not_commands_until_they_are(examples: dict[str, list[dict[str, Any]]]) -> None:
    comments = examples["issue_comment"]
    assert all(parse_command(e["comment"]["body"]) is None for e in comments)
    event = copy.deepcopy(comments[0])
    event["comment"]["body"] = "/attune budget +2\n\nGPUs are free tonight."
    assert parse_command(event["comment"]["body"]) == Command(kind="budget", hours=2.0)


class UntouchedForge:
    """A forge an ignored event may not touch at all."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"an ignored comment event asked the forge for {name}")


class ReadOnlyForge:
    """A forge on which the commenter has no write permission: the first question a command asks."""

    def can_write(self, user: str) -> bool:
        return False


def test_only_a_comment_created_on_an_issue_is_read_as_a_command(
    examples: dict[str, list[dict[str, Any]]],
) -> None:
    """Every ``issue_comment`` example with ``/attune stop`` put in it: an edited or deleted comment, or a new one on a
    pull request, is ignored before the forge is asked anything; a new one on an issue goes on to the permission check."""
    events = copy.deepcopy(examples["issue_comment"])
    assert {e["action"] for e in events} == {"created", "edited", "deleted"}
    for event in events:
        event["comment"]["body"] = "/attune stop"
        login = event["comment"]["user"]["login"]
        if event["action"] != "created":
            assert (
                comments.handle(UntouchedForge(), event)
                == f"ignored: a comment {event['action']!r} event, only a created comment is a command"
            )
            continue
        assert comments.handle(ReadOnlyForge(), event) == f"ignored: {login} has no write permission"
        event["issue"]["pull_request"] = {"url": event["issue"]["url"].replace("/issues/", "/pulls/")}
        assert (
            comments.handle(UntouchedForge(), event) == "ignored: a comment on a pull request, not on a campaign issue"
        )
