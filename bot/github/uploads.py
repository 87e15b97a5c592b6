"""What a self-hosted runner uploads is data, checked before the report job believes it.

The runner executes a checked sha with a read-only token, but whatever it leaves in its artifact could have been
written by anything that ran there. Before a record becomes a measurement, the report job checks it against what it
knows independently:

- ``git_commit`` is the sha it dispatched, and ``recipe_hash`` the hash of the recipe file at that sha;
- a real (not simulated) record's ``device_hours`` are >= 0 and at most the run job's wall time (from the Actions
  API) x the recipe's devices -- or, when that wall time is unknown (no run id, or the API call failed), its
  timeout in trial.yml x the devices (:func:`wall_bound`); a simulated record is only accepted for a ``launcher:
  sim`` recipe (and a real one only for a real recipe);
- it names the recipe at that sha (``recipe_id``, model, hardware, levers, pinned values, launcher and shape: the
  leaderboard files a result by them), and every number in it is finite, rates, times and amounts >= 0;
- every string field is length-capped, and the names a results path is built from (model, hardware, run id) use
  only ``[A-Za-z0-9._-]``; the stack fields the leaderboard shows only ``[A-Za-z0-9 ._+()/,:-]``;
- every number is one a run can measure (:data:`CEILINGS`: tokens/s per device, MFU in percent, TFLOP/s, memory
  share), and the launch's world size is the recipe's device count: an absurd value would break the leaderboard;
- a problem names a field by a path of at most :data:`WHERE_CAP` characters (a runner picks the dict keys);
- a calibration's loss band is recomputed here from the uploaded calibration run records, each checked like a run
  record; an uploaded band or cost is never taken as it is.

A refused upload is fed to the campaign as a crashed run whose reason says why, never as a measurement.
"""

from __future__ import annotations

import math
import re
from typing import Any

from pydantic import BaseModel

from bot.core.recipe import Recipe
from bot.core.records import RunRecord, content_hash

SAFE_NAME = re.compile(r"^[A-Za-z0-9._-]{1,100}$")
SAFE_STACK = re.compile(r"^[A-Za-z0-9 ._+()/,:-]{0,120}$")  # versions and device names: nothing Markdown reads
WHERE_CAP = 120  # characters of a field path quoted in a problem
# the most any run can measure, per field (a record above it is refused; generous: no device comes near them)
CEILINGS: dict[str, float] = {
    "tps": 1e8,
    "tps_median": 1e8,  # tokens/s per device
    "mfu": 100.0,
    "memory_pct": 100.0,  # percent
    "tflops": 1e5,  # TFLOP/s per device
    "peak_memory_gib": 1e5,
    "memory_gib": 1e5,
    "memory_capacity_gib": 1e5,
    "tokens_per_step": 1e13,
    "steps_completed": 1e9,
    "step": 1e9,
}
STRING_CAP = 4_000  # characters of any string field (a reason, a path, a name)
LOG_TAIL_CAP = 20_000  # characters of the log tail
WALL_SLACK = 1.0 + 1e-6  # rounding between the record's and the Actions API's clocks
RUN_JOB_TIMEOUT_S = 360 * 60  # trial.yml's run job `timeout-minutes` (a test holds them equal): GitHub cancels it then


class Expected(BaseModel):
    """What the report job knows about a run before reading its upload."""

    sha: str  # the sha it dispatched
    recipe_text: str  # the recipe file at that sha
    recipe: Recipe
    job_wall_s: float | None = None  # the run job's wall time (Actions API); None: unknown


def wall_bound(job_wall_s: float | None) -> tuple[float, str]:
    """The most wall seconds the run job can have run, and what says so: its wall time from the Actions API, or, when
    that is unknown (no run id, or the API call failed), the job's timeout in trial.yml -- GitHub cancels a job that
    runs longer, so no record of it can have run longer either. A missing wall time thus keeps the measurement (its
    device-hours merely bounded more loosely) instead of turning a run into a crash. The runner's own ``wall_s`` is
    never the bound: it is part of the claim being checked."""
    if job_wall_s is None:
        return float(RUN_JOB_TIMEOUT_S), "the run job's timeout (its wall time is unknown)"
    return job_wall_s, "the run job's wall time"


def _strings(value: Any, path: str = "") -> list[tuple[str, str]]:
    if isinstance(value, str):
        return [(path, value)]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in [(f"{path}.{k}", str(k)), *_strings(v, f"{path}.{k}")]]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _strings(v, f"{path}[{i}]")]
    return []


def _numbers(value: Any, path: str = "") -> list[tuple[str, float]]:
    if isinstance(value, bool):
        return []
    if isinstance(value, int | float):
        return [(path, float(value))]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _numbers(v, f"{path}.{k}")]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _numbers(v, f"{path}[{i}]")]
    return []


# measured quantities that cannot be negative (a loss may be: it is only compared, never a rate or an amount)
NON_NEGATIVE = re.compile(
    r"^\.(summary\.(?!loss_)\w+|steps\[\d+\]\.(?!loss$)\w+|spans_ms\..*|breakdown\..*|usd_per_device_hour)$"
)


def _where(path: str) -> str:
    """A field path for a problem, capped (its keys come from the runner)."""
    path = path.lstrip(".")
    return path if len(path) <= WHERE_CAP else path[: WHERE_CAP - 3] + "..."


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def identity_problem(record: RunRecord, recipe: Recipe) -> str | None:
    """A field in which ``record`` says it ran something other than ``recipe`` (the recipe at the measured sha): the
    leaderboard files and labels a result by these, so a record may not claim another model, cluster or layout."""
    claims = {
        "recipe_id": (record.recipe_id, recipe.name),
        "model": (record.model, recipe.workload.model),
        "hardware": (record.hardware, recipe.cluster.hardware),
        "levers": (record.levers, recipe.levers),
        "pinned": (record.pinned, recipe.pinned),
        "launch.launcher": (record.launch.launcher, recipe.cluster.launcher),
        "launch.nodes": (record.launch.nodes, recipe.cluster.nodes),
        "launch.devices_per_node": (record.launch.devices_per_node, recipe.cluster.devices_per_node),
    }
    for name, (got, want) in claims.items():
        if got != want:
            return f"the record's {name} {_short(got)} is not the recipe's {_short(want)} at the measured sha"
    return None


def number_problem(record: RunRecord) -> str | None:
    """The first number of ``record`` that no run measures: not finite (NaN, inf), or a negative rate, time or amount."""
    for where, number in _numbers(record.model_dump(exclude={"launch"})):
        if not math.isfinite(number):
            return f"field {_where(where)}: {number!r}, expected a finite number"
        if number < 0 and NON_NEGATIVE.match(where):
            return f"field {_where(where)}: {number!r}, expected a number >= 0"
        name = where.rsplit(".", 1)[-1]
        ceiling = CEILINGS.get(name) if where.startswith((".summary.", ".steps[")) else None
        if ceiling is not None and number > ceiling:
            return f"field {_where(where)}: {number:.6g}, more than any run measures (at most {ceiling:g})"
    return None


def record_problem(record: RunRecord, expected: Expected, *, check_hours: bool = True) -> str | None:
    """Why ``record`` cannot be believed for the run ``expected`` describes (None: it can). ``check_hours``: bound a
    real record's device-hours by the run job's wall time, or its timeout when that is unknown (:func:`wall_bound`;
    off for calibration runs and a pair's sides, whose sum is bounded instead)."""
    if record.git_commit != expected.sha:
        return f"the record's git_commit {str(record.git_commit)[:40]!r} is not the measured sha {expected.sha}"
    if record.recipe_hash != content_hash(expected.recipe_text):
        return "the record's recipe_hash is not the hash of the recipe at the measured sha"
    problem = identity_problem(record, expected.recipe) or number_problem(record)
    if problem is not None:
        return problem
    simulated = expected.recipe.cluster.launcher == "sim"
    if record.simulated != simulated:
        return f"a {'simulated' if record.simulated else 'real'} record for a {'simulated' if simulated else 'real'} recipe"
    hours = record.summary.device_hours
    if not math.isfinite(hours) or hours < 0:
        return f"device_hours {hours!r}: expected a finite number >= 0"
    if not simulated and check_hours:
        wall, what = wall_bound(expected.job_wall_s)
        if hours > expected.recipe.devices * wall / 3600.0 * WALL_SLACK:
            return (
                f"device_hours {hours:.6g} is more than {what} allows "
                f"({expected.recipe.devices} devices x {wall:.0f} s)"
            )
    for name in ("run_id", "hardware", *(("model",) if record.model else ())):
        if not SAFE_NAME.match(getattr(record, name)):
            return f"{name} {getattr(record, name)[:60]!r}: expected 1-100 of [A-Za-z0-9._-]"
    if record.launch.world_size != expected.recipe.devices:
        return f"the record's launch.world_size {record.launch.world_size} is not the recipe's {expected.recipe.devices} devices"
    for name, text in record.stack.model_dump().items():
        if text is not None and not SAFE_STACK.match(str(text)):
            return f"stack.{name} {str(text)[:60]!r}: expected 0-120 of [A-Za-z0-9 ._+()/,:-]"
    for where, text in _strings(record.model_dump(exclude={"log_tail"})):
        if len(text) > STRING_CAP:
            return f"field {_where(where)}: {len(text)} characters, more than {STRING_CAP}"
    if len(record.log_tail) > LOG_TAIL_CAP:
        return f"field log_tail: {len(record.log_tail)} characters, more than {LOG_TAIL_CAP}"
    return None
