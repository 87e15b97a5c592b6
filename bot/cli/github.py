"""``attune github handle``, ``check-trial``, ``calibrate`` and ``publish-leaderboard`` (as
.github/workflows/{campaign,trial,leaderboard}.yml call them).

Register with ``from bot.cli.github import register_github``. Bad payloads or flags: one error line, exit 2.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from pathlib import Path
from typing import Any

from bot.cli.common import output_problem


def _fail(msg: str) -> int:
    print(f"attune github: {msg}", file=sys.stderr)
    return 2


def _reaching_github(func: Any) -> Any:
    """``func`` with GitHub out of reach (refused, no DNS, a timeout) or answering an error no handler expects,
    reported in one line naming the API it tried, exit 1: the environment failed, not the input."""

    @functools.wraps(func)
    def wrapped(args: argparse.Namespace) -> int:
        import requests
        from github import GithubException

        api = os.environ.get("GITHUB_API_URL", "https://api.github.com")
        try:
            return int(func(args))
        except requests.exceptions.RequestException as exc:
            print(f"attune github: GitHub's API at {api} could not be reached ({type(exc).__name__})", file=sys.stderr)
        except GithubException as exc:
            print(f"attune github: GitHub's API at {api} answered {exc.status}: {_first_line(exc)}", file=sys.stderr)
        return 1

    return wrapped


def _forge(args: argparse.Namespace, issue: int | None = None) -> Any:
    from bot.forge.github import GitHubForge

    repo = args.repo or os.environ.get("GITHUB_REPOSITORY", "")
    token = os.environ.get("ATTUNE_GITHUB_TOKEN") or os.environ.get(args.token_env, "")
    env = {**os.environ, "GITHUB_REPOSITORY": repo, "GITHUB_TOKEN": token}
    return GitHubForge.from_env(env, campaign_issue=issue)


RUN_JOB = "run the recipe on a self-hosted runner (GPU box or Slurm login node)"  # trial.yml's run job (its `name:`; a test holds them equal)


def _run_job_wall(forge: Any, run_id: str) -> float | None:
    """The run job's wall time from the Actions API. None when it cannot be read (no run id, no finished run job, or
    the API call failed: perhaps only for now), said in one line on stderr: a record's device-hours are then bounded
    by the job's timeout instead (:func:`bot.github.uploads.wall_bound`), so the measurement is kept."""
    from bot.github.request import plain_digits
    from bot.github.uploads import RUN_JOB_TIMEOUT_S

    why = "no --run-id or $GITHUB_RUN_ID" if not run_id else f"run id {run_id[:40]!r} is not a workflow run id"
    if plain_digits(run_id):
        try:
            wall = forge.job_wall_seconds(int(run_id), RUN_JOB)
        except Exception as exc:  # noqa: BLE001 - an unreadable timing is "unknown", never a crash of the report job
            why = f"the Actions API call failed, perhaps only for now: {type(exc).__name__}: {_first_line(exc)[:200]}"
        else:
            if wall is not None:
                return wall
            why = f"workflow run {run_id} has no finished job {RUN_JOB!r}"
    print(
        f"attune github: the run job's wall time is unknown ({why}); a record's device-hours are bounded by the "
        f"job's timeout ({RUN_JOB_TIMEOUT_S // 60} min) instead",
        file=sys.stderr,
    )
    return None


def _commit_flag_problem(flag: str, value: str, *, optional: bool = False) -> str | None:
    """Why ``value`` of ``flag`` (``--sha``, ``--base-sha``) is not a full commit sha (None: it is, or it is an
    ``optional`` flag left empty): 40 lower-case hex digits, as GitHub writes them; a branch or tag name is no commit."""
    from bot.forge.github import SHA_PATTERN

    if optional and not value:
        return None
    if SHA_PATTERN.fullmatch(value):
        return None
    return f"{flag} {value[:50]!r}: expected a commit sha (40 lower-case hex digits)"


def _trial_flags_problem(args: argparse.Namespace) -> str | None:
    """The first flag of a ``--trial-result`` call that is wrong, found before any work is done (None: none is)."""
    from bot.github.request import plain_digits

    if not (args.campaign and args.issue and args.pr is not None and args.sha):
        return "--trial-result needs --campaign, --issue, --pr and --sha"
    if args.run_id and not plain_digits(args.run_id):
        return f"--run-id {args.run_id[:40]!r}: expected a workflow run id (digits 0-9)"
    return _commit_flag_problem("--sha", args.sha) or _commit_flag_problem(
        "--base-sha", args.base_sha or "", optional=True
    )


def _missing_commit(forge: Any, args: argparse.Namespace) -> str | None:
    """``--sha`` or ``--base-sha`` naming no commit of the repository, as a one-line problem (None: both exist). Not
    asked for a run check refused: nothing of its sha is read then."""
    if args.check_refused:
        return None
    for flag, sha in (("--sha", args.sha), ("--base-sha", args.base_sha or "")):
        if sha and not forge.commit_exists(sha):
            return f"{flag} {sha}: no such commit in {forge.full_name}; expected the commit the run measured"
    return None


def _handle_trial_result(args: argparse.Namespace) -> int:
    """``--trial-result``: trial.yml's report job (:mod:`bot.github.trial_results`)."""
    from bot.github import trial_results

    problem = _trial_flags_problem(args)
    if problem:
        return _fail(problem)
    forge = _forge(args, args.issue)
    problem = _missing_commit(forge, args)
    if problem:
        return _fail(problem)
    print(
        trial_results.handle(
            forge,
            Path(args.trial_result),
            campaign=args.campaign,
            issue=args.issue,
            pr=args.pr,
            sha=args.sha,
            run_job_result=args.run_job_result or "",
            kind=args.kind or "",
            attempt=args.attempt or 0,
            check_refused=args.check_refused or "",
            base_sha=args.base_sha or "",
            job_wall_s=_run_job_wall(forge, args.run_id or os.environ.get("GITHUB_RUN_ID", "")),
        )
    )
    return 0


def cmd_handle(args: argparse.Namespace) -> int:
    from github import UnknownObjectException
    from pydantic import ValidationError

    from bot.forge.github import GitHubForgeError

    try:
        if args.trial_result:
            return _handle_trial_result(args)
        path = args.event_path or os.environ.get("GITHUB_EVENT_PATH", "")
        name = args.event_name or os.environ.get("GITHUB_EVENT_NAME", "")
        if not path:
            return _fail(
                "no event payload: give --event-path FILE (in a workflow, $GITHUB_EVENT_PATH names it), "
                "or --trial-result DIR"
            )
        payload = _read_payload(Path(path))
        if isinstance(payload, str):
            return _fail(f"--event-path {path}: {payload}")
        from bot.github.router import EventError, route

        try:
            print(route(name, payload, lambda issue: _forge(args, issue), issue=args.issue))
        except EventError as exc:
            return _fail(str(exc))
    except (KeyError, TypeError, AttributeError, OverflowError, ValidationError) as exc:  # a field of the wrong kind
        return _fail(f"bad payload: {_first_line(exc)}")
    except UnknownObjectException as exc:  # an issue, pull request or commit the event names that does not exist
        return _fail(f"not found on GitHub: {_first_line(exc)}")
    except (GitHubForgeError, ValueError) as exc:  # no token or repository, no campaign where the event says one is
        return _fail(_first_line(exc))
    return 0


def _read_payload(path: Path) -> dict[str, Any] | str:
    """The event payload at ``path``, a JSON object; else why it cannot be read as one, in words."""
    if not path.is_file():
        return "is a folder; expected a JSON file" if path.is_dir() else "no such file"
    try:
        payload = json.loads(path.read_bytes().decode("utf-8"))
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    except UnicodeDecodeError as exc:
        return f"not UTF-8 text (byte {exc.start}); expected the JSON payload GitHub writes"
    except ValueError as exc:
        return f"not JSON ({exc}); expected the JSON payload GitHub writes"
    return payload if isinstance(payload, dict) else "not a JSON object; expected the JSON payload GitHub writes"


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__


def cmd_check_trial(args: argparse.Namespace) -> int:
    """May the self-hosted job run? (:mod:`bot.github.check_trial`); writes its outputs to $GITHUB_OUTPUT."""
    from bot.forge.github import GitHubForgeError
    from bot.github.check_trial import check_trial

    problem = output_problem(args.github_output) if args.github_output else None
    if problem:
        return _fail(f"--github-output {problem}")
    try:
        forge = _forge(args)
    except (GitHubForgeError, ValueError) as exc:  # no token or repository, or a repository not named owner/name
        return _fail(_first_line(exc))
    lines, reason = check_trial(
        forge,
        pr=args.pr,
        sha=args.sha,
        campaign=args.campaign,
        kind=args.kind,
        recipe=args.recipe,
        runner_labels=args.runner_labels,
        limits=args.limits,
        issue=args.issue,
        order=args.order,
    )
    if args.github_output:
        with open(args.github_output, "a") as fh:
            fh.write("\n".join(lines) + "\n")
    print(reason)
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    """The loss-band calibration runs of a campaign's baseline, on this (self-hosted) machine: ``bot.campaign.gate_calls``'s
    ``calibrate_loss_band``; writes the ``Calibrated`` event as JSON and every calibration run's record beside it in
    ``calibration/`` (the report job recomputes the band from those records: ``bot.github.uploads``). A calibration
    that cannot be made is still written (no band, with the reason), so the campaign goes on with tier-R/N steps
    failing closed."""
    from bot.campaign.gate_calls import calibrate_loss_band
    from bot.core.recipe import RecipeError, parse_recipe_text
    from bot.core.records import atomic_write_text, read_record
    from bot.core.textfile import read_utf8
    from bot.github.trial_results import CALIBRATION_RUNS

    if args.jobs < 1:
        return _fail(f"calibrate: --jobs: expected at least 1; got {args.jobs}")
    problem = output_problem(args.out, make_folders=True)
    if problem:
        return _fail(f"calibrate: --out {problem}")
    try:
        text = read_utf8(args.recipe)
        recipe = parse_recipe_text(text, args.recipe)
    except OSError as exc:
        return _fail(f"calibrate: --recipe: {args.recipe}: cannot read it ({exc.strerror or exc})")
    except (ValueError, RecipeError) as exc:  # the file, its line and field (or the byte that is not UTF-8)
        return _fail(f"calibrate: --recipe: {_first_line(exc)}")
    try:
        reference = read_record(args.reference)
    except OSError as exc:
        return _fail(f"calibrate: --reference: {args.reference}: cannot read it ({exc.strerror or exc})")
    except ValueError as exc:  # the file and its first wrong field
        return _fail(f"calibrate: --reference: {_first_line(exc)}")
    if reference.recipe_id != recipe.name:
        return _fail(
            f"calibrate: --reference {args.reference}: a run record of {reference.recipe_id}, not of the --recipe "
            f"{recipe.name}; expected the campaign baseline's record"
        )
    if args.max_wall_s is not None and not args.max_wall_s > 0:
        return _fail(f"calibrate: --max-wall-s: expected a positive number of seconds; got {args.max_wall_s}")
    event = calibrate_loss_band(
        text,
        reference,
        cache_dir=Path(args.cache_dir),
        jobs=args.jobs,
        records_out=Path(args.out).parent / CALIBRATION_RUNS,
        max_wall_s=args.max_wall_s,
    )
    atomic_write_text(args.out, event.model_dump_json(indent=1) + "\n")
    print(event.note)
    return 0


def cmd_publish_leaderboard(args: argparse.Namespace) -> int:
    """leaderboard.yml: regenerate ``leaderboard.md`` from ``results/`` of this checkout and land it on the default
    branch through a bot pull request (:mod:`bot.github.leaderboard_pr`), never a push to it."""
    from bot.campaign.leaderboard import collect, render
    from bot.core.repo import RepoError, find_repo
    from bot.forge.github import GitHubForgeError
    from bot.github.leaderboard_pr import publish

    try:
        text = render(collect(find_repo().root))
        print(publish(_forge(args), text, run=args.run_id or os.environ.get("GITHUB_RUN_ID", "")))
    except (GitHubForgeError, RepoError, ValueError) as exc:
        return _fail(_first_line(exc))
    return 0


def register(sub: Any) -> None:
    g = sub.add_parser("github", help="GitHub event handlers (campaign.yml, trial.yml)")
    gs = g.add_subparsers(dest="github_cmd", required=True)
    h = gs.add_parser("handle", help="handle one GitHub event or a trial result")
    for flag in (
        "--event-path",
        "--event-name",
        "--trial-result",
        "--campaign",
        "--sha",
        "--run-job-result",
        "--repo",
        "--kind",
    ):
        h.add_argument(flag)
    h.add_argument("--token-env", default="GITHUB_TOKEN")
    h.add_argument("--issue", type=int)
    h.add_argument("--pr", type=int)
    h.add_argument("--attempt", type=int)
    h.add_argument("--base-sha", default="", help="a pair's incumbent sha, as trial.yml's check checked it")
    h.add_argument(
        "--check-refused",
        default="",
        help="trial.yml's check refused the run, for this reason: the campaign "
        "closes the step (a crashed run, or no loss band) instead of waiting for a record",
    )
    h.add_argument(
        "--run-id",
        default="",
        help="the workflow run of the trial (default $GITHUB_RUN_ID): its run job's wall time bounds the record's device-hours",
    )
    h.set_defaults(func=_reaching_github(cmd_handle))
    c = gs.add_parser("check-trial", help="may a self-hosted runner execute this sha?")
    c.add_argument("--pr", type=int, required=True)
    c.add_argument("--sha", required=True)
    c.add_argument("--campaign", required=True)
    c.add_argument("--runner-labels", default="")
    c.add_argument("--github-output")
    c.add_argument("--recipe", default="", help="the recipe of a baseline or calibration run (no step PR)")
    c.add_argument(
        "--kind",
        default="",
        help="one of baseline, trial, pair, calibrate (default: baseline without a PR, else trial)",
    )
    c.add_argument("--order", default="", help="a pair's order: AB (incumbent first) or BA")
    c.add_argument(
        "--limits", default="{}", help='JSON: {"max_wall_s": S, "stop_below_tps": T} (budget cap, early stop)'
    )
    c.add_argument("--issue", help="the campaign issue: a step may change only the levers its state names")
    c.add_argument("--repo")
    c.add_argument("--token-env", default="GITHUB_TOKEN")
    c.set_defaults(func=_reaching_github(cmd_check_trial))
    lp = gs.add_parser(
        "publish-leaderboard", help="regenerate leaderboard.md and land it through a bot pull request (leaderboard.yml)"
    )
    lp.add_argument(
        "--run-id",
        default="",
        help="names the branch attune/leaderboard/<run> (default $GITHUB_RUN_ID; "
        "without one, the short shas of the default branch head and of the regenerated file name it)",
    )
    lp.add_argument("--repo")
    lp.add_argument("--token-env", default="GITHUB_TOKEN")
    lp.set_defaults(func=_reaching_github(cmd_publish_leaderboard))
    k = gs.add_parser(
        "calibrate", help="run the gate's loss-band calibration for a campaign baseline (self-hosted job)"
    )
    k.add_argument("--recipe", required=True, help="the recipe as the baseline ran it")
    k.add_argument("--reference", required=True, help="the campaign's first baseline record (JSON)")
    k.add_argument("--out", required=True, help="where to write the Calibrated event (JSON)")
    k.add_argument("--cache-dir", default=".attune/calibration", help="calibration runs cached by content (reused)")
    k.add_argument("--jobs", type=int, default=1, help="calibration runs at once")
    k.add_argument(
        "--max-wall-s",
        type=float,
        default=None,
        help="what is left of the campaign's budget, in wall seconds: shared by the fresh calibration runs",
    )
    k.set_defaults(func=_reaching_github(cmd_calibrate))
