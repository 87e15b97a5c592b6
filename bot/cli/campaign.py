"""``attune campaign run|list|show|resume|stop`` and ``attune demo``: campaigns on this machine (the local ports of
the one executor).

A campaign lives under ``<repo>/.attune/campaigns/<id>/``. One process at a time drives it, and one local-forge
campaign at a time drives a checkout (locks the kernel drops when that process dies: :mod:`bot.drive.lifecycle`).
Ctrl-C or SIGTERM stops it at a safe point with no torchrun, rank or calibration worker left running, and ``resume``
continues it; so does ``resume`` after a SIGKILL or a power cut. ``stop`` ends a campaign for good (its open step is
closed, its summary committed), signalling the process that runs it first if there is one. A local-forge campaign
merges into the branch checked out when it started (``Campaign.base_branch``): ``resume`` and ``stop`` refuse to
run on another one. With ``--json``, ``run``, ``resume`` and ``stop`` print one JSON object however they end
(finished, already finished, interrupted): the campaign summary with its ``status`` and a ``message``.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import re
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bot.cli.common import EXIT_FAILED, EXIT_OK, UsageError, console, emit_json

if TYPE_CHECKING:
    from collections.abc import Iterator

    from bot.core.state import Campaign
    from bot.drive.lifecycle import LaunchFacts

DEMO_RECIPE = "llama3-tiny/cpu.yaml"
DEMO_RECIPES = (DEMO_RECIPE, "moe-tiny/cpu.yaml")  # the embedded examples: dense llama3, MoE (qwen3)
CAMPAIGN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")  # a folder name and a git branch component
STOP_WAIT_S = 120.0  # how long `stop` waits for the running process to let go (a run's kill, a worker's grace)


def _progress(console):
    from rich.markup import escape

    def on_event(state, action, event) -> None:
        kind = getattr(action, "type", "")
        if kind in ("run_baseline", "run_trial", "measure_pair") and hasattr(event, "run"):
            r = event.run
            label = f"step {r.n} {r.kind}" + (f" {r.attempt} ({r.order})" if r.kind == "pair" else "")
            if r.kind == "baseline":
                label = f"baseline {r.attempt}" + (
                    " (warm-up, not counted)" if r.attempt <= state.baseline_warmup_runs else ""
                )
            ab = "" if r.reference_tps is None else f" vs incumbent {r.reference_tps:,.0f}"
            console.print(
                f"  {label}: {r.outcome} {'' if r.tps is None else f'{r.tps:,.0f} tok/s/device' + (' SIMULATED' if r.simulated else '')}{ab}  \\[spent {state.spent:.4f}/{state.budget:.4f} dh]"
            )
            m = state.step(r.n).measurement if r.kind == "pair" else None
            if m is not None and m.lo is not None:
                console.print(
                    f"    estimate {m.estimate:+.1%} [{m.lo:+.1%}, {m.hi:+.1%}] ({m.confidence:.0%}, {m.pairs} pairs): {m.decision.replace('_', ' ')}"
                )
        elif kind == "open_step":
            st = state.step(event.n)
            console.print(
                f"[bold]step {st.n}[/]: {escape(st.change.title())}  ({st.change.policy}{'; ' + ', '.join(st.change.lessons) if st.change.lessons else ''})"
            )
        elif kind in ("check_config", "check_convergence"):
            v = event.verdict
            console.print(
                f"  gate {v.stage}: {v.verdict} (tier {v.tier})" + ("" if v.ok else f" — {escape(v.reasons[0][:160])}")
            )
        elif kind == "calibrate":
            console.print(f"  gate loss band: {escape(event.note)}  \\[spent {state.spent:.4f}/{state.budget:.4f} dh]")
        elif kind == "merge":
            console.print(f"  [green]kept[/]: step {event.n} merged")
        elif kind == "close":
            console.print(f"  closed: {escape(action.reason[:160])}")

    return on_event


# ----------------------------------------------------------------------------- where campaigns live
def _repo_root(arg: str | None) -> Path:
    """The repository whose campaigns ``--repo`` names (its git top level when it is inside one); without
    ``--repo``, the ATTUNE repository ``$ATTUNE_REPO`` names or the one at or above the working directory
    (:func:`bot.core.repo.find_repo`: a one-line error outside any)."""
    from bot.core.repo import RepoError, find_repo, git_toplevel

    if arg is None:
        try:
            path = find_repo().root
        except RepoError as exc:
            raise UsageError(f"{exc}, or give --repo") from None
    else:
        path = Path(arg).resolve()
        if not path.is_dir():
            raise UsageError(f"--repo {arg}: no such folder")
    return git_toplevel(path) or path


def _campaigns(repo: Path) -> Path:
    from bot.core.repo import Repo

    return Repo(repo).work / "campaigns"


def _state_path(repo: Path, cid: str) -> Path:
    from bot.drive.local_ports import FileStateStore

    return FileStateStore(_campaigns(repo)).path(cid)


def _stored(repo: Path, cid: str):
    """The stored state of campaign ``cid`` of ``repo``; a one-line error when there is none, or when its
    ``state.json`` is damaged: the file and its first wrong field (:func:`bot.core.state.read_campaign`)."""
    from bot.core.state import read_campaign

    if not CAMPAIGN_ID.match(cid):
        raise UsageError(f"{cid!r}: not a campaign id (letters, digits, '.', '_' and '-')")
    path = _state_path(repo, cid)
    if not path.is_file():
        raise UsageError(
            f"{cid}: no such campaign under {_campaigns(repo)} (`attune campaign list --repo {repo}` lists them)"
        )
    try:
        return read_campaign(path)
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the campaign's state: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise UsageError(str(exc)) from None


@contextlib.contextmanager
def _lock_errors() -> Iterator[None]:
    """A lock file that cannot be opened (a folder, no permission) as the one-line user error it is."""
    from bot.drive.lifecycle import LockError

    try:
        yield
    except LockError as exc:
        raise UsageError(str(exc)) from None


def _status(repo: Path, state: Campaign) -> str:
    """What campaign ``state`` of ``repo`` is now (:func:`bot.drive.lifecycle.status_of`)."""
    from bot.drive.lifecycle import forge_of, holder, status_of

    folder = _campaigns(repo) / state.id
    with _lock_errors():
        pid = holder(folder)
    return status_of(state, pid, forge_of(folder))


def _result(state: Campaign | None, repo: Path, cid: str, *, status: str, message: str) -> dict[str, Any]:
    """What ``--json`` prints however a command on a campaign ends: the summary ``campaign run --json`` prints (just
    the id where no state was saved), its ``status`` and a ``message``."""
    from bot.campaign.report import summary_json

    head = summary_json(state, repo) if state is not None else {"campaign": cid, "repo": str(repo)}
    return {**head, "status": status, "message": message}


def _already_finished(repo: Path, state: Campaign, as_json: bool) -> int:
    message = f"campaign {state.id} already finished: {state.finish_reason}"
    if as_json:
        emit_json(_result(state, repo, state.id, status="finished", message=message))
    else:
        print(message)
    return EXIT_OK


# ----------------------------------------------------------------------------- driving one campaign
def _release(locks: list[Any]) -> None:
    for lock in locks:
        lock.release()


def _take_locks(repo: Path, cid: str, forge: str) -> list[Any]:
    """The checkout's lock (a local-forge campaign merges into the checked-out branch: one at a time; the in-memory
    forge touches no git) and then the campaign's; a one-line error when either is held. They are released in the
    order taken, so a ``stop`` that sees the campaign's lock let go finds the checkout's free too."""
    from bot.core.repo import Repo
    from bot.drive.lifecycle import CampaignBusy, CampaignLock, CheckoutBusy, CheckoutLock

    wanted: list[Any] = [CheckoutLock(Repo(repo).work, cid)] if forge == "local" else []
    wanted.append(CampaignLock(_campaigns(repo) / cid, cid))
    taken: list[Any] = []
    try:
        with _lock_errors():
            for lock in wanted:  # a lock file that cannot be opened is named before any lock is taken
                lock.check()
            for lock in wanted:
                taken.append(lock.acquire())
    except (CheckoutBusy, CampaignBusy) as exc:  # the checkout's holder may run another campaign: name that one
        _release(taken)
        raise UsageError(f"{exc}; wait for it, or `attune campaign stop {exc.cid or cid} --repo {repo}`") from None
    except UsageError:
        _release(taken)
        raise
    return taken


def _interrupted(repo: Path, cid: str, exc: Any, state: Campaign | None, forge: str, as_json: bool) -> int:
    """Say how a campaign stopped by a signal stands, and answer the shell's exit code for that signal."""
    after = (
        f"`attune campaign resume {cid} --repo {repo}` continues it"
        if forge == "local"
        else f"its steps were kept in memory (--forge {forge}), so it cannot be resumed: `attune campaign stop {cid} --repo {repo}` ends it"
    )
    message = f"campaign {cid} interrupted ({exc.signame}); no run is left running and its state is saved: {after}"
    print(f"attune: {message}", file=sys.stderr)
    if as_json:
        emit_json(_result(state, repo, cid, status="interrupted", message=message))
    return exc.exit_code


def _report(repo: Path, state: Campaign, facts: LaunchFacts, as_json: bool) -> int:
    """The campaign's summary once the command has driven it (with ``--json``: :func:`_result`)."""
    from bot.campaign.report import render_campaign_summary
    from bot.drive.lifecycle import status_of

    if as_json:
        status = status_of(state, None, facts.forge)
        emit_json(
            _result(
                state, repo, state.id, status=status, message=f"campaign {state.id} {status}: {state.finish_reason}"
            )
        )
        return EXIT_OK
    print(render_campaign_summary(state))  # markdown as it is: never re-wrapped, and its [links] are not rich markup
    lb = repo / "leaderboard.md"
    measured = not any(r.simulated for r in state.baseline)  # a simulated campaign files nothing on the board
    if facts.forge == "local" and lb.exists() and state.phase == "finished" and measured:
        print(lb.read_text())
    return EXIT_OK


def _drive(
    repo: Path,
    recipe_rel: str,
    cid: str,
    *,
    policy: str,
    facts: Any,
    as_json: bool,
    begin: Callable[[Any], Any],
    shown: Any = None,
) -> int:
    """Drive campaign ``cid`` with ``begin(executor)`` (start, resume or stop) under its lock, with Ctrl-C and
    SIGTERM handled; report the result. ``shown``: the campaign as it starts, for the live progress display on a
    terminal (:mod:`bot.cli.progress`; none with ``--json`` or when stdout is not a terminal)."""
    from bot.cli.progress import CampaignDisplay, wanted
    from bot.drive import crashpoints
    from bot.drive.interrupt import GracefulStop, Interrupted
    from bot.drive.local import build_executor

    out = console()
    folder = _campaigns(repo) / cid
    locks = _take_locks(repo, cid, facts.forge)
    display = CampaignDisplay(out, shown) if shown is not None and wanted(as_json) else contextlib.nullcontext()
    lines = None if as_json else _progress(out)
    on_event = lines
    if isinstance(display, CampaignDisplay) and lines is not None:

        def on_event(state, action, event) -> None:  # the lines as before, and the display
            lines(state, action, event)
            display.on_event(state, action, event)

    try:
        with GracefulStop() as stopper, display:
            facts.save(folder)
            executor = build_executor(
                repo,
                recipe_rel,
                policy=policy,
                forge=facts.forge,
                seed=facts.seed,
                on_event=on_event,
                progress=display.message if isinstance(display, CampaignDisplay) else None,
                cache_dir=Path(facts.cache_dir) if facts.cache_dir else None,
            )
            stopper.guard(executor)
            crashpoints.arm(executor)
            try:
                state = begin(executor)
            except Interrupted as exc:
                return _interrupted(repo, cid, exc, executor.states.load(cid), facts.forge, as_json)
    finally:
        _release(locks)
    return _report(repo, state, facts, as_json)


def _check_flags(budget: float, max_steps: int | None) -> None:
    """``--budget`` a positive, finite number (nan and inf are floats too); ``--max-steps`` 1 or more."""
    if not (math.isfinite(budget) and budget > 0):
        raise UsageError(f"--budget: expected a positive, finite number of device-hours; got {budget}")
    if max_steps is not None and max_steps < 1:
        raise UsageError(f"--max-steps: expected a whole number of steps, 1 or more; got {max_steps}")


def _check_committed(repo: Path, recipe_rel: str, forge: str) -> None:
    """The local forge branches every step from the recipe as committed on the base branch and merges kept steps
    into the working tree: a recipe with uncommitted changes, or one git does not track, would be tuned as it is not
    on disk and fail at the first merge. The in-memory forge (``--forge none``) reads the file as it is."""
    from bot.core.repo import staged, uncommitted

    if forge != "local":
        return
    why = uncommitted(repo, repo / recipe_rel)
    if why is not None:
        raise UsageError(
            f"{recipe_rel}: {why}; a campaign's steps branch from the recipe as committed: "
            f"commit it first (`git -C {repo} add {recipe_rel} && git -C {repo} commit`)"
        )
    held = staged(repo)
    if held:
        raise UsageError(
            f"{repo}: {len(held)} staged change(s) ({', '.join(held[:3])}{', ...' if len(held) > 3 else ''}); a "
            "local-forge campaign merges its kept steps into this checkout, and git refuses to merge into "
            f"an index with staged changes: commit or unstage them first (`git -C {repo} restore --staged .`)"
        )


def _check_results(repo: Path, forge: str) -> None:
    """A campaign with the local forge ends by regenerating ``leaderboard.md`` from ``results/``: a file there that is
    not a run record would stop it at its end, after every run; refuse it before the first
    (:class:`bot.campaign.leaderboard.LeaderboardError`, one line naming the file and field)."""
    from bot.campaign.leaderboard import check_results

    if forge == "local":
        check_results(repo)


PAST = {"resume": "resumed", "stop": "stopped"}  # the words of "it cannot be ..."


def _new_id(repo: Path, recipe: Any, campaign_id: str | None) -> str:
    """``--id`` when given (a new one), else ``<recipe>-<date>-<time>`` (``-2``, ``-3``, ... when taken). An id is
    taken by a stored campaign or by the step branches of one whose state is gone: the local forge finds a step by
    its branch, so a new campaign of that id would take an old branch for its own step."""
    from bot.campaign.new_campaign import new_campaign_id
    from bot.core.repo import step_branches

    if campaign_id is not None:
        if not CAMPAIGN_ID.match(campaign_id):
            raise UsageError(
                f"--id {campaign_id!r}: expected letters, digits, '.', '_' and '-' (it names a folder and git branches)"
            )
        if _state_path(repo, campaign_id).exists():
            raise UsageError(
                f"--id {campaign_id}: that campaign exists; `attune campaign resume {campaign_id} --repo {repo}` continues it"
            )
        old = step_branches(repo, campaign_id)
        if old:
            raise UsageError(
                f"--id {campaign_id}: {len(old)} branch(es) of an earlier campaign of that id exist ({old[0]}, ...); "
                f"choose another id, or delete them (`git -C {repo} branch -D {' '.join(old)}`)"
            )
        return campaign_id
    cid = base = new_campaign_id(recipe)
    for k in range(2, 1000):  # two campaigns started within one second
        if not _state_path(repo, cid).exists() and not step_branches(repo, cid):
            break
        cid = f"{base}-{k}"
    return cid


def _fit_to_budget(state: Campaign, recipe: Any, text: str, cache: Path) -> tuple[Campaign, str]:
    """The set-up's cost estimated before anything is written (:mod:`bot.campaign.setupcost`): a simulated run's
    from the simulator, a real one's only once its first run is in (the campaign fits the set-up then); the
    calibration runs not in the cache. A budget that cannot hold the set-up and one trial is refused, naming the
    smallest that can; one that holds them scaled down says so (the note answered)."""
    from bot.campaign.gate_calls import fresh_calibration_runs
    from bot.campaign.setupcost import fit_setup, sim_run_cost

    state = state.model_copy(
        update={
            "run_cost_estimate": sim_run_cost(recipe),
            "calibration_runs_planned": fresh_calibration_runs(
                text, recipe, cache, baseline_repeats=state.baseline_warmup_runs + state.baseline_runs_wanted - 1
            ),
        }
    )
    fit = fit_setup(state)
    if fit.refusal:
        raise UsageError(f"--budget {state.budget:g}: {fit.refusal.removeprefix('budget: ')}")
    return state.model_copy(update=fit.updates), fit.note


def _run_campaign(
    repo: Path,
    recipe_rel: str,
    *,
    budget: float,
    policy: str,
    forge: str,
    as_json: bool,
    seed: int = 0,
    cache_dir: Path | None = None,
    campaign_id: str | None = None,
    max_steps: int | None = None,
) -> int:
    """Start a campaign; every check on the flags and the recipe comes first, so a refused one leaves nothing."""
    from bot.campaign.measurement_settings import measurement_options
    from bot.campaign.new_campaign import new_state
    from bot.core.recipe import load_recipe
    from bot.core.repo import Repo, current_branch
    from bot.drive.lifecycle import LaunchFacts
    from bot.runner import check_runnable

    _check_flags(budget, max_steps)
    recipe = load_recipe(repo / recipe_rel)
    check_runnable(recipe, repo / recipe_rel)
    _check_committed(repo, recipe_rel, forge)
    _check_results(repo, forge)
    cid = _new_id(repo, recipe, campaign_id)
    options = measurement_options(recipe.cluster.launcher)  # e.g. a warm-up run first on this machine
    if max_steps is not None:
        options["max_steps"] = max_steps
    base = (current_branch(repo) or "") if forge == "local" else ""  # the branch its kept steps merge into
    state = new_state(recipe, recipe_rel, budget=budget, policy=policy, campaign_id=cid, base_branch=base, **options)
    state, note = _fit_to_budget(state, recipe, (repo / recipe_rel).read_text(), cache_dir or Repo(repo).work)
    if not as_json:
        console().print(
            f"[bold]attune campaign[/] {cid}: {recipe_rel} in {repo} — policy {policy}, budget {budget} device-hours\n"
            f"  Ctrl-C stops it (resumable: `attune campaign resume {cid} --repo {repo}`)"
        )
        if note:
            console().print(f"  {note}", markup=False)
    facts = LaunchFacts(forge=forge, seed=seed, cache_dir=str(cache_dir) if cache_dir else None)
    return _drive(
        repo,
        recipe_rel,
        cid,
        policy=policy,
        facts=facts,
        as_json=as_json,
        begin=lambda ex: ex.start(state),
        shown=state,
    )


# ----------------------------------------------------------------------------- commands
def cmd_campaign_run(args: argparse.Namespace) -> int:
    from bot.core.repo import repo_of_recipe

    path = Path(args.recipe).resolve()
    if not path.exists():
        raise UsageError(f"{args.recipe}: no such recipe")
    repo = repo_of_recipe(path).root
    return _run_campaign(
        repo,
        str(path.relative_to(repo)),
        budget=args.budget,
        policy=args.policy,
        forge=args.forge,
        as_json=args.json,
        seed=args.seed,
        campaign_id=args.id,
        max_steps=args.max_steps,
    )


def cmd_demo(args: argparse.Namespace) -> int:
    from bot.core.repo import find_repo
    from bot.drive.local import scratch_clone

    home = find_repo()  # the working directory's repository: the demo tunes a scratch clone of it
    rel = (args.recipe or DEMO_RECIPE).removeprefix("recipes/")
    if not rel.endswith(".yaml") or ".." in Path(rel).parts or Path(rel).is_absolute():
        raise UsageError(
            f"--recipe: expected a recipe under recipes/ such as {', '.join(DEMO_RECIPES)}; got {args.recipe!r}"
        )
    if not (home.recipes / rel).is_file():
        raise UsageError(f"{home.recipes / rel}: no such recipe (run the demo from a checkout of ATTUNE)")
    _check_flags(args.budget, None)  # before the scratch clone is made
    repo = scratch_clone(home.root)
    # the gate's calibration runs are cached in this checkout's .attune/, so a second demo reuses them
    return _run_campaign(
        repo,
        f"recipes/{rel}",
        budget=args.budget,
        policy=args.policy,
        forge="local",
        as_json=args.json,
        cache_dir=home.work,
    )


def _summary_as_it_stands(state: Campaign, status: str) -> str:
    """The campaign's summary. One that finished but whose summary and finish actions are still pending says so, not
    "finished": the summary those actions commit is rendered while they are pending, so the report cannot tell."""
    from bot.campaign.report import render_campaign_summary

    return render_campaign_summary(state, status if state.phase == "finished" and state.pending else None)


def cmd_campaign_show(args: argparse.Namespace) -> int:
    repo = _repo_root(args.repo)
    state = _stored(repo, args.id)
    status = _status(repo, state)
    print(f"status: {status}\n")
    print(_summary_as_it_stands(state, status))
    return EXIT_OK


def cmd_campaign_list(args: argparse.Namespace) -> int:
    from bot.cli.leaderboard import repo_root
    from bot.drive.lifecycle import list_campaigns

    if args.repo is not None:
        repo_root(args.repo)  # a folder that is not an ATTUNE repository is an error, as for `attune leaderboard`
    repo = _repo_root(args.repo)
    rows = list_campaigns(_campaigns(repo))
    if args.json:
        emit_json({"repo": str(repo), "campaigns": [r.model_dump() for r in rows]})
        return EXIT_OK
    if not rows:
        print(f"no campaigns under {_campaigns(repo)}")
        return EXIT_OK
    table = [("id", "recipe", "phase", "steps", "gain", "spent/budget dh", "status")]
    for r in rows:
        table.append(
            (
                r.id,
                r.recipe,
                r.phase,
                f"{r.steps} ({r.kept} kept)",
                f"{r.gain:+.1%}",
                f"{r.spent:.4g}/{r.budget:.4g}",
                r.status,
            )
        )
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return EXIT_OK


def _facts_for(repo: Path, cid: str, command: str):
    from pydantic import ValidationError

    from bot.core.records import first_problem
    from bot.drive.lifecycle import LAUNCH, LaunchFacts

    folder = _campaigns(repo) / cid
    try:
        facts = LaunchFacts.load(folder)
    except OSError as exc:
        raise UsageError(
            f"{folder / LAUNCH}: cannot read how the campaign was started: {exc.strerror or exc}"
        ) from None
    except ValueError as exc:  # pydantic's ValidationError (a damaged file), or a byte that is not UTF-8
        why = first_problem(exc) if isinstance(exc, ValidationError) else "not UTF-8 text"
        raise UsageError(f"{folder / LAUNCH}: not the campaign's launch facts: {why}") from None
    if (
        facts.forge != "local" and command == "resume"
    ):  # stop ends it: that needs its state only (lifecycle's docstring)
        raise UsageError(
            f"{cid}: ran with --forge {facts.forge} (its steps were kept in memory); it cannot be {PAST[command]} "
            f"(`attune campaign stop {cid} --repo {repo}` ends it)"
        )
    return facts


def _check_base_branch(repo: Path, state: Campaign, command: str) -> None:
    """A local-forge campaign merges its kept steps, and commits its summary, into the branch checked out: refuse to
    ``resume`` or ``stop`` it on a branch other than the one it started on. A state that recorded none (written before
    the base branch was recorded, or an in-memory forge's) goes on with the branch checked out, as it always did."""
    from bot.core.repo import current_branch

    if not state.base_branch:
        return
    here = current_branch(repo)
    if here != state.base_branch:
        raise UsageError(
            f"{state.id}: started on branch {state.base_branch}, but {here or 'no branch'} is checked out in {repo}; "
            f"`git -C {repo} checkout {state.base_branch}` first, then {command} it (its steps and summary land on the branch checked out)"
        )


def cmd_campaign_resume(args: argparse.Namespace) -> int:
    repo = _repo_root(args.repo)
    state = _stored(repo, args.id)
    if state.phase == "finished" and not state.pending:
        return _already_finished(repo, state, args.json)
    facts = _facts_for(repo, args.id, "resume")
    _check_base_branch(repo, state, "resume")
    if not (repo / state.recipe_path).is_file():
        raise UsageError(
            f"{repo / state.recipe_path}: the campaign's recipe is not in the checkout (check out its base branch)"
        )
    if not args.json:
        console().print(
            f"[bold]attune campaign resume[/] {args.id}: {state.phase}, {len(state.steps)} steps, "
            f"spent {state.spent:.4f}/{state.budget:.4f} device-hours"
        )
    return _drive(
        repo,
        state.recipe_path,
        args.id,
        policy=state.policy,
        facts=facts,
        as_json=args.json,
        begin=lambda ex: ex.resume(args.id),
        shown=state,
    )


def cmd_campaign_stop(args: argparse.Namespace) -> int:
    from bot.drive.lifecycle import CampaignBusy, CampaignLock, holder

    repo = _repo_root(args.repo)
    state = _stored(repo, args.id)
    if state.phase == "finished" and not state.pending:
        return _already_finished(repo, state, args.json)
    facts = _facts_for(repo, args.id, "stop")
    _check_base_branch(repo, state, "stop")
    folder = _campaigns(repo) / args.id
    with _lock_errors():
        pid = holder(folder)
    if pid:  # another process runs it: it stops at a safe point, with nothing left running, and lets go
        print(f"attune: stopping process {pid}, which runs campaign {args.id}", file=sys.stderr)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        try:
            with _lock_errors():
                CampaignLock(folder, args.id).wait(STOP_WAIT_S).release()
        except CampaignBusy:
            message = f"process {pid} still runs campaign {args.id} after {STOP_WAIT_S:.0f}s; not stopped"
            print(f"attune: {message}", file=sys.stderr)
            if args.json:
                emit_json(_result(state, repo, args.id, status=f"running (pid {pid})", message=message))
            return EXIT_FAILED
    why = "stopped by `attune campaign stop`"
    return _drive(
        repo,
        state.recipe_path,
        args.id,
        policy=state.policy,
        facts=facts,
        as_json=args.json,
        begin=lambda ex: ex.stop(args.id, why=why),
    )


def register(sub: Any) -> None:
    from bot.agent import POLICIES
    from bot.drive.local import FORGES

    c = sub.add_parser("campaign", help="run, list, show, resume or stop a tuning campaign").add_subparsers(
        dest="campaign_cmd", required=True
    )
    r = c.add_parser("run", help="tune a recipe inside a device-hour budget")
    r.add_argument("recipe")
    r.add_argument("--budget", type=float, required=True, help="device-hours (devices x wall hours)")
    r.add_argument("--policy", choices=POLICIES, default="heuristic")
    r.add_argument(
        "--forge",
        choices=FORGES,
        default="local",
        help="local: steps on git branches of the recipe's repository, kept ones merged (default); none: steps kept in memory, nothing committed (cannot be resumed)",
    )
    r.add_argument(
        "--seed", type=int, default=0, help="the seed of the random, tpe and gp policies' own draws (default 0)"
    )
    r.add_argument("--id", default=None, help="the campaign's id (default: <recipe>-<date>-<time>)")
    r.add_argument("--max-steps", type=int, default=None, help="end the campaign after this many steps (default 50)")
    r.add_argument("--json", action="store_true")
    r.set_defaults(func=cmd_campaign_run)
    li = c.add_parser(
        "list", help="the campaigns of a repository: phase, steps, gain, spent/budget, running or resumable"
    )
    li.add_argument(
        "--repo",
        default=None,
        help="the repository (default: $ATTUNE_REPO, else the one at or above the working directory)",
    )
    li.add_argument("--json", action="store_true")
    li.set_defaults(func=cmd_campaign_list)
    s = c.add_parser("show", help="the PR-like history of a campaign")
    s.add_argument("id")
    s.add_argument(
        "--repo",
        default=None,
        help="the repository (default: $ATTUNE_REPO, else the one at or above the working directory)",
    )
    s.set_defaults(func=cmd_campaign_show)
    for name, func, text in (
        ("resume", cmd_campaign_resume, "continue a campaign that was interrupted or killed"),
        ("stop", cmd_campaign_stop, "end a campaign: its open step closed, its summary committed"),
    ):
        p = c.add_parser(name, help=text)
        p.add_argument("id")
        p.add_argument(
            "--repo",
            default=None,
            help="the repository (default: $ATTUNE_REPO, else the one at or above the working directory)",
        )
        p.add_argument("--json", action="store_true")
        p.set_defaults(func=func)

    d = sub.add_parser("demo", help="a real local campaign on the CPU recipe, in a scratch clone")
    d.add_argument(
        "--recipe",
        default=None,
        metavar="RECIPE",
        help=f"a recipe under recipes/ (default {DEMO_RECIPE}; the MoE example: {DEMO_RECIPES[1]})",
    )
    d.add_argument("--budget", type=float, default=0.12, help="device-hours (default 0.12: about 7 minutes of runs)")
    d.add_argument("--policy", choices=POLICIES, default="heuristic")
    d.add_argument("--json", action="store_true")
    d.set_defaults(func=cmd_demo)
