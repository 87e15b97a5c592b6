"""Recipe files: the YAML a campaign tunes, validated with pydantic, edited one lever at a time.

A recipe says what to train (``workload``), on what (``cluster``), what the tuner may change
(``levers``, one per line), what it must never change (``pinned``: the objective), the
environment and the benchmark length. Pinned values are checked against ``PIN_TYPES`` (a seed
is an integer, a learning rate a positive finite number) and every number in a recipe is finite.
:func:`set_lever` edits a recipe with ruamel.yaml round-trip so that the git diff is exactly one
line (a CRLF file keeps its CRLF line ends) and comments and order survive; a refused edit leaves
the file byte-identical. Recipes are read as UTF-8 (:func:`bot.core.textfile.read_utf8`): any
other encoding is a one-line :class:`RecipeError`.
"""

from __future__ import annotations

import contextlib
import io
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap
from ruamel.yaml.error import YAMLError

from bot.core import levers as lever_catalog
from bot.core.records import Scalar, atomic_write_text, content_hash
from bot.core.slurm import SlurmSettings
from bot.core.textfile import NotText, read_utf8

REQUIRED_PINS = {
    "training.global_batch_size": "the global batch size",
    "training.seq_len": "the sequence length",
    "optimizer.lr": "the learning rate",
    "lr_scheduler.total_steps": "the schedule length",
    "debug.seed": "the seed",
}
# pinned keys that are checked against the resolved config but cannot be set on the CLI
PIN_ALIASES = {
    "optimizer.lr": "optimizer.param_groups.0.optimizer_kwargs.lr",
    "optimizer.weight_decay": "optimizer.param_groups.0.optimizer_kwargs.weight_decay",
    "optimizer.eps": "optimizer.param_groups.0.optimizer_kwargs.eps",
}
MAX_BENCH_STEPS = 1_000_000  # a benchmark measures tens of steps; more is a typo (and an overflow further on)

MAX_SEQ_LEN = 2**24  # tokens: above the longest context any published pre-training recipe trains (a typo beyond it)
MAX_PIN_INT = 2**31 - 1  # an integer pin beyond a 32-bit int is a typo (steps, batch sizes, seeds)


@dataclass(frozen=True)
class PinType:
    """What a pinned key's value must be: ``kind`` (the type), ``ok`` (its range), ``most`` (an int's largest) and
    ``expected`` (the range in words)."""

    kind: Literal["int", "number", "bool", "choice"]
    expected: str = ""
    ok: Callable[[Any], bool] = lambda _: True
    choices: tuple[str, ...] = ()
    most: int = MAX_PIN_INT  # the largest an "int" pin may be


def _positive(v: float) -> bool:
    return v > 0


def _non_negative(v: float) -> bool:
    return v >= 0


# The kinds of the pinned keys that torchtitan 0.3.0 reads as numbers, flags or choices (the shipped recipes' pins and
# the gate benchmark's, bot/bench/gate_faults.py). Any other pinned key may be any scalar (a path, a name), but a finite one.
PIN_TYPES: dict[str, PinType] = {
    # -1 is torchtitan's "local batch x data parallel": valid here, refused separately by the gate's config check
    "training.global_batch_size": PinType(
        "int",
        f"a positive integer up to {MAX_PIN_INT:,} or -1 (local batch x data parallel)",
        lambda v: v > 0 or v == -1,
    ),
    "training.seq_len": PinType("int", f"a positive integer up to {MAX_SEQ_LEN:,}", _positive, most=MAX_SEQ_LEN),
    "lr_scheduler.total_steps": PinType("int", f"a positive integer up to {MAX_PIN_INT:,}", _positive),
    "lr_scheduler.warmup_steps": PinType("int", f"an integer from 0 to {MAX_PIN_INT:,}", _non_negative),
    "debug.seed": PinType("int", f"an integer from 0 to {MAX_PIN_INT:,}", _non_negative),
    "dataloader.data_seed": PinType("int", f"an integer from 0 to {MAX_PIN_INT:,}", _non_negative),
    "optimizer.lr": PinType("number", "a positive finite number", _positive),
    "optimizer.weight_decay": PinType("number", "a finite number >= 0", _non_negative),
    "optimizer.eps": PinType("number", "a positive finite number", _positive),
    "training.max_norm": PinType("number", "a positive finite number", _positive),
    "lr_scheduler.min_lr_factor": PinType("number", "a number from 0 to 1", lambda v: 0 <= v <= 1),
    "lr_scheduler.decay_type": PinType("choice", choices=("linear", "sqrt", "cosine")),
    "debug.deterministic": PinType("bool"),
    "debug.moe_force_load_balance": PinType("bool"),
}


def global_overrides(overrides: list[str]) -> list[str]:
    """A workload's overrides before torchtitan's ``activation-checkpoint:`` subcommand: the recipe states the AC mode
    and its flags as levers (``attune recipe init`` reads them from the overrides' resolved config)."""
    out: list[str] = []
    for tok in overrides:
        if tok.startswith("activation-checkpoint:"):
            break
        out.append(tok)
    return out


class RecipeError(Exception):
    """A recipe problem, already phrased as one line: ``file:line: field: what was expected``."""


class Workload(BaseModel):
    model_config = ConfigDict(extra="forbid")
    module: str = Field(min_length=1)
    config: str = Field(min_length=1)
    model: str | None = None  # model id (leaderboard label; names a zoo model the config does not build)
    # torchtitan overrides as on the torchrun command line, verbatim (`attune recipe init ... -- OVERRIDES`); passed
    # right after --module/--config, before the recipe's pins and levers
    overrides: list[str] = Field(default_factory=list)


class Cluster(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    hardware: str = Field(min_length=1)
    nodes: int = Field(ge=1)
    devices_per_node: int = Field(ge=1)
    launcher: Literal["local", "slurm", "sim"]
    usd_per_device_hour: float = Field(ge=0)
    runner_labels: list[str] = Field(default_factory=list)
    slurm: SlurmSettings | None = None  # launcher slurm: partition, account, time limit, ... (bot.core.slurm)

    @property
    def devices(self) -> int:
        return self.nodes * self.devices_per_node


class Bench(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    steps: int = Field(ge=2)
    warmup_steps: int = Field(ge=1)

    @field_validator("steps")
    @classmethod
    def _steps_bounded(cls, steps: int) -> int:
        if steps > MAX_BENCH_STEPS:
            raise ValueError(f"expected at most {MAX_BENCH_STEPS:,} steps (a benchmark measures tens); got {steps:,}")
        return steps

    @model_validator(mode="after")
    def _warmup_below_steps(self) -> Bench:
        if self.warmup_steps >= self.steps:
            raise ValueError(f"warmup_steps: {self.warmup_steps} must be below steps ({self.steps})")
        return self


# What a recipe's ``env`` may set: thread counts, the communication libraries, the CUDA allocator, logging — the
# knobs of a training run, never a variable that changes which code runs (a self-hosted runner executes the recipe:
# LD_PRELOAD, PYTHONPATH, PATH, BASH_ENV or PYTHONSTARTUP would let a pull request run code of its own there).
ENV_ALLOWED_PREFIXES = (
    "OMP_",
    "GOMP_",
    "KMP_",
    "MKL_",
    "OPENBLAS_",
    "NCCL_",
    "TORCH_NCCL_",
    "GLOO_",
    "TORCH_DISTRIBUTED_",
    "CUDA_DEVICE_MAX_CONNECTIONS",
    "PYTORCH_CUDA_ALLOC_CONF",
    "PYTORCH_ALLOC_CONF",
    "TORCH_LOGS",
    "TORCH_CPP_LOG_LEVEL",
    "TORCHINDUCTOR_",
    "ATTUNE_TORCH_THREADS",
    "LOGLEVEL",
    "TOKENIZERS_PARALLELISM",
    "CUBLAS_WORKSPACE_CONFIG",
    "NVTE_",
)
ENV_ALLOWED_TEXT = (
    "threads (OMP_*, GOMP_*, MKL_*), NCCL_*/GLOO_*, the CUDA allocator, torch logging and inductor settings, "
    "never a plugin, library, file, folder or remote cache"
)


# ... and within those prefixes, never one that names code, a file, a folder or a server to load from or write to:
# NCCL_NET_PLUGIN / NCCL_TUNER_PLUGIN (a library NCCL loads), OMP_TOOL_LIBRARIES (an OpenMP tool library),
# TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE / TORCHINDUCTOR_REDIS_HOST (compiled code fetched from a server),
# TORCHINDUCTOR_CACHE_DIR (compiled code loaded from a folder: the runner owns it), NCCL_DEBUG_FILE, TORCH_LOGS_OUT.
# Any name with one of these words (between underscores) is refused.
ENV_REFUSED_WORDS = frozenset(
    {
        "PLUGIN",
        "PLUGINS",
        "LIB",
        "LIBS",
        "LIBRARY",
        "LIBRARIES",
        "TOOL",
        "TOOLS",
        "PRELOAD",
        "PATH",
        "PATHS",
        "FILE",
        "FILES",
        "DIR",
        "DIRS",
        "OUT",
        "REMOTE",
        "REDIS",
        "MEMCACHE",
        "MEMCACHED",
        "HOST",
        "PORT",
        "URL",
        "ADDR",
        "SERVER",
        "CONF",
        "CONFIG",
    }
)
# names ending in CONF/CONFIG that are settings, not files
ENV_SETTINGS = frozenset({"PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "CUBLAS_WORKSPACE_CONFIG"})


def env_allowed(name: str) -> bool:
    """Whether a recipe may set the environment variable ``name`` (``ENV_ALLOWED_PREFIXES``, none of
    ``ENV_REFUSED_WORDS``)."""
    if not (name.isupper() and name.replace("_", "").isalnum() and name.startswith(ENV_ALLOWED_PREFIXES)):
        return False
    return name in ENV_SETTINGS or not ENV_REFUSED_WORDS & set(name.split("_"))


def _shown(value: Any) -> str:
    """``value`` as the error shows it: the plain Python repr (never a ruamel scalar class's)."""
    for plain in (bool, int, float, str):
        if isinstance(value, plain):
            return repr(plain(value))
    return repr(value)


def _pin_problem(key: str, value: Any) -> str | None:
    """What is wrong with the pinned ``key: value`` (``PIN_TYPES``; any number finite), or None."""
    if value is None or not isinstance(value, bool | int | float | str):
        return f"expected a number, text or true/false, got {_shown(value)}"
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if number and not isinstance(value, str) and not math.isfinite(value):
        return f"expected a finite number, got {_shown(value)}"
    pin = PIN_TYPES.get(key)
    if pin is None:
        return None
    if pin.kind == "bool":
        return None if isinstance(value, bool) else f"expected true or false, got {_shown(value)}"
    if pin.kind == "choice":
        return None if value in pin.choices else f"expected one of {', '.join(pin.choices)}, got {_shown(value)}"
    if pin.kind == "int" and not (number and isinstance(value, int)):
        return f"expected an integer, got {_shown(value)}"
    if pin.kind == "number" and not number:
        return f"expected a number, got {_shown(value)}"
    within = pin.kind != "int" or isinstance(value, int) and value <= pin.most  # beyond its bound: a typo
    return None if pin.ok(value) and within else f"expected {pin.expected}, got {_shown(value)}"


class Recipe(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    id: str | None = None
    source: str | None = None
    workload: Workload
    cluster: Cluster
    levers: dict[str, Scalar] = Field(default_factory=dict)
    pinned: dict[str, Scalar]
    env: dict[str, str] = Field(default_factory=dict)
    bench: Bench

    @field_validator("levers", mode="before")
    @classmethod
    def _check_levers(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        out: dict[str, Scalar] = {}
        for name, raw in value.items():
            try:
                out[str(name)] = lever_catalog.parse_value(str(name), raw)
            except lever_catalog.LeverError as exc:
                # always "<lever>: <what>", so the error can point at the lever's own line
                raise ValueError(f"{name}: {str(exc).removeprefix(f'{name}: ')}") from None
        return out

    @field_validator("pinned", mode="before")
    @classmethod
    def _check_pinned_values(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        for key, raw in value.items():
            problem = _pin_problem(str(key), raw)
            if problem:  # always "<key>: <what>", so the error can point at the pin's own line
                raise ValueError(f"{key}: {problem}")
        return value

    @field_validator("env", mode="before")
    @classmethod
    def _env_as_text(cls, value: Any) -> Any:
        if isinstance(value, dict):
            bad = [str(k) for k in value if not env_allowed(str(k))]
            if bad:
                raise ValueError(
                    f"{bad[0]}: not an allowed variable; a recipe may set only {ENV_ALLOWED_TEXT} "
                    "(never one that changes what code runs: LD_PRELOAD, PYTHONPATH, PATH, BASH_ENV, ...)"
                )
            return {str(k): str(v) for k, v in value.items()}
        return value

    @model_validator(mode="after")
    def _check_pins(self) -> Recipe:
        missing = [f"{k} ({why})" for k, why in REQUIRED_PINS.items() if k not in self.pinned]
        if missing:
            raise ValueError("pinned must include " + ", ".join(missing))
        both = sorted(set(self.pinned) & set(self.levers))
        if both:
            raise ValueError(f"levers: {both[0]}: is also pinned (part of the objective); the tuner may not change it")
        return self

    @property
    def name(self) -> str:
        return self.id or f"{self.workload.model or self.workload.config}/{self.cluster.hardware}"

    @property
    def devices(self) -> int:
        return self.cluster.devices

    @property
    def launch_env(self) -> dict[str, str]:
        """The environment every rank gets: ``env`` and what the runner levers set (``host.allocator``)."""
        return {**self.env, **lever_catalog.runner_env(self.levers)}

    def with_lever(self, lever: str, value: Scalar) -> Recipe:
        return self.model_copy(update={"levers": {**self.levers, lever: lever_catalog.parse_value(lever, value)}})


def _yaml() -> YAML:
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.width = 4096
    yaml.indent(mapping=2, sequence=4, offset=2)
    return yaml


def _line_of(data: Any, loc: tuple[Any, ...]) -> int | None:
    """1-based line of the deepest key in ``loc`` that the YAML tree knows."""
    line = None
    node = data
    for key in loc:
        if isinstance(node, CommentedMap) and key in node:
            with contextlib.suppress(KeyError, TypeError):
                line = node.lc.key(key)[0] + 1
            node = node[key]
        else:
            break
    return line


def parse_recipe_text(text: str, source: str = "<recipe>") -> Recipe:
    """Parse and validate recipe text; raise :class:`RecipeError` with file, line and field."""
    from bot.core.yamlguard import yaml_problem  # no anchors or aliases, at most 1 MiB

    if (problem := yaml_problem(text, source)) is not None:
        raise RecipeError(problem)
    try:
        data = _yaml().load(text)
    except YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark else source
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise RecipeError(f"{where}: not valid YAML: {problem}") from None
    if not isinstance(data, dict):
        raise RecipeError(f"{source}:1: expected a mapping with workload, cluster, levers, pinned, env, bench")
    try:
        return Recipe.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(err["loc"])
        # dotted lever names are single keys; keep them whole
        msg = err["msg"].removeprefix("Value error, ")
        if loc in (("levers",), ("pinned",)) and ": " in msg:  # a lever or pin value error names its key first
            name, _, msg = msg.partition(": ")
            loc = (loc[0], name)
        elif loc == ("bench",) and msg.startswith("warmup_steps: "):
            loc, msg = ("bench", "warmup_steps"), msg.removeprefix("warmup_steps: ")
        elif not loc and msg.startswith("levers: "):  # a pinned key that is also a lever
            name, _, msg = msg.removeprefix("levers: ").partition(": ")
            loc = ("levers", name)
        elif not loc and msg.startswith("pinned"):
            loc = ("pinned",)
        field = ".".join(str(p) for p in loc) or "recipe"
        line = _line_of(data, loc) or 1  # a missing top-level field: point at the file's start
        where = f"{source}:{line}"
        if err["type"] == "missing":
            msg = "required field is missing"
        elif err["type"] == "extra_forbidden":
            msg = "unknown field"
        return_text = f"{where}: {field}: {msg}"
        raise RecipeError(return_text) from None


def read_recipe_text(path: str | Path) -> str:
    """The recipe file's text, line ends as they are; :class:`RecipeError` if unreadable or not UTF-8."""
    p = Path(path)
    try:
        return read_utf8(p)
    except NotText as exc:
        raise RecipeError(str(exc)) from None
    except OSError as exc:
        raise RecipeError(f"{p}: cannot read recipe: {exc.strerror or exc}") from None


def load_recipe(path: str | Path) -> Recipe:
    p = Path(path)
    return parse_recipe_text(read_recipe_text(p), str(p))


def field_error(path: str | Path, loc: tuple[str, ...], message: str) -> str:
    """One line, ``file:line: a.b: message``, for a problem found in a valid recipe's field ``loc``.

    For checks that need more than the recipe itself (is this hardware known to the simulator?):
    the error still points at the field's own line, as a validation error would.
    """
    p = Path(path)
    try:
        data = _yaml().load(read_utf8(p))
    except (OSError, YAMLError, NotText):
        data = None
    line = _line_of(data, loc) or 1
    return f"{p}:{line}: {'.'.join(loc)}: {message}"


def recipe_hash(path: str | Path) -> str:
    """The content hash of the recipe file's text (exactly as stored: CRLF line ends included)."""
    return content_hash(read_recipe_text(path))


def set_lever_text(text: str, lever: str, value: Scalar | str, *, source: str = "<recipe>") -> str:
    """Return ``text`` with one lever set to ``value``; only that line changes (or one is added).

    The value is parsed and checked against the lever catalog first; the result is re-validated
    as a whole recipe. Raises :class:`RecipeError` and changes nothing on a refused edit. A text
    with CRLF line ends (its first line's) comes back with CRLF line ends: ruamel.yaml writes
    ``\n``, so the edit is made on the ``\n`` text and the file's line end restored.
    """
    crlf = text.split("\n", 1)[0].endswith("\r")
    original, text = text, text.replace("\r\n", "\n")
    parse_recipe_text(text, source)  # the current file must be valid
    try:
        parsed = lever_catalog.parse_value(lever, value)
    except lever_catalog.LeverError as exc:
        raise RecipeError(f"{source}: levers.{lever}: {str(exc).removeprefix(lever + ': ')}") from None
    yaml = _yaml()
    data = yaml.load(text)
    if lever in (data.get("pinned") or {}):
        raise RecipeError(f"{source}: levers.{lever}: is pinned (part of the objective); the tuner may not change it")
    if data.get("levers") is None:
        raise RecipeError(f"{source}: levers: the recipe needs a levers mapping before a lever can be set")
    data["levers"][lever] = parsed
    buf = io.StringIO()
    yaml.dump(data, buf)
    new_text = buf.getvalue()
    parse_recipe_text(new_text, source)
    if new_text == text:
        return original  # nothing changed: not even a mixed file's line ends
    return new_text.replace("\n", "\r\n") if crlf else new_text


def set_lever(
    path: str | Path, lever: str, value: Scalar | str, check: Callable[[Recipe], str | None] | None = None
) -> Scalar:
    """Edit one lever of the recipe file in place (atomic write); returns the parsed value. ``check``: why the edited
    recipe could not run (None: it can); a reason refuses the edit and the file is left as it was."""
    p = Path(path)
    text = read_recipe_text(p)
    pinned = parse_recipe_text(text, str(p)).pinned
    if lever in pinned or lever in PIN_ALIASES:
        raise RecipeError(
            f"{p}: pinned.{lever}: part of the objective (what is trained), not a lever; a campaign never "
            "changes it — edit pinned: by hand if you mean to train something else"
        )
    new_text = set_lever_text(text, lever, value, source=str(p))
    problem = check(parse_recipe_text(new_text, str(p))) if check is not None and new_text != text else None
    if problem:
        raise RecipeError(
            f"{p}: levers.{lever}: {value} would leave a recipe that cannot run: {problem}; the recipe is "
            "unchanged (to change several levers at once, edit the file by hand)"
        )
    if new_text != text:
        atomic_write_text(p, new_text)
    return lever_catalog.parse_value(lever, value)
