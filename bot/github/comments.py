"""``issue_comment`` events: ``/attune stop|resume|budget +H`` on a campaign issue, from a collaborator with write
permission. A command is one event fed to the campaign; ``resume`` re-dispatches a run that never reported back."""

from __future__ import annotations

from typing import Any

from bot import campaign as cm
from bot.github.commands import Command, CommandError, parse_command
from bot.github.ports import github_executor, load_state


def handle(forge: Any, payload: dict[str, Any], **executor_kw: Any) -> str:
    """``/attune stop|resume|budget +H`` on a campaign issue, from a collaborator with write permission."""
    comment, issue = payload["comment"], int(payload["issue"]["number"])
    parsed = parse_command(comment.get("body"))
    if parsed is None:
        return "ignored: not a command"
    user = str((comment.get("user") or {}).get("login", ""))
    if not forge.can_write(user):
        return f"ignored: {user} has no write permission"
    if isinstance(parsed, CommandError):
        forge.upsert_comment(issue, f"command-{int(comment['id'])}", parsed.message)
        return "command invalid"
    assert isinstance(parsed, Command)
    stored = load_state(forge, issue)
    if stored is None:
        return "ignored: no campaign on this issue"
    # resume re-dispatches a run that never reported back (a refused or lost trial.yml run); nothing else does
    executor, _ = github_executor(forge, stored, redispatch=parsed.kind == "resume", **executor_kw)
    if parsed.kind == "stop":
        executor.feed(stored.campaign, cm.StopRequested(why=f"stopped by @{user}"))
    elif parsed.kind == "budget":
        executor.feed(stored.campaign, cm.BudgetAdded(device_hours=float(parsed.hours or 0)))
    else:
        executor.loop(stored.campaign)
    return f"{parsed.kind}: done"
