"""``attune github handle``, ``check-trial`` and ``calibrate`` (as .github/workflows/{campaign,trial}.yml call them).

Register with ``from bot.events.cli import register_github``. Bad payloads or flags: one error line, exit 2.
"""

from __future__ import annotations

import argparse
import json
import os
import re
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
    # resume re-dispatches a run that never reported back (a refused or lost trial.yml run); nothing else does
    driver = GitHubDriver(forge=forge, stored=stored, redispatch=parsed.kind == "resume")
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
                                       issue=args.issue, pr=args.pr, sha=args.sha, run_job_result=args.run_job_result or "",
                                       kind=args.kind or "", attempt=args.attempt or 0))
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
            GitHubDriver(forge=forge, stored=stored, redispatch=True).loop(stored.campaign)  # a manual nudge
        else:
            return _fail(f"event {name!r} is not handled")
    except (KeyError, TypeError, ValidationError) as exc:
        return _fail(f"bad payload: {exc!r}")
    return 0


KINDS = ("baseline", "trial", "confirm", "calibrate")
_CAMPAIGN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def cmd_check_trial(args: argparse.Namespace) -> int:
    """May the self-hosted job run? Writes ok, kind, recipe, runs_on, campaign, records_sha, max_wall_s and stop_below
    to $GITHUB_OUTPUT.

    A step run (trial, confirm) needs the PR checks of ``GitHubForge.check_trial``; a run without a PR (baseline,
    calibrate) needs ``sha`` to be the default branch head and ``--recipe`` a recipe file there; a calibration also
    needs the campaign's records branch (the recipe as the baseline ran it and the baseline record), whose head
    becomes ``records_sha`` so the runner reads exactly what was checked.
    """
    from bot.events.github_driver import records_branch
    from bot.events.request import runs_on

    forge = _forge(args)
    kind = args.kind or ("baseline" if args.pr == 0 else "trial")
    records_sha = ""
    try:
        labels = runs_on(args.runner_labels or "")
    except ValueError as exc:
        labels, check = [], {"ok": False, "recipe": "", "reason": str(exc)}
    else:
        if kind not in KINDS:
            check = {"ok": False, "recipe": "", "reason": f"kind {kind[:40]!r}: expected one of {', '.join(KINDS)}"}
        elif not _CAMPAIGN_ID.match(args.campaign):
            check = {"ok": False, "recipe": "", "reason": f"campaign {args.campaign[:40]!r}: expected letters, digits, . _ -"}
        elif (args.pr == 0) != (kind in ("baseline", "calibrate")):
            check = {"ok": False, "recipe": "", "reason": f"a {kind} run {'needs a' if args.pr == 0 else 'has no'} step PR"}
        elif args.pr == 0:
            tc = forge.check_default_run(args.sha, args.recipe or "")
            check = {"ok": tc.ok, "recipe": tc.recipe or "", "reason": tc.reason}
            if tc.ok and kind == "calibrate":
                records_sha = forge._branch_head(records_branch(args.campaign)) or ""  # noqa: SLF001
                if not records_sha:
                    check = {"ok": False, "recipe": "", "reason": f"no records branch {records_branch(args.campaign)}"}
        else:
            tc = forge.check_trial(args.pr, args.sha)
            check = {"ok": tc.ok, "recipe": tc.recipe or "", "reason": tc.reason}
    limits, problem = parse_limits(args.limits, kind)
    if problem and check["ok"]:
        check = {"ok": False, "recipe": "", "reason": problem}
    ok = bool(check["ok"])
    lines = [f"ok={'true' if ok else 'false'}", f"kind={kind if ok else ''}",
             f"recipe={check['recipe']}", f"runs_on={json.dumps(labels)}",
             f"campaign={args.campaign if ok else ''}", f"records_sha={records_sha}",
             f"max_wall_s={limits.get('max_wall_s', '') if ok else ''}", f"stop_below={limits.get('stop_below_tps', '') if ok else ''}"]
    if args.github_output:
        with open(args.github_output, "a") as fh:
            fh.write("\n".join(lines) + "\n")
    print(check["reason"] or "ok")
    return 0


def parse_limits(text: str, kind: str) -> tuple[dict[str, float], str | None]:
    """trial.yml's ``limits`` input: a JSON object with optional positive numbers ``max_wall_s`` and (trials only)
    ``stop_below_tps``; anything else refuses the run, and nothing but these numbers reaches the runner."""
    try:
        raw = json.loads(text or "{}")
    except ValueError:
        return {}, f"limits {text[:60]!r}: expected a JSON object"
    if not isinstance(raw, dict) or set(raw) - {"max_wall_s", "stop_below_tps"}:
        return {}, f"limits {text[:60]!r}: expected a JSON object with max_wall_s and/or stop_below_tps"
    out: dict[str, float] = {}
    for key, value in raw.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1e12:
            return {}, f"limits.{key}: expected a positive number; got {str(value)[:40]!r}"
        out[key] = float(value)
    if "stop_below_tps" in out and kind != "trial":
        return {}, f"limits.stop_below_tps: only a trial may stop early, not a {kind} run"
    return out, None


def cmd_calibrate(args: argparse.Namespace) -> int:
    """The loss-band calibration runs of a campaign's baseline, on this (self-hosted) machine: ``bot.gating``'s
    ``calibrate_loss_band``; writes the ``Calibrated`` event as JSON for the report job. A calibration that cannot be
    made is still written (no band, with the reason), so the campaign goes on with tier-R/N steps failing closed."""
    from bot.gating import calibrate_loss_band
    from bot.records import atomic_write_text, read_record

    try:
        text = Path(args.recipe).read_text()
        reference = read_record(args.reference)
    except (OSError, ValueError) as exc:
        return _fail(f"calibrate: {exc}")
    event = calibrate_loss_band(text, reference, cache_dir=Path(args.cache_dir), jobs=args.jobs)
    atomic_write_text(args.out, event.model_dump_json(indent=1) + "\n")
    print(event.note)
    return 0


def register_github(sub: Any) -> None:
    g = sub.add_parser("github", help="GitHub event handlers (campaign.yml, trial.yml)")
    gs = g.add_subparsers(dest="github_cmd", required=True)
    h = gs.add_parser("handle", help="handle one GitHub event or a trial result")
    for flag in ("--event-path", "--event-name", "--trial-result", "--campaign", "--sha", "--run-job-result", "--repo",
                 "--kind"):
        h.add_argument(flag)
    h.add_argument("--token-env", default="GITHUB_TOKEN")
    h.add_argument("--issue", type=int)
    h.add_argument("--pr", type=int)
    h.add_argument("--attempt", type=int)
    h.set_defaults(func=cmd_handle)
    c = gs.add_parser("check-trial", help="may a self-hosted runner execute this sha?")
    c.add_argument("--pr", type=int, required=True)
    c.add_argument("--sha", required=True)
    c.add_argument("--campaign", required=True)
    c.add_argument("--runner-labels", default="")
    c.add_argument("--github-output")
    c.add_argument("--recipe", default="", help="the recipe of a baseline or calibration run (no step PR)")
    c.add_argument("--kind", default="", help=f"one of {', '.join(KINDS)} (default: baseline without a PR, else trial)")
    c.add_argument("--limits", default="{}", help='JSON: {"max_wall_s": S, "stop_below_tps": T} (budget cap, early stop)')
    c.add_argument("--repo")
    c.add_argument("--token-env", default="GITHUB_TOKEN")
    c.set_defaults(func=cmd_check_trial)
    k = gs.add_parser("calibrate", help="run the gate's loss-band calibration for a campaign baseline (self-hosted job)")
    k.add_argument("--recipe", required=True, help="the recipe as the baseline ran it")
    k.add_argument("--reference", required=True, help="the campaign's first baseline record (JSON)")
    k.add_argument("--out", required=True, help="where to write the Calibrated event (JSON)")
    k.add_argument("--cache-dir", default=".attune/calibration", help="calibration runs cached by content (reused)")
    k.add_argument("--jobs", type=int, default=1, help="calibration runs at once")
    k.set_defaults(func=cmd_calibrate)
