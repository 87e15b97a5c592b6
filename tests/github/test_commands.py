"""Comment commands: `/attune stop`, `/attune resume`, `/attune budget +H`."""

from __future__ import annotations

import pytest

from bot.github.commands import Command, CommandError, parse_command


@pytest.mark.parametrize(
    ("comment", "expected"),
    [
        ("/attune stop", Command(kind="stop")),
        ("  /attune   resume  \n\nbecause the cluster is back", Command(kind="resume")),
        ("/attune budget +4", Command(kind="budget", hours=4.0)),
        ("\n\n/attune budget +0.5\r\nthanks", Command(kind="budget", hours=0.5)),
    ],
)
def test_commands(comment: str, expected: Command) -> None:
    assert parse_command(comment) == expected


@pytest.mark.parametrize("comment", [None, "", "looks good!", "please /attune stop", "> /attune stop", "/attuned stop"])
def test_ordinary_comments_are_not_commands(comment: str | None) -> None:
    assert parse_command(comment) is None


@pytest.mark.parametrize(
    ("comment", "says"),
    [
        ("/attune", "needs a command"),
        ("/attune stop now", "takes nothing after it"),
        ("/attune budget", "takes one amount"),
        ("/attune budget 4", "expected `+H`"),
        ("/attune budget -4", "expected `+H`"),
        ("/attune budget +0", "more than 0"),
        ("/attune budget +501", "at most 500"),
        ("/attune budget +1e3", "expected `+H`"),
        ("/attune budget +$(id)", "expected `+H`"),
        ("/attune merge", "unknown command"),
        ("/attune STOP", "unknown command"),
    ],
)
def test_malformed_commands_say_what_is_wrong(comment: str, says: str) -> None:
    result = parse_command(comment)
    assert isinstance(result, CommandError) and says in result.message


def test_error_messages_do_not_echo_markdown() -> None:
    result = parse_command("/attune `@everyone` <b>")
    assert isinstance(result, CommandError)
    assert "@" not in result.message and "<b>" not in result.message
