"""The pydantic records that cross boundaries: RunRecord, Change, Verdict.

A RunRecord is what one run of a recipe leaves behind (JSON on disk); the campaign, the gate,
the reports and the leaderboard read nothing else. ``simulated`` records come from the cluster
simulator and never enter ``results/`` or ``leaderboard.md``.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field

# stopped: early, clearly slower. Slurm's own (bot.runner.slurm): node_fail (a node of the job failed), preempted
# (preempted or requeued: not a measurement), pending_timeout (queued longer than the recipe's queue budget);
# Slurm's time limit is a timeout. Every outcome but ok and stopped is a failed run.
Outcome = Literal["ok", "oom", "crash", "hang", "timeout", "invalid", "stopped", "node_fail", "preempted", "pending_timeout"]
MEASURED_OUTCOMES: tuple[str, ...] = ("ok", "stopped")  # runs that measured the candidate (stopped: early, clearly slower)
Scalar = bool | int | float | str
Tier = Literal["B", "R", "N", "X"]

SCHEMA_VERSION = 1


class StackFingerprint(BaseModel):
    python: str
    torch: str
    torchtitan: str
    cuda: str | None = None
    driver: str | None = None
    device_name: str = "cpu"
    device_family: Literal["cpu", "cuda", "rocm", "xpu", "sim"] = "cpu"

    def key(self) -> str:
        """A short id of the stack (for calibration caches and the leaderboard)."""
        parts = [self.device_family, self.device_name, f"torch{self.torch}", f"titan{self.torchtitan}"]
        return "/".join(parts)


class LaunchShape(BaseModel):
    launcher: Literal["local", "slurm", "sim"]
    nodes: int
    devices_per_node: int
    world_size: int
    command: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    # launcher slurm: the job, its final state as Slurm reports it, its nodes and how long it queued (not charged)
    job_id: str | None = None
    job_state: str | None = None
    node_list: str | None = None
    queue_wait_s: float | None = None


class StepMetric(BaseModel):
    step: int
    loss: float
    grad_norm: float | None = None
    tps: float | None = None  # tokens/s per device, as torchtitan logs it
    memory_gib: float | None = None
    memory_pct: float | None = None
    tflops: float | None = None
    mfu: float | None = None
    time_s: float | None = None  # seconds since the first step line (log timestamps)


class RunSummary(BaseModel):
    steps_completed: int = 0
    tokens_per_step: int | None = None
    tps_median: float | None = None  # per device, steps after warm-up (never step 1)
    tps_cv: float | None = None
    step_time_median_s: float | None = None
    mfu: float | None = None
    peak_memory_gib: float | None = None
    memory_capacity_gib: float | None = None
    loss_first: float | None = None
    loss_last: float | None = None
    wall_s: float = 0.0
    startup_s: float | None = None  # launch to first step line
    device_hours: float = 0.0  # devices x wall hours, start-up included


class RunRecord(BaseModel):
    schema_version: int = SCHEMA_VERSION
    run_id: str
    created_at: str = Field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    recipe_id: str
    recipe_path: str | None = None
    recipe_hash: str
    model: str | None = None
    hardware: str
    levers: dict[str, Scalar] = Field(default_factory=dict)
    pinned: dict[str, Scalar] = Field(default_factory=dict)
    git_commit: str | None = None
    stack: StackFingerprint
    launch: LaunchShape
    outcome: Outcome
    reason: str = ""
    steps: list[StepMetric] = Field(default_factory=list)
    spans_ms: dict[str, float] = Field(default_factory=dict)  # median per-step span durations (JSONL)
    breakdown: dict[str, float] = Field(default_factory=dict)  # simulator's step-time breakdown (s)
    summary: RunSummary = Field(default_factory=RunSummary)
    usd_per_device_hour: float = 0.0
    simulated: bool = False
    hook: str | None = None  # test-only workload hook, if any
    seed_checkpoint: str | None = None  # key of the seed checkpoint the run loaded (bot/runner/seed.py), if any
    log_tail: str = ""

    @property
    def devices(self) -> int:
        return self.launch.world_size

    def losses(self) -> list[float]:
        return [s.loss for s in self.steps]

    def grad_norms(self) -> list[float | None]:
        return [s.grad_norm for s in self.steps]


class Change(BaseModel):
    """One lever change: exactly one lever, with the rationale and the lessons behind it."""

    lever: str
    before: Scalar | None = Field(default=None, alias="from")
    after: Scalar = Field(alias="to")
    why: str = ""
    lessons: list[str] = Field(default_factory=list)
    policy: str = "heuristic"
    stacked_on: int | None = None  # OOM retry: applied on top of that step's layout
    extra: dict[str, Scalar] = Field(default_factory=dict)  # black-box baselines only: more levers
    # a stepping stone: legal on its own only so that the next change can be (e.g. the local batch that keeps
    # the pinned global batch when a degree changes); it is gated but not run -- the change it enables is
    # stacked on it and measured against the incumbent
    enabler: bool = False
    # a configuration measured before and left *undecided* (its interval straddled the minimum gain) may be proposed
    # again only with a reason (e.g. a quieter machine, a larger pair cap); a decided one never
    retry_reason: str = ""
    # the most device-hours this step's runs may spend while its estimate stays below the minimum worthwhile gain,
    # set by the policy (None: only the campaign's budget bounds it): a run that does not fit is not started and the
    # step closes *undecided*, not kept -- e.g. the default policy's no-gain allowance, so a futile probe of a recipe
    # already at its optimum cannot overrun it by a step's pairs (``Campaign.step_run_fits``)
    max_device_hours: float | None = Field(default=None, gt=0.0)
    # the policy's prediction that this layout runs out of memory (why, with the figures): the trial is not run but
    # recorded as out of memory at no cost, so the policy's out-of-memory retries follow as from a failed start
    predicted_oom: str = ""

    model_config = {"populate_by_name": True}

    def title(self) -> str:
        return f"{self.lever}: {self.before} -> {self.after}"


class Stop(BaseModel):
    """A policy's decision to stop the campaign."""

    why: str
    policy: str = "heuristic"


class CheckResult(BaseModel):
    """One gate check's result with its evidence."""

    name: str
    passed: bool
    reasons: list[str] = Field(default_factory=list)
    evidence: dict[str, Any] = Field(default_factory=dict)


class Verdict(BaseModel):
    """The gate's verdict: config stage then convergence stage."""

    verdict: Literal["ok", "reject"]
    stage: Literal["config", "convergence"]
    tier: Tier = "B"
    reasons: list[str] = Field(default_factory=list)
    checks: list[CheckResult] = Field(default_factory=list)
    requires_convergence: bool = True
    precision_change: bool = False

    @property
    def ok(self) -> bool:
        return self.verdict == "ok"


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file and rename: never a half-written file."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        # mkstemp makes the file 0600: keep the mode of the file replaced (else the umask default)
        try:
            mode = target.stat().st_mode & 0o7777
        except FileNotFoundError:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_record(record: RunRecord, path: str | os.PathLike[str]) -> Path:
    atomic_write_text(path, record.model_dump_json(indent=1) + "\n")
    return Path(path)


def read_record(path: str | os.PathLike[str]) -> RunRecord:
    return RunRecord.model_validate(json.loads(Path(path).read_text()))


class RecordReader(Protocol):
    """Where a campaign's run records are read from (the driver's record store): a policy or a report asks for a
    run's record by its reference (a path locally, ``branch:path`` on GitHub) and gets None when there is none."""

    def read(self, ref: str) -> RunRecord | None: ...


class FileRecords:
    """A :class:`RecordReader` over local record files (the reference is the path)."""

    def read(self, ref: str) -> RunRecord | None:
        if not ref:
            return None
        try:
            return read_record(ref)
        except (OSError, ValueError):
            return None
