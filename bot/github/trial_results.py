"""A trial's report job: read what the self-hosted job left, feed it to the campaign, then gate, report, merge or
close, advance and dispatch the next run (all decisions in bot.campaign; actions executed by the one executor).

What the run job leaves in the downloaded artifact directory:

- a run (baseline, trial, re-measure): ``record.json`` (``attune run --out``), fed as ``RunFinished`` once it passes
  the checks of :mod:`bot.github.uploads` (else as a crash with the reason);
- a calibration: the calibration runs' records in ``calibration/`` (``attune github calibrate``), from which the loss
  band is recomputed here and fed as ``Calibrated``; the runner's own ``calibrated.json`` is never believed.

A run that ``check`` refused (``check_refused``: its reason) never reached a runner; it is a result too, so the
campaign closes the step with the reason instead of waiting forever: a run is fed as a crash saying why check refused
it, a calibration as "no loss band" with that reason. Nothing in the artifact directory is read then.

Nothing there (the runner died, the artifact expired or was never uploaded) or something unreadable is a result
too: a run is fed as a crash whose reason says why no run record could be used, a calibration as "no loss band" (tier-R/N
steps then fail closed). The handler answers only the run the campaign waits for (same kind, step, attempt and
measured sha), so a re-delivered result changes nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from github import UnknownObjectException

from bot import campaign as cm
from bot.core.recipe import parse_recipe_text
from bot.core.records import RunRecord, read_model
from bot.drive.executor import BASELINE_RECIPE
from bot.forge.github import GitHubForge
from bot.github import comments
from bot.github.github_ports import RUNNER_ACTIONS, github_executor, load_state, run_key, run_kind, settled
from bot.github.uploads import WALL_SLACK, Expected, record_problem, wall_bound

RECORD_FILE = "record.json"
CALIBRATED_FILE = "calibrated.json"  # the runner's own summary: for its log, never read here
CALIBRATION_RUNS = "calibration"  # the calibration runs' records, one file each (bot.campaign.gate_calls.record_name)


def _read(path: Path, model: type[RunRecord]) -> tuple[RunRecord | None, str]:
    """(the parsed file, "") or (None, why not)."""
    if path.is_dir():
        return None, f"{path.name} in the run's artifact is a folder, not a file"
    if not path.is_file():
        return None, f"no {path.name} in the run's artifact"
    try:
        return read_model(path, model, "run record"), ""
    except (
        OSError,
        ValueError,
    ) as exc:  # ValueError: the file and its first wrong field, or the byte that is not UTF-8
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return None, f"{path.name} could not be read ({first.replace(str(path), path.name)[:200]})"


def expected(forge: GitHubForge, state: cm.Campaign, sha: str, job_wall_s: float | None) -> Expected:
    """What the report job knows of the run at ``sha`` without asking the runner."""
    text = forge.read_file(state.recipe_path, sha)
    return Expected(sha=sha, recipe_text=text, recipe=parse_recipe_text(text, state.recipe_path), job_wall_s=job_wall_s)


def recompute_calibration(
    result_dir: Path, reference: RunRecord | None, baseline_text: str | None, known: Expected, job: str
) -> cm.Calibrated:
    """The loss band recomputed from the uploaded calibration run records (each checked), with their cost. The plan
    comes from the recipe as the baseline ran it (the bot's own copy on the records branch)."""
    from bot.campaign.gate_calls import band_from_runs, calibration_plan, record_name

    if reference is None or baseline_text is None:
        return cm.Calibrated(note="no loss band: the baseline left no record; tier-R/N steps fail closed")
    specs = calibration_plan(baseline_text, reference)
    records: dict[str, RunRecord] = {}
    for sid, spec in specs.items():
        record, why = _read(Path(result_dir) / CALIBRATION_RUNS / record_name(sid), RunRecord)
        if record is None:
            return cm.Calibrated(note=f"no loss band: {why} (run job: {job}); tier-R/N steps fail closed")
        run_known = known.model_copy(
            update={"recipe_text": spec.recipe_text, "recipe": parse_recipe_text(spec.recipe_text, spec.label)}
        )
        problem = calibration_problem(record, run_known, spec.hook)
        if problem:
            return cm.Calibrated(
                note=f"no loss band: calibration run {spec.label} refused: {problem}; tier-R/N steps fail closed"
            )
        records[sid] = record
    # cached runs carry the cost of when they ran: the job's wall time (or its timeout when unknown) bounds it
    bound = known.recipe.devices * wall_bound(known.job_wall_s)[0] / 3600.0
    spent = min(sum(r.summary.device_hours for r in records.values()), bound)
    return band_from_runs(
        specs, records, reference, spent=spent, where="; recomputed by the report job from the uploaded runs"
    )


def calibration_problem(record: RunRecord, known: Expected, hook: str | None) -> str | None:
    """A calibration run is a variant of the baseline recipe (and may come from the runner's cache, so its commit is
    not checked): its recipe hash must be the variant's and its hook the plan's."""
    problem = record_problem(record.model_copy(update={"git_commit": known.sha}), known, check_hours=False)
    if problem is None and record.hook != hook:
        problem = f"hook {record.hook!r}, expected {hook!r}"
    return problem


def handle(
    forge: GitHubForge,
    result_dir: Path,
    *,
    campaign: str,
    issue: int,
    pr: int,
    sha: str,
    run_job_result: str = "success",
    kind: str = "",
    attempt: int = 0,
    job_wall_s: float | None = None,
    check_refused: str = "",
    base_sha: str = "",
    **driver_kw: Any,
) -> str:
    """Handle one finished ``trial.yml`` run; answers a one-line summary of what was done. ``job_wall_s``: the run
    job's wall time from the Actions API (bounds the device-hours a real record may claim); None: unknown (no run
    id, or the API call failed), and then the job's timeout bounds them instead (:func:`bot.github.uploads.wall_bound`):
    a measured run is kept, never turned into a crash for want of a timing. Applied once to the state that wins a
    race with another workflow run (``settled``)."""
    return settled(
        lambda: _handle(
            forge,
            result_dir,
            campaign=campaign,
            issue=issue,
            pr=pr,
            sha=sha,
            run_job_result=run_job_result,
            kind=kind,
            attempt=attempt,
            job_wall_s=job_wall_s,
            check_refused=check_refused,
            base_sha=base_sha,
            **driver_kw,
        )
    )


def _handle(
    forge: GitHubForge,
    result_dir: Path,
    *,
    campaign: str,
    issue: int,
    pr: int,
    sha: str,
    run_job_result: str,
    kind: str,
    attempt: int,
    job_wall_s: float | None,
    check_refused: str,
    base_sha: str = "",
    **driver_kw: Any,
) -> str:
    try:
        stored = load_state(forge, issue)
    except UnknownObjectException:  # no such issue
        if not check_refused:
            raise
        stored = None
    if stored is None or stored.campaign.id != campaign:
        if check_refused:  # a refused dispatch of no campaign (anyone's stray or forged dispatch): nothing to close
            return f"ignored: check refused a run of no campaign on issue #{issue} ({check_refused[:200]})"
        raise ValueError(f"issue #{issue} holds no state for campaign {campaign!r}")
    # writers' /attune commands whose own campaign.yml run was replaced in its concurrency group land here, before
    # the result, as if each had landed on time (a stop ends the campaign here, before another trial is dispatched)
    applied = comments.apply_pending(forge, issue, **driver_kw)
    if applied:
        stored = load_state(forge, issue)
        assert stored is not None
    said = _handled(
        forge,
        stored,
        result_dir,
        pr=pr,
        sha=sha,
        run_job_result=run_job_result,
        kind=kind,
        attempt=attempt,
        job_wall_s=job_wall_s,
        check_refused=check_refused,
        base_sha=base_sha,
        **driver_kw,
    )
    earlier = ", ".join(f"{what} (comment {cid})" for cid, what in applied)
    return said + (f"; unhandled commands applied first, in order: {earlier}" if earlier else "")


def _handled(
    forge: GitHubForge,
    stored: Any,
    result_dir: Path,
    *,
    pr: int,
    sha: str,
    run_job_result: str,
    kind: str,
    attempt: int,
    job_wall_s: float | None,
    check_refused: str,
    base_sha: str,
    **driver_kw: Any,
) -> str:
    state = stored.campaign
    action = state.pending[0] if state.pending else None
    if not isinstance(action, RUNNER_ACTIONS):
        return "ignored: the campaign is not waiting for a run (already handled)"
    want_kind, n, want_attempt = run_kind(action)
    if (kind and kind != want_kind) or (attempt and attempt != want_attempt):
        return f"ignored: the campaign waits for {run_key(action)}, not this {kind or 'run'} (attempt {attempt or '?'})"
    if want_kind in ("trial", "pair"):
        step = state.step(n)
        if step.number != pr:
            return f"ignored: the campaign waits for step {n}, not PR #{pr}"
        measured = stored.heads.get(n) or step.head_sha
        if sha != measured:
            return f"ignored: step {n} was dispatched at {measured}, this result is for {sha}"
    elif pr != 0:
        return f"ignored: the campaign waits for {run_key(action)} (no PR), not PR #{pr}"
    executor, ports = github_executor(forge, stored, **driver_kw)
    ports.result_received()
    job = run_job_result or "unknown"
    if check_refused:
        return _refused(executor, ports, state, action, check_refused[:REASON_CAP])
    known = expected(forge, state, sha, job_wall_s)
    if want_kind == "calibrate":
        reference = ports.read(state.baseline[0].record) if state.baseline else None
        calibrated = recompute_calibration(result_dir, reference, ports.get(state.id, BASELINE_RECIPE), known, job)
        ports.put(state.id, "calibration.json", calibrated.model_dump_json(indent=1) + "\n")
        state = executor.feed(state, calibrated)
        ports.settle()
        band = "a loss band" if calibrated.band is not None else "no loss band"
        return f"campaign {state.id}: calibrated ({band}); phase {state.phase}"
    if want_kind == "pair":
        assert isinstance(action, cm.MeasurePair)  # run_kind's "pair"
        run = _pair_run(forge, ports, state, action, Path(result_dir), known, base_sha, job_wall_s, job)
        state = executor.feed(state, cm.RunFinished(run=run))
        ports.settle()
        return f"campaign {state.id}: pair {want_attempt} of step {n} {run.outcome}; phase {state.phase}"
    record, why = _read(Path(result_dir) / RECORD_FILE, RunRecord)
    why = f"no usable run record: {why}"
    problem = record_problem(record, known) if record is not None else None
    if problem is not None:
        record, why = None, f"the upload was refused: {problem}"
    if record is not None:
        record = record.model_copy(update={"reason": capped(record.reason)})
        where = ports.put_run(state.id, run_key(action), record)
        run = cm.RunRef.of(record, kind=want_kind, n=n, attempt=want_attempt, ref=where)
    else:
        run = cm.RunRef(
            kind=want_kind, n=n, attempt=want_attempt, outcome="crash", reason=capped(f"{why} (run job: {job})")
        )
    state = executor.feed(state, cm.RunFinished(run=run))
    ports.settle()
    return f"campaign {state.id}: {want_kind} run {run.outcome}; phase {state.phase}"


def _pair_run(
    forge: GitHubForge,
    ports: Any,
    state: cm.Campaign,
    action: cm.MeasurePair,
    result_dir: Path,
    known: Expected,
    base_sha: str,
    job_wall_s: float | None,
    job: str,
) -> cm.RunRef:
    """A pair's two uploaded records (``incumbent/`` and ``candidate/``), each checked like a single run's against
    the sha it should have measured (the incumbent: the default branch head check-trial checked, whose recipe must
    still be the campaign's incumbent), their device-hours together bounded by the one run job's wall time (its
    timeout when that is unknown)."""
    from bot.drive.executor import pair_ref
    from bot.drive.executor import run_key as executor_run_key

    def crash(why: str) -> cm.RunRef:
        return cm.RunRef(
            kind="pair",
            n=action.n,
            attempt=action.k,
            order=action.order,
            outcome="crash",
            reason=capped(f"{why} (run job: {job})"),
        )

    if not base_sha:
        return crash("the pair's incumbent sha is unknown")
    inc_text = forge.read_file(state.recipe_path, base_sha)
    if inc_text != forge.read_file(state.recipe_path):
        return crash(f"the recipe at the pair's incumbent sha {base_sha} is not the default branch's now")
    records: dict[str, RunRecord] = {}
    for side, exp in (
        (
            "incumbent",
            Expected(sha=base_sha, recipe_text=inc_text, recipe=parse_recipe_text(inc_text, state.recipe_path)),
        ),
        ("candidate", known),
    ):
        record, why = _read(result_dir / side / RECORD_FILE, RunRecord)
        if record is None:
            return crash(f"no usable {side} record of the pair: {why}")
        problem = record_problem(record, exp.model_copy(update={"job_wall_s": job_wall_s}), check_hours=False)
        if problem:
            return crash(f"the upload was refused: {side}: {problem}")
        records[side] = record.model_copy(update={"reason": capped(record.reason)})
    hours = sum(record.summary.device_hours for record in records.values())
    wall, what = wall_bound(job_wall_s)
    if known.recipe.cluster.launcher != "sim" and hours > known.recipe.devices * wall / 3600.0 * WALL_SLACK:
        return crash(f"the upload was refused: the pair's device_hours {hours:.6g} are more than {what} allows")
    sides: dict[str, cm.RunRef] = {}  # stored only now that both sides are believed: a refused pair stores nothing
    for side, record in records.items():
        where = ports.put_run(state.id, executor_run_key(f"pair-{side}", action.n, action.k), record)
        sides[side] = cm.RunRef.of(record, kind="pair", n=action.n, attempt=action.k, ref=where)
    return pair_ref(action, sides["incumbent"], sides["candidate"], hours)


REASON_CAP = 500  # characters of a reason kept in the state (it names the sha, PR, files or field refused)


def capped(text: str, cap: int = REASON_CAP) -> str:
    """A reason as the state keeps it: at most ``cap`` characters (the runner writes up to 4,000, and the state
    comment holds 65,536 characters in all)."""
    return text if len(text) <= cap else text[: cap - 1] + "…"


def _refused(executor: Any, ports: Any, state: cm.Campaign, action: Any, reason: str) -> str:
    """Feed the run that ``check`` refused as what it is: a run that never ran (a crash saying why), or a calibration
    that gave no band."""
    want_kind, n, want_attempt = run_kind(action)
    if want_kind == "calibrate":
        calibrated = cm.Calibrated(
            note=f"no loss band: check refused the calibration run: {reason}; tier-R/N steps fail closed"
        )
        ports.put(state.id, "calibration.json", calibrated.model_dump_json(indent=1) + "\n")
        state = executor.feed(state, calibrated)
        ports.settle()
        return f"campaign {state.id}: calibration refused by check; phase {state.phase}"
    run = cm.RunRef(
        kind=want_kind, n=n, attempt=want_attempt, outcome="crash", reason=f"check refused the run: {reason}"
    )
    state = executor.feed(state, cm.RunFinished(run=run))
    ports.settle()
    return f"campaign {state.id}: {want_kind} run refused by check ({reason[:120]}); phase {state.phase}"
