"""Comment commands on a campaign issue: ``/attune stop``, ``/attune resume``, ``/attune budget +H``.

Only the first non-empty line of a comment is read, and only when it starts with ``/attune``; the rest of the
comment is free text for people. ``parse_command`` answers None for an ordinary comment, a ``Command``, or a
``CommandError`` saying what was wrong. Whether the commenter may steer the campaign is decided elsewhere, from
the collaborator-permission API, never from the comment itself.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, Field

from bot.github.request import MAX_BUDGET_HOURS, shown

PREFIX = "/attune"
USAGE = "`/attune stop`, `/attune resume` or `/attune budget +H` (H device-hours to add, e.g. `+4`)"
_HOURS = re.compile(r"^\+([0-9]+(\.[0-9]+)?)$")


class Command(BaseModel):
    """One parsed command."""

    kind: Literal["stop", "resume", "budget"]
    hours: float | None = Field(default=None, gt=0, le=MAX_BUDGET_HOURS)


class CommandError(BaseModel):
    """A comment addressed to the bot that is not a valid command."""

    message: str


def parse_command(comment: str | None) -> Command | CommandError | None:
    """The command in ``comment``, a ``CommandError``, or None when the comment is not addressed to the bot."""
    lines = [line.strip() for line in (comment or "").splitlines() if line.strip()]
    if not lines:
        return None
    words = lines[0].split()
    if words[0] != PREFIX:
        return None
    if len(words) == 1:
        return CommandError(message=f"`{PREFIX}` needs a command: {USAGE}")
    verb, args = words[1], words[2:]
    if verb in ("stop", "resume"):
        if args:
            return CommandError(message=f"`{PREFIX} {verb}` takes nothing after it, got {shown(' '.join(args))}")
        return Command(kind=verb)
    if verb == "budget":
        if len(args) != 1:
            return CommandError(message=f"`{PREFIX} budget` takes one amount like `+4`; usage: {USAGE}")
        found = _HOURS.match(args[0])
        if not found:
            return CommandError(message=f"budget amount {shown(args[0])}: expected `+H` with H a number, e.g. `+4`")
        hours = float(found.group(1))
        if not 0 < hours <= MAX_BUDGET_HOURS:
            return CommandError(
                message=f"budget amount {shown(args[0])}: expected more than 0 and at most {MAX_BUDGET_HOURS:g} hours"
            )
        return Command(kind="budget", hours=hours)
    return CommandError(message=f"unknown command {shown(verb)}; use {USAGE}")
