"""``attune github handle`` and ``attune github check-trial`` (as .github/workflows/{campaign,trial}.yml call them).

Register with ``from bot.events.cli import register_github``. Bad payloads or flags: one error line, exit 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any


def _fail(msg: str) -> int:
    print(f"attune github: {msg}", file=sys.stderr)
    return 2


def _forge(args: argparse.Namespace, issue: int | None = None) -> Any:
    from bot.forge.github import GitHubForge

    repo = args.repo or os.environ.get("GITHUB_REPOSITORY", "")
    token = os.environ.get("ATTUNE_GITHUB_TOKEN") or os.environ.get(args.token_env, "")
    env = {**os.environ, "GITHUB_REPOSITORY": repo, "GITHUB_TOKEN": token}
    return GitHubForge.from_env(env, campaign_issue=issue)


def handle_comment(forge: Any, payload: dict[str, Any]) -> str:
    """``/attune stop|resume|budget +H`` on a campaign issue, from a collaborator with write permission."""
    from bot import campaign as cm
    from bot.events.commands import Command, CommandError, parse_command
    from bot.events.github_driver import GitHubDriver, load_state

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
    driver = GitHubDriver(forge=forge, stored=stored)
    if parsed.kind == "stop":
        state = driver.advance(cm.StopRequested(why=f"stopped by @{user}"))
    elif parsed.kind == "budget":
        state = driver.advance(cm.BudgetAdded(device_hours=float(parsed.hours or 0)))
    else:
        state = stored.campaign
    driver.loop(state)
    return f"{parsed.kind}: done"


def cmd_handle(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from bot.events import campaign_requests, trial_results

    try:
        if args.trial_result:
            if not (args.campaign and args.issue and args.pr is not None and args.sha):
                return _fail("--trial-result needs --campaign, --issue, --pr and --sha")
            print(trial_results.handle(_forge(args, args.issue), Path(args.trial_result), campaign=args.campaign,
                                       issue=args.issue, pr=args.pr, sha=args.sha, run_job_result=args.run_job_result or ""))
            return 0
        path = args.event_path or os.environ.get("GITHUB_EVENT_PATH", "")
        name = args.event_name or os.environ.get("GITHUB_EVENT_NAME", "")
        try:
            payload = json.loads(Path(path).read_text())
            if not isinstance(payload, dict):
                raise ValueError("not a JSON object")
        except (OSError, ValueError) as exc:
            return _fail(f"event payload {path!r}: {exc}")
        if name == "issues":
            if not isinstance(payload.get("issue"), dict):
                return _fail("issues event without an issue")
            print(campaign_requests.handle(_forge(args, payload["issue"].get("number")), payload))
        elif name == "issue_comment":
            if not isinstance(payload.get("issue"), dict) or not isinstance(payload.get("comment"), dict):
                return _fail("issue_comment event without an issue or comment")
            print(handle_comment(_forge(args, payload["issue"].get("number")), payload))
        elif name == "workflow_dispatch":
            issue = int((payload.get("inputs") or {}).get("issue") or args.issue or 0)
            forge = _forge(args, issue)
            from bot.events.github_driver import GitHubDriver, load_state

            stored = load_state(forge, issue)
            if stored is None:
                return _fail(f"issue #{issue} holds no campaign state")
            GitHubDriver(forge=forge, stored=stored).loop(stored.campaign)
        else:
            return _fail(f"event {name!r} is not handled")
    except (KeyError, TypeError, ValidationError) as exc:
        return _fail(f"bad payload: {exc!r}")
    return 0


def cmd_check_trial(args: argparse.Namespace) -> int:
    from bot.events.request import runs_on

    forge = _forge(args)
    labels = runs_on(args.runner_labels or "")
    if args.pr == 0:  # a baseline run: the default branch head, recipe from the campaign state
        ok = forge._branch_head(forge.base_branch) == args.sha  # noqa: SLF001
        check = {"ok": ok, "recipe": args.recipe or "", "reason": "" if ok else "sha is not the default branch head"}
    else:
        tc = forge.check_trial(args.pr, args.sha)
        check = {"ok": tc.ok, "recipe": tc.recipe or "", "reason": tc.reason}
    lines = [f"ok={'true' if check['ok'] else 'false'}", f"recipe={check['recipe']}", f"runs_on={json.dumps(labels)}"]
    if args.github_output:
        with open(args.github_output, "a") as fh:
            fh.write("\n".join(lines) + "\n")
    print(check["reason"] or "ok")
    return 0


def register_github(sub: Any) -> None:
    g = sub.add_parser("github", help="GitHub event handlers (campaign.yml, trial.yml)")
    gs = g.add_subparsers(dest="github_cmd", required=True)
    h = gs.add_parser("handle", help="handle one GitHub event or a trial result")
    for flag in ("--event-path", "--event-name", "--trial-result", "--campaign", "--sha", "--run-job-result", "--repo"):
        h.add_argument(flag)
    h.add_argument("--token-env", default="GITHUB_TOKEN")
    h.add_argument("--issue", type=int)
    h.add_argument("--pr", type=int)
    h.set_defaults(func=cmd_handle)
    c = gs.add_parser("check-trial", help="may a self-hosted runner execute this sha?")
    c.add_argument("--pr", type=int, required=True)
    c.add_argument("--sha", required=True)
    c.add_argument("--campaign", required=True)
    c.add_argument("--runner-labels", default="")
    c.add_argument("--github-output")
    c.add_argument("--recipe", default="")
    c.add_argument("--repo")
    c.add_argument("--token-env", default="GITHUB_TOKEN")
    c.set_defaults(func=cmd_check_trial)
