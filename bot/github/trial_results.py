"""A trial's report job: read what the self-hosted job left, feed it to the campaign, then gate, report, merge or
close, advance and dispatch the next run (all decisions in bot.campaign; actions executed by the one executor).

What the run job leaves in the downloaded artifact directory:

- a run (baseline, trial, re-measure): ``record.json`` (``attune run --out``), fed as ``RunFinished``;
- a calibration: ``calibrated.json`` (``attune github calibrate --out``), fed as ``Calibrated``.

Nothing there (the runner died, the artifact expired or was never uploaded) or something unreadable is a result
too: a run is fed as a crash whose reason says the record was missing, a calibration as "no loss band" (tier-R/N
steps then fail closed). The handler answers only the run the campaign waits for (same kind, step, attempt and
measured sha), so a re-delivered result changes nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from bot import campaign as cm
from bot.core.records import RunRecord
from bot.forge.github import GitHubForge
from bot.github.ports import RUNNER_ACTIONS, github_executor, load_state, run_key, run_kind

RECORD_FILE = "record.json"
CALIBRATED_FILE = "calibrated.json"


def _read(path: Path, model: Any) -> tuple[Any, str]:
    """(the parsed file, "") or (None, why not)."""
    if not path.is_file():
        return None, f"no {path.name} in the run's artifact"
    try:
        return model.model_validate_json(path.read_text()), ""
    except (OSError, ValueError, ValidationError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return None, f"{path.name} could not be read ({first[:200]})"


def handle(forge: GitHubForge, result_dir: Path, *, campaign: str, issue: int, pr: int, sha: str,
           run_job_result: str = "success", kind: str = "", attempt: int = 0, **driver_kw: Any) -> str:
    """Handle one finished ``trial.yml`` run; answers a one-line summary of what was done."""
    stored = load_state(forge, issue)
    if stored is None or stored.campaign.id != campaign:
        raise ValueError(f"issue #{issue} holds no state for campaign {campaign!r}")
    state = stored.campaign
    action = state.pending[0] if state.pending else None
    if not isinstance(action, RUNNER_ACTIONS):
        return "ignored: the campaign is not waiting for a run (already handled)"
    want_kind, n, want_attempt = run_kind(action)
    if (kind and kind != want_kind) or (attempt and attempt != want_attempt):
        return f"ignored: the campaign waits for {run_key(action)}, not this {kind or 'run'} (attempt {attempt or '?'})"
    if want_kind in ("trial", "confirm"):
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
    if want_kind == "calibrate":
        calibrated, why = _read(Path(result_dir) / CALIBRATED_FILE, cm.Calibrated)
        if calibrated is None:
            calibrated = cm.Calibrated(note=f"no loss band: the calibration left no result ({why}; run job: {job}); "
                                            "tier-R/N steps fail closed")
        ports.put(state.id, "calibration.json", calibrated.model_dump_json(indent=1) + "\n")
        state = executor.feed(state, calibrated)
        band = "a loss band" if calibrated.band is not None else "no loss band"
        return f"campaign {state.id}: calibrated ({band}); phase {state.phase}"
    record, why = _read(Path(result_dir) / RECORD_FILE, RunRecord)
    name = run_key(action)
    if record is not None:
        where = ports.put_run(state.id, name, record)
        run = cm.RunRef.of(record, kind=want_kind, n=n, attempt=want_attempt, ref=where)
    else:
        run = cm.RunRef(kind=want_kind, n=n, attempt=want_attempt, outcome="crash",
                        reason=f"the run record was missing: {why} (run job: {job})")
    state = executor.feed(state, cm.RunFinished(run=run))
    return f"campaign {state.id}: {want_kind} run {run.outcome}; phase {state.phase}"
