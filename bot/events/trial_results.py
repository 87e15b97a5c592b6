"""A trial's report job: read the run record, feed ``RunFinished`` to the campaign, gate, report, merge or close,
advance and dispatch the next run (all decisions in bot.campaign; actions executed by the shared driver)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bot import campaign as cm
from bot.events.github_driver import RUN_ACTIONS, GitHubDriver, load_state, run_kind
from bot.forge.github import GitHubForge
from bot.records import RunRecord, read_record


def handle(forge: GitHubForge, result_dir: Path, *, campaign: str, issue: int, pr: int, sha: str,
           run_job_result: str = "success", **driver_kw: Any) -> str:
    stored = load_state(forge, issue)
    if stored is None or stored.campaign.id != campaign:
        raise ValueError(f"issue #{issue} holds no state for campaign {campaign!r}")
    state = stored.campaign
    action = state.pending[0] if state.pending else None
    if not isinstance(action, RUN_ACTIONS):
        return "ignored: the campaign is not waiting for a run (already handled)"
    kind, n, attempt = run_kind(action)
    if kind != "baseline" and state.step(n).number != pr:
        return f"ignored: the campaign waits for step {n}, not PR #{pr}"
    driver = GitHubDriver(forge=forge, stored=stored, **driver_kw)
    path = Path(result_dir) / "record.json"
    record: RunRecord | None = read_record(path) if path.is_file() else None
    name = f"baseline-{attempt}" if kind == "baseline" else f"step-{n}-{kind}"
    if record is not None:
        where = driver.put_record_file(state.id, f"campaigns/{state.id}/{name}.json", record.model_dump_json(indent=1) + "\n",
                                       f"attune: {kind} record ({name}, {sha[:12]})")
        run = cm.RunRef(kind=kind, n=n, attempt=attempt, outcome=record.outcome, reason=record.reason,
                        tps=record.summary.tps_median, tps_cv=record.summary.tps_cv,
                        device_hours=record.summary.device_hours, record=where, simulated=record.simulated)
    else:
        run = cm.RunRef(kind=kind, n=n, attempt=attempt, outcome="crash",
                        reason=f"no run record (run job: {run_job_result or 'unknown'})")
    state = driver.advance(cm.RunFinished(run=run))
    state = driver.loop(state)
    return f"campaign {state.id}: {kind} run {run.outcome}; phase {state.phase}"
