"""``issue_comment`` events: ``/attune stop|resume|budget +H`` on a campaign issue, from a collaborator with write
permission. A command is one event fed to the campaign, applied once: its comment id is recorded in the state, so a
re-delivered event or a re-run workflow changes nothing; ``resume`` re-dispatches a run that never reported back.

Only a comment just written (``action: created``) on an issue (not a pull request, whose conversation GitHub also
delivers as ``issue_comment``) is read: an edited or deleted comment, or one on a step PR, is ignored here whatever
campaign.yml's filters let through."""

from __future__ import annotations

from typing import Any

from bot import campaign as cm
from bot.github.commands import Command, CommandError, parse_command
from bot.github.ports import github_executor, load_state, settled


def _not_a_new_issue_comment(payload: dict[str, Any]) -> str | None:
    """Why the event is no command to read (None: a comment just created on an issue)."""
    action = payload.get("action")
    if action != "created":
        return f"ignored: a comment {str(action)[:20]!r} event, only a created comment is a command"
    if payload["issue"].get("pull_request"):
        return "ignored: a comment on a pull request, not on a campaign issue"
    return None


def handle(forge: Any, payload: dict[str, Any], **executor_kw: Any) -> str:
    """``/attune stop|resume|budget +H`` on a campaign issue, from a collaborator with write permission."""
    comment, issue = payload["comment"], int(payload["issue"]["number"])
    ignored = _not_a_new_issue_comment(payload)
    if ignored:
        return ignored
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
    comment_id = int(comment["id"])

    def apply() -> str:
        stored = load_state(forge, issue)
        if stored is None:
            return "ignored: no campaign on this issue"
        if comment_id in stored.handled:  # a re-delivery or re-run of this comment's workflow
            return f"ignored: command {comment_id} was already applied"
        # resume re-dispatches a run that never reported back (a refused or lost trial.yml run); nothing else does
        executor, ports = github_executor(forge, stored, redispatch=parsed.kind == "resume", **executor_kw)
        ports.remember_command(comment_id)
        if parsed.kind == "stop":
            executor.feed(stored.campaign, cm.StopRequested(why=f"stopped by @{user}"))
        elif parsed.kind == "budget":
            executor.feed(stored.campaign, cm.BudgetAdded(device_hours=float(parsed.hours or 0)))
        else:
            ports.save(stored.campaign)
            executor.loop(stored.campaign)
        ports.settle()
        return f"{parsed.kind}: done"

    return settled(apply)
