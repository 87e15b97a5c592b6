"""Recipe files: the YAML a campaign tunes, validated with pydantic, edited one lever at a time.

A recipe says what to train (``workload``), on what (``cluster``), what the tuner may change
(``levers``, one per line), what it must never change (``pinned``: the objective), the
environment and the benchmark length. :func:`set_lever` edits a recipe with ruamel.yaml
round-trip so that the git diff is exactly one line and comments and order survive; a refused
edit leaves the file byte-identical.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap
from ruamel.yaml.error import YAMLError

from bot.core import levers as lever_catalog
from bot.core.records import Scalar, atomic_write_text, content_hash
from bot.core.slurm import SlurmSettings

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


class RecipeError(Exception):
    """A recipe problem, already phrased as one line: ``file:line: field: what was expected``."""


class Workload(BaseModel):
    model_config = ConfigDict(extra="forbid")
    module: str = Field(min_length=1)
    config: str = Field(min_length=1)
    model: str | None = None  # model id (simulator zoo / leaderboard)


class Cluster(BaseModel):
    model_config = ConfigDict(extra="forbid")
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
    model_config = ConfigDict(extra="forbid")
    steps: int = Field(ge=2)
    warmup_steps: int = Field(ge=1)

    @model_validator(mode="after")
    def _warmup_below_steps(self) -> Bench:
        if self.warmup_steps >= self.steps:
            raise ValueError(f"warmup_steps: {self.warmup_steps} must be below steps ({self.steps})")
        return self


# What a recipe's ``env`` may set: thread counts, the communication libraries, the CUDA allocator, logging — the
# knobs of a training run, never a variable that changes which code runs (a self-hosted runner executes the recipe:
# LD_PRELOAD, PYTHONPATH, PATH, BASH_ENV or PYTHONSTARTUP would let a pull request run code of its own there).
ENV_ALLOWED_PREFIXES = ("OMP_", "GOMP_", "KMP_", "MKL_", "OPENBLAS_", "NCCL_", "TORCH_NCCL_", "GLOO_", "TORCH_DISTRIBUTED_",
                        "CUDA_DEVICE_MAX_CONNECTIONS", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "TORCH_LOGS",
                        "TORCH_CPP_LOG_LEVEL", "TORCHINDUCTOR_", "ATTUNE_TORCH_THREADS", "LOGLEVEL", "TOKENIZERS_PARALLELISM",
                        "CUBLAS_WORKSPACE_CONFIG", "NVTE_")
ENV_ALLOWED_TEXT = "threads (OMP_*, GOMP_*, MKL_*), NCCL_*/GLOO_*, the CUDA allocator, torch logging and inductor settings"


def env_allowed(name: str) -> bool:
    """Whether a recipe may set the environment variable ``name`` (``ENV_ALLOWED_PREFIXES``)."""
    return name.isupper() and name.replace("_", "").isalnum() and name.startswith(ENV_ALLOWED_PREFIXES)


class Recipe(BaseModel):
    model_config = ConfigDict(extra="forbid")
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

    @field_validator("env", mode="before")
    @classmethod
    def _env_as_text(cls, value: Any) -> Any:
        if isinstance(value, dict):
            bad = [str(k) for k in value if not env_allowed(str(k))]
            if bad:
                raise ValueError(f"{bad[0]}: not an allowed variable; a recipe may set only {ENV_ALLOWED_TEXT} "
                                 "(never one that changes what code runs: LD_PRELOAD, PYTHONPATH, PATH, BASH_ENV, ...)")
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
        if loc == ("levers",) and ": " in msg:  # a lever value error names its lever first
            name, _, msg = msg.partition(": ")
            loc = ("levers", name)
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


def load_recipe(path: str | Path) -> Recipe:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise RecipeError(f"{p}: cannot read recipe: {exc.strerror or exc}") from None
    return parse_recipe_text(text, str(p))


def recipe_hash(path: str | Path) -> str:
    return content_hash(Path(path).read_text())


def set_lever_text(text: str, lever: str, value: Scalar | str, *, source: str = "<recipe>") -> str:
    """Return ``text`` with one lever set to ``value``; only that line changes (or one is added).

    The value is parsed and checked against the lever catalog first; the result is re-validated
    as a whole recipe. Raises :class:`RecipeError` and changes nothing on a refused edit.
    """
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
    return new_text


def set_lever(path: str | Path, lever: str, value: Scalar | str) -> Scalar:
    """Edit one lever of the recipe file in place (atomic write); returns the parsed value."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise RecipeError(f"{p}: cannot read recipe: {exc.strerror or exc}") from None
    pinned = parse_recipe_text(text, str(p)).pinned
    if lever in pinned or lever in PIN_ALIASES:
        raise RecipeError(f"{p}: pinned.{lever}: part of the objective (what is trained), not a lever; a campaign never "
                          "changes it — edit pinned: by hand if you mean to train something else")
    new_text = set_lever_text(text, lever, value, source=str(p))
    if new_text != text:
        atomic_write_text(p, new_text)
    return lever_catalog.parse_value(lever, value)
