"""Hidden markers and size caps for the text the bot writes on a forge.

A marker is an HTML comment, ``<!-- attune:<name> -->``, that GitHub renders as nothing. The bot finds its own
comment (or a step's pull request) again by the marker, so a comment is edited in place instead of re-posted and a
resumed driver recognises a step it opened before. GitHub refuses bodies over 65,536 characters, so every body is
capped here, with a visible note saying how much was cut.
"""

from __future__ import annotations

import re

GITHUB_BODY_LIMIT = 65_536  # "Body is too long (maximum is 65536 characters)"
STATUS_DESCRIPTION_LIMIT = 140  # commit status descriptions are cut by GitHub at 140 characters
TITLE_LIMIT = 256  # pull request / issue titles

_MARKER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/=-]*$")


def marker(name: str) -> str:
    """The hidden marker for ``name``; a name is letters, digits and ``._:/=-`` (never ``--``)."""
    if not _MARKER_NAME.match(name) or "--" in name:
        raise ValueError(
            f"marker name {name!r}: expected letters, digits and '._:/=-' (no '--', no spaces), "
            "so that it stays one inert HTML comment"
        )
    return f"<!-- attune:{name} -->"


def step_marker(campaign: str, n: int) -> str:
    """The marker a step's pull request body carries: ``<!-- attune:step:<campaign>/<n> -->``."""
    return marker(f"step:{campaign}/{n}")


def truncation_note(cut: int) -> str:
    return (
        f"\n\n---\n*ATTUNE: {cut:,} characters were cut here to stay under GitHub's "
        f"{GITHUB_BODY_LIMIT:,}-character limit; the full report is in the run record.*"
    )


def cap(text: str, limit: int = GITHUB_BODY_LIMIT) -> str:
    """``text`` cut to at most ``limit`` characters, ending with a note when anything was cut.

    A cut inside a fenced code block closes the fence, so the note stays readable.
    """
    if len(text) <= limit:
        return text
    # The note's length depends on the number it prints; reserve room for the longest one.
    room = limit - len(truncation_note(len(text))) - len("\n```")
    if room <= 0:
        raise ValueError(f"limit {limit} leaves no room for the truncation note")
    kept = text[:room]
    if kept.count("```") % 2 == 1:
        kept += "\n```"
    return kept + truncation_note(len(text) - room)


def with_marker(name: str, body: str, limit: int = GITHUB_BODY_LIMIT) -> str:
    """``body`` carrying marker ``name`` on its first line, capped to ``limit`` characters in all."""
    head = marker(name) + "\n"
    return head + cap(body, limit - len(head))


def one_line(text: str, limit: int) -> str:
    """``text`` as one line of at most ``limit`` characters (for status descriptions and titles)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
