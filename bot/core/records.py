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
from typing import Any, Literal, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bot.core.textfile import read_utf8

# stopped: early, clearly slower. Slurm's own (bot.runner.slurm): node_fail (a node of the job failed), preempted
# (preempted or requeued: not a measurement), pending_timeout (queued longer than the recipe's queue budget);
# Slurm's time limit is a timeout. Every outcome but ok and stopped is a failed run.
Outcome = Literal[
    "ok", "oom", "crash", "hang", "timeout", "invalid", "stopped", "node_fail", "preempted", "pending_timeout"
]
MEASURED_OUTCOMES: tuple[str, ...] = (
    "ok",
    "stopped",
)  # runs that measured the candidate (stopped: early, clearly slower)
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
    # a diverged run logs "loss: nan": written as NaN (not pydantic's default null, which reads back as no number),
    # so its record round-trips and the gate sees the divergence
    model_config = ConfigDict(ser_json_inf_nan="constants")
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
    # a diverged run logs "loss: nan": written as NaN (not pydantic's default null, which reads back as no number),
    # so its record round-trips and the gate sees the divergence
    model_config = ConfigDict(ser_json_inf_nan="constants")
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
    # a diverged run logs "loss: nan": written as NaN (not pydantic's default null, which reads back as no number),
    # so its record round-trips and the gate sees the divergence
    model_config = ConfigDict(ser_json_inf_nan="constants")
    schema_version: int = Field(default=SCHEMA_VERSION, ge=1, le=SCHEMA_VERSION)  # a newer ATTUNE's record: refused
    run_id: str
    created_at: str = Field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    recipe_id: str
    recipe_path: str | None = None
    recipe_hash: str
    model: str | None = None
    moe: bool | None = None  # a mixture-of-experts model (from the model's facts; None: not known)
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


class Setting(BaseModel):
    """One lever at one value (what an enabler enables)."""

    lever: str
    value: Scalar


class Consulted(BaseModel):
    """What an agent policy relied on for one proposal (the ``claude`` policy's tool calls): the moves it listed, the
    layouts it asked a prediction for, the lessons it read, its answers sent back as invalid, the tokens and turns it
    spent, and why its fallback decided instead ("" when it decided itself)."""

    moves: list[str] = Field(default_factory=list)
    predictions: list[str] = Field(default_factory=list)
    lessons: list[str] = Field(default_factory=list)
    rejected: list[str] = Field(default_factory=list)
    tokens: int = 0
    turns: int = 0
    fallback: str = ""


class Prediction(BaseModel):
    """What the policy saw and expected when it proposed a change: the move that acted, the incumbent's diagnosis in
    one clause, and the predicted throughput gain with its basis (None: no prediction)."""

    move: str
    saw: str = ""
    gain: float | None = None
    basis: str = ""


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
    # the policy's prediction that this layout is slower than the incumbent by more than its model's error (why, with
    # the figures): the trial is not run; the step closes with no gain at no cost (bot.agent.speed_screen)
    predicted_slower: str = ""
    # what an enabler enables, in chain order: the change stacked on it first, then each later link ([] for none).
    # None: not stated -- a record stored before this field (its why then says it: "enabler of X=v[, then Y=w]: ...")
    enables: list[Setting] | None = None
    # a blind probe of generic exploration (or a link that carries one's reason); None: not stated, as above
    probe: bool | None = None
    # what an agent policy relied on for it (its tool calls, tokens, fallback); None: not an agent's, or stored before
    consulted: Consulted | None = None
    # what the default policy saw and expected (bot.agent.heuristic.explain); None: another policy, or stored before
    prediction: Prediction | None = None

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
    """A short hash of ``text``, the same whatever its line ends: a CRLF recipe read raw (``git show``, ``read_utf8``)
    and one read with newline translation (``Path.read_text``) must match, or a runner's record would not match the
    recipe it ran."""
    return hashlib.sha256(text.replace("\r\n", "\n").encode()).hexdigest()[:16]


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
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_record(record: RunRecord, path: str | os.PathLike[str]) -> Path:
    atomic_write_text(path, record.model_dump_json(indent=1) + "\n")
    return Path(path)


M = TypeVar("M", bound=BaseModel)


class RecordFileError(ValueError):
    """A JSON record file (a run record, a campaign's state) does not hold what it should; the message is one line
    naming the file and its first wrong field."""


# pydantic's error types in the words of the project's other one-line errors
EXPECTED = {
    "int_type": "expected a whole number",
    "int_parsing": "expected a whole number",
    "int_from_float": "expected a whole number",
    "float_type": "expected a number",
    "float_parsing": "expected a number",
    "finite_number": "expected a finite number",
    "bool_type": "expected true or false",
    "bool_parsing": "expected true or false",
    "string_type": "expected a string",
    "dict_type": "expected an object",
    "model_type": "expected an object",
    "list_type": "expected a list",
}


def expected_of(err: Any) -> str:
    """What a field should hold, for one pydantic error (``ValidationError.errors()``), in the project's words."""
    kind, ctx = err.get("type", ""), err.get("ctx") or {}
    if kind == "value_error" and "error" in ctx:
        return str(ctx["error"])
    if kind in ("greater_than_equal", "greater_than"):
        bound = ctx.get("ge", ctx.get("gt"))
        return f"expected a number {'>=' if kind == 'greater_than_equal' else '>'} {bound:g}"
    if kind in EXPECTED:
        return EXPECTED[kind]
    msg = str(err.get("msg", "invalid value")).removeprefix("Value error, ")
    return msg.replace("Input should be ", "expected ", 1).replace("String should ", "expected text to ", 1)


def first_problem(exc: ValidationError, missing: str = "missing (a required field)") -> str:
    """The first problem of ``exc`` in one line: ``a.b: what was expected; got X`` (``a.b``, the field's dotted path;
    ``missing`` says what a missing field is)."""
    err = exc.errors(include_url=False)[0]
    loc = ".".join(str(part) for part in err.get("loc", ()))
    kind, msg = err.get("type", ""), str(err.get("msg", "invalid value")).removeprefix("Value error, ")
    if kind == "json_invalid":
        return f"not valid JSON ({msg.removeprefix('Invalid JSON: ')})"
    if kind == "missing":
        return f"{loc}: {missing}"
    if not loc and kind in ("model_type", "dict_type"):
        return f"expected a JSON object; got {type(err.get('input')).__name__}"
    if not loc:  # a check across fields
        return msg
    got = repr(err.get("input"))
    return f"{loc}: {expected_of(err)}; got {got if len(got) <= 60 else got[:57] + '...'}"


def parse_model(text: str, model: type[M], source: str, what: str) -> M:
    """``text`` (JSON) as ``model``, or :class:`RecordFileError`: ``source: not a <what>: field: problem``."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RecordFileError(
            f"{source}:{exc.lineno}: not a {what}: not valid JSON ({exc.msg}, column {exc.colno})"
        ) from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise RecordFileError(f"{source}: not a {what}: {first_problem(exc)}") from None


def read_model(path: str | os.PathLike[str], model: type[M], what: str) -> M:
    """The JSON file ``path`` as ``model``. ``OSError`` passes through (callers phrase it); bad UTF-8 is
    :class:`~bot.core.textfile.NotText`, any other problem :class:`RecordFileError`: both ``ValueError``, one line."""
    return parse_model(read_utf8(path), model, str(path), what)


def read_record(path: str | os.PathLike[str]) -> RunRecord:
    """A run record file (see :func:`read_model` for its errors)."""
    return read_model(path, RunRecord, "run record")


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
