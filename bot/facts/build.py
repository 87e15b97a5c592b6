"""Model facts of a torchtitan workload: its config resolved, its model built on the meta device, cached on disk.

``model_facts(module, config, overrides)`` resolves the config with torchtitan's own ConfigManager, builds
``cfg.model_spec.model`` under ``torch.device("meta")`` (no memory, ~0.1 s even for 671 B parameters), and derives the
structure, exact parameter counts, FLOPs per token and activation memory per layer (:class:`ModelFacts`). Results are
cached per (module, config, overrides, torchtitan version, the module file's content when it is the user's own) under
``$ATTUNE_CACHE_DIR`` (default ``~/.cache/attune``)/``model-facts``.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.metadata
import importlib.util
import io
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from bot.core.recipe import global_overrides
from bot.core.records import atomic_write_text
from bot.facts.activation import layer_bytes_per_token
from bot.facts.derive import count_params, spec_from_config
from bot.facts.flops import flops_per_token
from bot.facts.spec import ModelSpec

AC_MODES = ("none", "selective", "full")
FACTS_VERSION = 2  # bump when what is derived changes: older cache entries are rebuilt


class FactsError(Exception):
    """The workload's model could not be resolved or built; the message names the field or the import."""


class ModelFacts(BaseModel):
    """What every consumer needs to know about one workload's model, derived from the built model."""

    module: str
    config: str
    overrides: list[str] = Field(default_factory=list)
    torchtitan_version: str
    spec: ModelSpec
    seq_len: int
    flops_fwd_per_token: float = Field(description="forward FLOPs per token at seq_len (torchtitan's convention / 3)")
    flops_bwd_per_token: float = Field(description="backward FLOPs per token at seq_len (2x forward)")
    activation_bytes_per_token: dict[str, dict[str, float]] = Field(
        description="bytes one layer keeps per token, by layer kind (dense, moe) and AC mode (none, selective, full)"
    )
    family_notes: list[str] = Field(default_factory=list, description="what the built model does not reveal")
    facts_version: int = FACTS_VERSION


def torchtitan_version() -> str:
    try:
        return importlib.metadata.version("torchtitan")
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def cache_dir() -> Path:
    return Path(os.environ.get("ATTUNE_CACHE_DIR") or Path.home() / ".cache" / "attune") / "model-facts"


@contextlib.contextmanager
def importable(root: Path | None) -> Iterator[None]:
    """``root`` on ``sys.path`` for the duration (a model module kept in the tuning repository)."""
    if root is None or str(root) in sys.path:
        yield
        return
    sys.path.insert(0, str(root))
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(str(root))


def _module_stamp(module: str, root: Path | None) -> str:
    """A hash of the module's file when it is not an installed package's (the user's model may change)."""
    with importable(root):
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            return "unfound"
    origin = getattr(spec, "origin", None)
    if not origin or "site-packages" in origin or not Path(origin).is_file():
        return "installed"
    return hashlib.sha256(Path(origin).read_bytes()).hexdigest()[:16]


def _key(module: str, config: str, overrides: list[str], root: Path | None) -> str:
    raw = json.dumps(
        [FACTS_VERSION, module, config, global_overrides(overrides), torchtitan_version(), _module_stamp(module, root)]
    )
    return hashlib.sha256(raw.encode()).hexdigest()[:24]


def _missing_package(module: str) -> str | None:
    """The package whose absence keeps the module's config registry from importing (None: none is missing)."""
    try:
        importlib.import_module(f"{module}.config_registry")
    except ImportError as exc:
        if exc.name and exc.name.split(".")[0] != module.split(".")[0]:
            return str(exc)
    except Exception:  # noqa: BLE001 - the registry's own code failed: not a missing package
        return None
    return None


def _import_problem(module: str, exc: ImportError) -> str:
    """An import failure, blamed on the module when it is the module, else on the package the config needs (torchtitan
    reports a registry whose own imports fail as the module not importing: the registry is imported again to tell)."""
    if "not installed" not in str(exc):
        missing_package = _missing_package(module)
        if missing_package:
            return f"workload.config: needs a package that is not installed here: {missing_package}"[:400]
    missing = getattr(exc, "name", None)
    if "not installed" in str(exc) or (
        missing and not module.startswith(missing) and missing.split(".")[0] != module.split(".")[0]
    ):
        return f"workload.config: needs a package that is not installed here: {exc}"[:400]
    return f"workload.module: cannot import {module!r}: {exc}"[:400]


# torchtitan's low-precision converters (float8, MXFP8, NVFP4) refuse to be configured without a recent GPU. The model's
# structure does not depend on them, so on a host without one their capability checks are answered as on an SM100 GPU.
_CONVERTER_MODULES = (
    "torchtitan.components.quantization.float8",
    "torchtitan.components.quantization.mx",
    "torchtitan.components.quantization.nvfp4",
)
QUANTIZED_NOTE = "low-precision converters configured as on an SM100 GPU (this host has none); structure unchanged"
SM100 = (10, 0)


@contextlib.contextmanager
def converters_as_on(capability: tuple[int, int]) -> Iterator[None]:
    """torchtitan's converter capability checks answered as a GPU of CUDA ``capability`` would answer them (a host
    without that GPU: this machine, a Slurm login node); restored after."""
    saved: list[tuple[Any, Any]] = []
    for name in _CONVERTER_MODULES:
        try:
            mod: Any = importlib.import_module(name)  # torchtitan's: untyped
        except ImportError:
            continue
        if hasattr(mod, "has_cuda_capability"):
            saved.append((mod, mod.has_cuda_capability))
            mod.has_cuda_capability = lambda major, minor: (major, minor) <= capability
    try:
        yield
    finally:
        for mod, fn in saved:
            mod.has_cuda_capability = fn


def _resolve(module: str, config: str, overrides: list[str]):
    try:
        return _resolve_once(module, config, overrides), False
    except FactsError as exc:
        if "only supported on" not in str(exc):
            raise
    with converters_as_on(SM100):
        return _resolve_once(module, config, overrides), True


def _resolve_once(module: str, config: str, overrides: list[str]):
    from torchtitan.config import ConfigManager

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            return ConfigManager().parse_args(["--module", module, "--config", config, *global_overrides(overrides)])
    except SystemExit:
        lines = [ln.strip("│ ").strip() for ln in err.getvalue().splitlines() if ln.strip("│╭╰─ ").strip()]
        raise FactsError("torchtitan refused the arguments: " + " ".join(lines[:6])[:400]) from None
    except ImportError as exc:
        raise FactsError(_import_problem(module, exc)) from None
    except Exception as exc:  # a config function's own check, or a registry whose imports failed ("not found")
        missing = _missing_package(module)
        if missing:
            raise FactsError(f"workload.config: needs a package that is not installed here: {missing}"[:400]) from None
        raise FactsError(
            f"workload.config: {module}:{config} does not resolve: {type(exc).__name__}: {exc}"[:400]
        ) from None


def derive(module: str, config: str, overrides: list[str] | None = None, *, model_id: str = "") -> ModelFacts:
    """Resolve and build the model (no cache); see the module docstring."""
    import torch

    overrides = list(overrides or [])
    cfg, quantized = _resolve(module, config, overrides)
    model_cfg = cfg.model_spec.model
    try:
        with (
            torch.device("meta"),
            contextlib.redirect_stdout(io.StringIO()),
            converters_as_on(SM100) if quantized else contextlib.nullcontext(),
        ):
            model = model_cfg.build()
    except ImportError as exc:
        raise FactsError(f"workload.config: building {config} needs a package that is missing: {exc}"[:400]) from None
    except Exception as exc:
        raise FactsError(f"workload.config: {config} does not build: {type(exc).__name__}: {exc}"[:400]) from None
    total, routed = count_params(model)
    try:
        spec = spec_from_config(
            model_cfg,
            model_id=model_id or f"{module}:{config}",
            source=f"torchtitan {torchtitan_version()} {module}.{config}",
            n_params=total,
            routed_params=routed,
        )
    except (ValueError, ValidationError) as exc:
        raise FactsError(f"workload.config: {config}: {exc}"[:400]) from None
    seq = int(cfg.training.seq_len)
    fpt = flops_per_token(spec, seq).total
    act = {
        kind: {mode: layer_bytes_per_token(spec, mode, moe=kind == "moe") for mode in AC_MODES}
        for kind, n in (("dense", spec.n_dense_layers), ("moe", spec.n_moe_layers))
        if n
    }
    notes = [QUANTIZED_NOTE] if quantized else []
    if spec.attention == "mla":
        notes.append("latent attention: no KV-head count; K and V are counted per query head")
    if spec.sliding_window:
        notes.append(
            f"sliding window {spec.sliding_window} on {spec.n_window_layers} of {spec.n_layers} layers; "
            "FLOPs follow torchtitan's convention (full attention)"
        )
    if spec.n_shared_experts:
        notes.append("shared experts: counted as one SwiGLU of the configured width")
    return ModelFacts(
        module=module,
        config=config,
        overrides=overrides,
        torchtitan_version=torchtitan_version(),
        spec=spec,
        seq_len=seq,
        flops_fwd_per_token=fpt / 3,
        flops_bwd_per_token=2 * fpt / 3,
        activation_bytes_per_token=act,
        family_notes=notes,
    )


def model_facts(
    module: str, config: str, overrides: list[str] | None = None, *, root: Path | None = None, model_id: str = ""
) -> ModelFacts:
    """Facts of the workload, from the disk cache or built (:func:`derive`); ``root``: the tuning repository."""
    overrides = list(overrides or [])
    path = cache_dir() / f"{_key(module, config, overrides, root)}.json"
    if path.is_file():
        with contextlib.suppress(OSError, ValueError, ValidationError):
            facts = ModelFacts.model_validate_json(path.read_text())
            if facts.facts_version == FACTS_VERSION:
                return facts.model_copy(
                    update={"spec": facts.spec.model_copy(update={"id": model_id or facts.spec.id})}
                )
    with importable(root):
        facts = derive(module, config, overrides, model_id=model_id)
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, facts.model_dump_json(indent=1))
    return facts
