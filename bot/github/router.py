"""GitHub event routing, bedevere-style: the event name picks one small handler.

| event | handler |
|---|---|
| ``issues`` (opened, labelled) | :mod:`bot.github.campaign_requests` |
| ``issue_comment`` (``/attune ...``) | :mod:`bot.github.comments` |
| ``workflow_dispatch`` (a manual nudge) | :func:`nudge` (applies unhandled ``/attune`` commands first) |

A trial's result (the report job of ``trial.yml``) is not an event of its own: ``attune github handle
--trial-result`` calls :mod:`bot.github.trial_results` directly.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bot.github import campaign_requests, comments
from bot.github.github_ports import github_executor, load_state, settled


class EventError(ValueError):
    """An event this bot cannot handle (one line, for the workflow log)."""


def nudge(forge: Any, payload: dict[str, Any], issue: int | None = None, **executor_kw: Any) -> str:
    """``workflow_dispatch`` of campaign.yml: re-run the campaign of an issue, re-dispatching a lost run."""
    number = int((payload.get("inputs") or {}).get("issue") or issue or 0)

    def run() -> str:
        if load_state(forge, number) is None:
            raise EventError(f"issue #{number} holds no campaign state")
        applied = comments.apply_pending(forge, number, **executor_kw)  # commands whose own run was replaced
        stored = load_state(forge, number)
        assert stored is not None
        executor, ports = github_executor(forge, stored, redispatch=True, **executor_kw)
        executor.loop(stored.campaign)
        ports.settle()
        earlier = ", ".join(f"{kind} (comment {cid})" for cid, kind in applied)
        return f"campaign {stored.campaign.id}: nudged" + (
            f"; unhandled commands applied in order: {earlier}" if earlier else ""
        )

    return settled(run)


def route(
    name: str, payload: dict[str, Any], forge_for: Callable[[int | None], Any], *, issue: int | None = None
) -> str:
    """Handle one event with the forge for its issue; answers the handler's one-line summary."""
    if name == "issues":
        if not isinstance(payload.get("issue"), dict):
            raise EventError("issues event without an issue")
        return campaign_requests.handle(forge_for(payload["issue"].get("number")), payload)
    if name == "issue_comment":
        if not isinstance(payload.get("issue"), dict) or not isinstance(payload.get("comment"), dict):
            raise EventError("issue_comment event without an issue or comment")
        return comments.handle(forge_for(payload["issue"].get("number")), payload)
    if name == "workflow_dispatch":
        number = int((payload.get("inputs") or {}).get("issue") or issue or 0)
        return nudge(forge_for(number), payload, issue=number)
    raise EventError(f"event {name!r} is not handled")
