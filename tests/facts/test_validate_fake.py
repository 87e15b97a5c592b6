"""bot.facts' analytic FLOPs, activation memory and parameter counts, checked against torch's own tools.

Every check runs torchtitan's own model (the config's model, rebuilt with torchtitan's ``varlen`` attention backend
where an operator is counted: flex attention has no backward on the CPU and its block mask cannot be built under fake
tensors; varlen has FLOP formulas and runs under fake tensors on the CPU) under ``FakeTensorMode``: shapes only, no
memory, about 15 s of CPU for the file. What is compared, and how close it must be:

- FLOPs per token (``llama3_debugmodel``, ``qwen3_moe_debug``): forward + backward (3x forward) equals torchtitan's
  ``get_nparams_and_flops`` within 0.1 % (qwen3: 6x its QK-norm weights, which the analytic count leaves out);
  ``FlopCounterMode`` over a fake forward + backward gives the matmul part (``aten.mm`` plus the routed experts'
  ``aten._grouped_mm``, which has no formula in torch: one is supplied here) within 1 % (the gap: 6x the norm
  weights, which torchtitan's convention counts as matmul parameters), and the attention
  forward x3 equal to the attention term (torchtitan's convention: no causal discount, backward = 2x forward; torch's
  backward formula also counts the flash kernel's recomputed QK^T, 2.5x forward, which the convention leaves out).
- Activation memory of one block per token (``MemTracker``, bf16, torchtitan's own AC wrappers): what the block's
  forward leaves allocated, less its output, plus its input. Full AC: exactly the layer input. No AC: the analytic
  count within 30 % of the measurement, never above it (the CPU keeps more: its unfused RMSNorm saves float32 copies).
  Selective AC: counted from torchtitan's save list (fused QKV blocks) within 1 % of the measurement for a dense
  block, a MoE block and llama3_8b's; ``SELECTIVE_SHARE`` (the fallback for other blocks) is llama3_8b's measured share.
- Parameters: exact, equal to ``sum(p.numel())`` of the built model; active = total for a dense model, and for MoE
  the total less the routed experts a token does not use (torchtitan's own split), below the total.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import io
import math
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.distributed._tools.mem_tracker import MemTracker
from torch.utils.flop_counter import FlopCounterMode
from torchtitan.config import ConfigManager
from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC
from torchtitan.models.common.attention import VarlenMetadata

from bot.facts import model_facts
from bot.facts.activation import SELECTIVE_SHARE
from bot.facts.flops import flops_per_token

DENSE = ("llama3", "llama3_debugmodel")
MOE = ("qwen3", "qwen3_moe_debug")
CPU = torch.device("cpu")


@pytest.fixture(autouse=True, scope="module")
def _facts_cache(tmp_path_factory) -> Iterator[None]:
    """The facts' disk cache in a folder of this module's own, shared by its tests (each model is derived once);
    overrides the folder-wide per-test cache of ``conftest.py``."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ATTUNE_CACHE_DIR", str(tmp_path_factory.mktemp("facts-cache")))
        yield


@functools.cache
def _resolve(module: str, config: str) -> Any:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return ConfigManager().parse_args(["--module", module, "--config", config])


def _varlen_twin(module: str, cfg: Any) -> Any:
    """The config's model config, rebuilt with torchtitan's varlen attention backend (same weights, same shapes)."""
    registry = importlib.import_module(f"torchtitan.models.{module}").model_registry
    return registry(cfg.model_spec.flavor, attn_backend="varlen").model


@contextlib.contextmanager
def _fake_bf16() -> Iterator[None]:
    """Fake CPU tensors, parameters built in bf16 (the dtype the training step computes in)."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with FakeTensorMode():
            yield
    finally:
        torch.set_default_dtype(old)


def _one_document(seq: int) -> VarlenMetadata:
    cu = torch.tensor([0, seq], dtype=torch.int32)
    return VarlenMetadata(cu_seq_q=cu, cu_seq_k=cu, max_q=seq, max_k=seq)


def _grouped_mm_flop(a_shape, b_shape, *args, out_shape=None, **kwargs) -> int:
    """FLOPs of ``aten._grouped_mm``: 2 x (output elements) x (contracted width); 2-D x 2-D groups the contraction."""
    if len(a_shape) == 2 and len(b_shape) == 2:
        return 2 * a_shape[0] * a_shape[1] * b_shape[1]
    return 2 * math.prod(out_shape) * a_shape[-1]


# --- FLOPs -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("module", "config"), [DENSE, MOE])
def test_flops_match_torchtitan_and_flop_counter(module: str, config: str) -> None:
    facts = model_facts(module, config)
    cfg = _resolve(module, config)
    seq = cfg.training.seq_len
    assert facts.seq_len == seq
    assert facts.flops_bwd_per_token == pytest.approx(2 * facts.flops_fwd_per_token)
    total = 3 * facts.flops_fwd_per_token

    with torch.device("meta"), contextlib.redirect_stdout(io.StringIO()):
        meta_model = cfg.model_spec.model.build()
    _, torchtitan_flops = cfg.model_spec.model.get_nparams_and_flops(meta_model, seq)
    assert total == pytest.approx(torchtitan_flops, rel=1e-3)

    twin = _varlen_twin(module, cfg)
    with _fake_bf16():
        model = twin.build()
        tokens = torch.zeros(1, seq, dtype=torch.long)
        with FlopCounterMode(display=False, custom_mapping={torch.ops.aten._grouped_mm: _grouped_mm_flop}) as counter:
            model(tokens, attention_masks=_one_document(seq)).float().sum().backward()
    counts = {str(op): n / seq for op, n in counter.get_flop_counts()["Global"].items()}

    split = flops_per_token(facts.spec, seq)
    matmul = counts["aten.mm"] + counts.get("aten._grouped_mm", 0)
    assert split.linear + split.expert + split.head == pytest.approx(matmul, rel=0.01)
    attn_fwd, attn_bwd = counts["torch_attn._varlen_attn"], counts["torch_attn._varlen_attn_backward"]
    assert split.attention == pytest.approx(3 * attn_fwd, rel=1e-9)
    assert attn_bwd == pytest.approx(2.5 * attn_fwd, rel=1e-9)  # torch counts the recomputed QK^T; the convention not
    if facts.spec.is_moe:
        assert split.expert > 0
        assert counts["aten._grouped_mm"] == pytest.approx(split.expert, rel=1e-9)


# --- activation memory ------------------------------------------------------------------------------------------


def _kept_per_token(model_cfg: Any, seq: int, mode: str) -> float:
    """Bytes per token one block (the first) keeps from forward to backward under AC ``mode``, by MemTracker."""
    with _fake_bf16():
        holder = nn.Module()
        holder.layers = nn.ModuleDict({"0": model_cfg.build().layers["0"]})
        if mode == "full":
            FullAC(FullAC.Config()).apply(holder)
        elif mode == "selective":
            SelectiveAC(SelectiveAC.Config()).apply(holder)
        block = holder.layers["0"]
        x = torch.empty(1, seq, model_cfg.dim, dtype=torch.bfloat16, requires_grad=True)
        masks = _one_document(seq)
        tracker = MemTracker()
        tracker.track_external(block, x)
        with tracker:
            before = tracker.get_tracker_snapshot()[CPU]["Total"]
            out = block(x, masks, None)
            after = tracker.get_tracker_snapshot()[CPU]["Total"]
            out.float().sum().backward()
    nbytes = out.numel() * out.element_size()
    return (after - before - nbytes + x.numel() * x.element_size()) / seq


@functools.cache
def _measured(module: str, config: str) -> tuple[dict[str, float], dict[str, float]]:
    """(measured, analytic) bytes per token of the config's first layer, by AC mode."""
    cfg = _resolve(module, config)
    twin = _varlen_twin(module, cfg)
    twin.layers = twin.layers[:1]
    measured = {mode: _kept_per_token(twin, cfg.training.seq_len, mode) for mode in ("none", "selective", "full")}
    facts = model_facts(module, config)
    return measured, facts.activation_bytes_per_token["moe" if facts.spec.is_moe else "dense"]


@pytest.mark.parametrize(("module", "config"), [DENSE, MOE])
def test_activation_memory_matches_mem_tracker(module: str, config: str) -> None:
    measured, analytic = _measured(module, config)
    assert analytic["full"] == pytest.approx(measured["full"], rel=1e-3)  # the layer input, exactly
    assert analytic["none"] <= measured["none"]  # the CPU's unfused RMSNorm keeps float32 copies on top
    assert analytic["none"] == pytest.approx(measured["none"], rel=0.30)
    assert analytic["full"] < analytic["selective"] < analytic["none"]


@pytest.mark.parametrize(("module", "config"), [DENSE, MOE, ("llama3", "llama3_8b")])
def test_selective_ac_is_counted_from_its_save_list(module: str, config: str) -> None:
    measured, analytic = _measured(module, config)
    assert analytic["selective"] == pytest.approx(measured["selective"], rel=0.01)


def test_selective_share_fallback_is_the_llama3_8b_measurement() -> None:
    # the share used where the save order is not counted (separate or latent projections): llama3_8b at seq 8192
    measured, _ = _measured("llama3", "llama3_8b")
    assert measured["selective"] / measured["none"] == pytest.approx(SELECTIVE_SHARE, abs=0.01)


# --- parameters -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("module", "config"), [DENSE, MOE])
def test_parameter_counts_are_the_built_models(module: str, config: str) -> None:
    facts = model_facts(module, config)
    cfg = _resolve(module, config)
    with torch.device("meta"), contextlib.redirect_stdout(io.StringIO()):
        model = cfg.model_spec.model.build()
    named = dict(model.named_parameters())
    assert facts.spec.n_params == sum(p.numel() for p in named.values())
    if not facts.spec.is_moe:
        assert facts.spec.n_active_params == facts.spec.n_params
        return
    routed = sum(p.numel() for name, p in named.items() if "moe.routed_experts" in name)
    assert routed > 0
    unused = routed - routed * facts.spec.top_k // facts.spec.n_experts  # torchtitan's active split
    assert facts.spec.n_active_params == facts.spec.n_params - unused
    assert facts.spec.n_active_params < facts.spec.n_params
