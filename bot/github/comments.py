"""``issue_comment`` events: ``/attune stop|resume|budget +H`` on a campaign issue, from a collaborator with write
permission. A command is one event fed to the campaign, applied once: its comment id is recorded in the state, so a
re-delivered event or a re-run workflow changes nothing; ``resume`` re-dispatches a run that never reported back.

GitHub keeps one pending run per concurrency group and replaces it with a newer one, so a command's own run may never
come: every run that handles a writer's command (and every manual nudge) first applies, oldest first, every command
on the issue that is not yet recorded (:func:`apply_pending`) -- written since the campaign's state comment, not
edited, by a user the collaborator-permission API says may write. ``author_association`` only saves permission calls
(a comment by no owner, member or collaborator is skipped unasked); it decides nothing.

Only a comment just written (``action: created``) on an issue (not a pull request, whose conversation GitHub also
delivers as ``issue_comment``) is read: an edited or deleted comment, or one on a step PR, is ignored here whatever
campaign.yml's filters let through."""

from __future__ import annotations

from typing import Any

from bot import campaign as cm
from bot.forge.markers import marker
from bot.github.commands import Command, CommandError, parse_command
from bot.github.github_ports import HANDLED_KEPT, STATE_MARKER, Stored, github_executor, load_state, settled

# who may be a writer at all (campaign.yml's `if` uses the same list): a cost filter, never a permission
WRITER_ASSOCIATIONS = ("OWNER", "MEMBER", "COLLABORATOR")
Pending = tuple[int, str, Command]  # comment id, its author, the command


def _not_a_new_issue_comment(payload: dict[str, Any]) -> str | None:
    """Why the event is no command to read (None: a comment just created on an issue)."""
    action = payload.get("action")
    if action != "created":
        return f"ignored: a comment {str(action)[:20]!r} event, only a created comment is a command"
    if payload["issue"].get("pull_request"):
        return "ignored: a comment on a pull request, not on a campaign issue"
    return None


def _done(stored: Stored, comment_id: int) -> bool:
    """Whether ``comment_id`` was applied: recorded, or older than every id the capped record still holds."""
    handled = stored.handled
    return comment_id in handled or (len(handled) >= HANDLED_KEPT and comment_id < min(handled))


def unhandled_commands(forge: Any, issue: int, stored: Stored, trigger: Pending | None = None) -> list[Pending]:
    """The issue's ``/attune`` commands not applied yet, oldest first: ``trigger`` (the event's own, already
    checked), and every other comment written after the bot's state comment, never edited, whose author may write
    (``author_association`` first, then the permission API, once per user). Non-writers' commands are left out."""
    found: dict[int, Pending] = {}
    if trigger is not None and not _done(stored, trigger[0]):
        found[trigger[0]] = trigger
    tag, since, writers = marker(STATE_MARKER), None, {} if trigger is None else {trigger[1]: True}
    for comment in forge._repo.get_issue(issue).get_comments():  # noqa: SLF001 - the forge's own repository
        body = comment.body or ""
        if since is None:
            if body.lstrip().startswith(tag) and forge._is_ours(comment):  # noqa: SLF001
                since = comment.id
            continue
        if comment.id in found or _done(stored, comment.id) or comment.updated_at != comment.created_at:
            continue
        parsed = parse_command(body)
        user = comment.user.login if comment.user is not None else ""
        if not isinstance(parsed, Command) or comment.author_association not in WRITER_ASSOCIATIONS or not user:
            continue
        if user not in writers:
            writers[user] = forge.can_write(user)
        if writers[user]:
            found[comment.id] = (comment.id, user, parsed)
    return [found[cid] for cid in sorted(found)]


def _apply_one(forge: Any, issue: int, pending: Pending, **executor_kw: Any) -> str | None:
    """Apply one command to the state as it is now (one load, feed and compare-and-swap); None when it already was."""
    comment_id, user, command = pending
    stored = load_state(forge, issue)
    if stored is None or _done(stored, comment_id):
        return None
    # resume re-dispatches a run that never reported back (a refused or lost trial.yml run); nothing else does
    executor, ports = github_executor(forge, stored, redispatch=command.kind == "resume", **executor_kw)
    ports.remember_command(comment_id)
    if command.kind == "stop":
        executor.feed(stored.campaign, cm.StopRequested(why=f"stopped by @{user}"))
    elif command.kind == "budget":
        executor.feed(stored.campaign, cm.BudgetAdded(device_hours=float(command.hours or 0)))
    else:
        ports.save(stored.campaign)
        executor.loop(stored.campaign)
    ports.settle()
    return command.kind


def apply_pending(forge: Any, issue: int, trigger: Pending | None = None, **executor_kw: Any) -> list[tuple[int, str]]:
    """Apply every unhandled command of ``issue`` (``trigger`` among them), oldest first, each once; the
    ``(comment id, kind)`` of those applied. Call inside :func:`settled`: a lost race re-reads and skips what landed."""
    stored = load_state(forge, issue)
    if stored is None:
        return []
    applied = []
    for pending in unhandled_commands(forge, issue, stored, trigger):
        kind = _apply_one(forge, issue, pending, **executor_kw)
        if kind is not None:
            applied.append((pending[0], kind))
    return applied


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
        if load_state(forge, issue) is None:
            return "ignored: no campaign on this issue"
        applied = dict(apply_pending(forge, issue, (comment_id, user, parsed), **executor_kw))
        earlier = ", ".join(f"{kind} (comment {cid})" for cid, kind in applied.items() if cid != comment_id)
        said = f"{parsed.kind}: done" if comment_id in applied else f"ignored: command {comment_id} was already applied"
        return said + (f"; unhandled commands applied in order: {earlier}" if earlier else "")

    return settled(apply)
