"""bot/inrank/cpu_compat.py: each patch is still needed, still fits torchtitan's shape, and works.

These tests fail when torchtitan (or torch) stops needing a patch or changes what it patches.
``apply()`` mutates global modules, so it runs in a fresh interpreter (subprocess); the pure
functions (mask, SDPA forward) are checked in-process against torchtitan's own code.
"""

from __future__ import annotations

import inspect
import json
import os
import random
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
import torch
from torch.nn.attention.flex_attention import and_masks, create_block_mask, flex_attention

from bot.inrank import cpu_compat

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU compatibility layer is for CPU-only hosts")


def run_python(code: str, *, env: dict[str, str] | None = None, timeout: float = 180) -> dict:
    """Run ``code`` in a fresh interpreter (no sitecustomize hook); its last stdout line is JSON."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ATTUNE_")}
    clean["PYTHONPATH"] = str(REPO)
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env={**clean, **(env or {})},
        timeout=timeout,
        cwd=REPO,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- one subprocess: before and after apply()
APPLY_SCRIPT = """
    import datetime, inspect, json, os, tempfile
    import torch
    import torch.distributed as dist
    import torchtitan.tools.utils as tt_utils
    import torchtitan.distributed.utils as tt_dist_utils

    out = {"device_before": tt_utils.device_type, "set_timeout_before": hasattr(dist, "set_timeout"),
           "titan_calls_set_timeout": "torch.distributed.set_timeout(" in inspect.getsource(tt_dist_utils)}

    from bot.inrank import cpu_compat
    out["applied"] = cpu_compat.apply()
    out["applied_again"] = cpu_compat.apply()
    out["device_after"] = tt_utils.device_type
    dm = tt_utils.device_module
    out["memory_stats"] = sorted(dm.memory_stats())
    out["peak_positive"] = dm.memory_stats()["reserved_bytes.all.peak"] > 0
    out["total_memory_positive"] = dm.get_device_properties(0).total_memory > 0
    out["device_count"] = dm.device_count()
    # a module imported after the patch sees the CPU (torchtitan does `from ... import device_type`)
    import torchtitan.components.metrics as tt_metrics
    out["metrics_device_type"] = tt_metrics.device_type

    # set_timeout on a real 1-rank gloo group; and gloo refuses PREMUL_SUM
    store = dist.FileStore(os.path.join(tempfile.mkdtemp(), "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    dist.set_timeout(datetime.timedelta(seconds=77))
    out["set_timeout_ok"] = True
    try:
        dist.all_reduce(torch.ones(4), op=dist._make_nccl_premul_sum(1.0))
        out["premul_sum"] = "accepted"
    except RuntimeError as exc:
        out["premul_sum"] = str(exc)
    dist.destroy_process_group()

    # attention: the tiny llama3 now builds dense per-document masks and trains with a CPU backward
    from torchtitan.models.common.attention import FlexAttention
    from bot.inrank.workloads.llama3_tiny import tiny_model_spec
    out["forward_patched"] = FlexAttention.forward is cpu_compat._sdpa_forward
    torch.manual_seed(0)
    model = tiny_model_spec().model.build()
    model.init_weights()
    positions = torch.tensor([[0, 1, 2, 3, 0, 1, 2, 0, 1, 2, 3, 4, 5, 0, 1, 2], [0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 0, 1, 2, 3, 4, 5]])
    masks = model.get_attention_masks(positions=positions)
    out["mask_is_dense"] = isinstance(masks, torch.Tensor) and tuple(masks.shape) == (2, 1, 16, 16)
    out["mask_matches"] = bool(torch.equal(masks, cpu_compat.doc_causal_mask(positions)))
    tokens = torch.randint(3, 40, (2, 16))
    logits = model(tokens, positions=positions, attention_masks=masks)
    logits.float().pow(2).mean().backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    out["backward_ok"] = all(g is not None and bool(torch.isfinite(g).all()) for g in grads)
    from torchtitan.models.common.moe import GroupedExperts
    out["grouped_experts_patched"] = GroupedExperts.forward is cpu_compat._grouped_experts_forward
    print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def applied() -> dict:
    return run_python(APPLY_SCRIPT)


def test_device_patch_is_needed_and_works(applied: dict) -> None:
    assert applied["device_before"] == "cuda", (
        "torchtitan no longer falls back to cuda on a CPU-only host: drop the device patch"
    )
    assert applied["device_after"] == "cpu"
    assert applied["metrics_device_type"] == "cpu"
    assert applied["memory_stats"] == [
        "active_bytes.all.peak",
        "num_alloc_retries",
        "num_ooms",
        "reserved_bytes.all.peak",
    ]
    assert applied["peak_positive"] and applied["total_memory_positive"]
    assert applied["device_count"] == 1


def test_apply_applies_every_patch_once(applied: dict) -> None:
    assert applied["applied"] == [
        "device",
        "set_timeout",
        "attention",
        "gloo_premul_sum",
        "pp_microbatch_step",
        "grouped_experts_dtype",
    ]
    assert applied["grouped_experts_patched"]
    assert applied["applied_again"] == applied["applied"]


def test_set_timeout_patch_is_needed_and_works(applied: dict) -> None:
    assert not applied["set_timeout_before"], "torch now has torch.distributed.set_timeout: drop the set_timeout patch"
    assert applied["titan_calls_set_timeout"], (
        "torchtitan no longer calls torch.distributed.set_timeout: drop the patch"
    )
    assert applied["set_timeout_ok"]


def test_gloo_refuses_premul_sum(applied: dict) -> None:
    assert "Cannot use ReduceOp.PREMUL_SUM with Gloo" in applied["premul_sum"], (
        "gloo accepts PREMUL_SUM now: drop the gloo patch"
    )


def test_attention_patch_trains_the_tiny_model_on_cpu(applied: dict) -> None:
    assert applied["forward_patched"]
    assert applied["mask_is_dense"] and applied["mask_matches"]
    assert applied["backward_ok"]


def test_apply_is_a_no_op_when_disabled() -> None:
    out = run_python(
        """
        import json
        import torchtitan.tools.utils as u
        from bot.inrank import cpu_compat
        print(json.dumps({"applied": cpu_compat.apply(), "device": u.device_type}))
        """,
        env={"ATTUNE_CPU_COMPAT": "0"},
    )
    assert out == {"applied": [], "device": "cuda"}


# ---------------------------------------------------------------- the shapes the patches rely on
def test_torch_pipeline_step_still_lacks_microbatch_keywords() -> None:
    """Fails when torch's schedules accept ``arg_mbs=`` themselves: then drop the ``pp_microbatch_step`` patch."""
    import inspect

    from torch.distributed.pipelining.schedules import PipelineScheduleMulti, PipelineScheduleSingle

    for cls in (PipelineScheduleSingle, PipelineScheduleMulti):
        step = cls.step
        if not getattr(step, "_attune_patched", False):
            assert "arg_mbs" not in inspect.signature(step).parameters, "torch takes arg_mbs now: drop the pp patch"
            assert hasattr(cls, "_step_microbatches"), "torch renamed _step_microbatches: the pp patch calls it"
    assert not cpu_compat.torch_step_takes_microbatches()


def test_torchtitan_still_passes_ready_microbatches_to_the_schedule() -> None:
    """Fails when torchtitan stops calling ``pp_schedule.step(arg_mbs=...)`` (the patch is then unused)."""
    import inspect

    from torchtitan.trainer import Trainer

    assert "arg_mbs=" in inspect.getsource(Trainer.pp_forward_backward_step)


def test_flex_attention_has_no_cpu_backward() -> None:
    q = torch.randn(1, 2, 16, 8, requires_grad=True)
    with pytest.raises(NotImplementedError, match="FlexAttention does not support backward on CPU"):
        flex_attention(q, q, q).sum().backward()


def test_flex_attention_forward_keeps_its_parameters() -> None:
    from torchtitan.models.common.attention import FlexAttention

    stock = inspect.signature(FlexAttention.forward).parameters
    assert list(stock)[:4] == ["self", "q_BLNH", "k_BLNH", "v_BLNH"]
    assert "attention_masks" in stock
    ours = inspect.signature(cpu_compat._sdpa_forward).parameters
    for name, param in stock.items():
        if param.kind is not inspect.Parameter.VAR_KEYWORD:
            assert name in ours, f"FlexAttention.forward has a parameter {name!r} the SDPA replacement lacks"
            assert ours[name].kind == param.kind, name


def test_decoder_get_attention_masks_keeps_its_shape() -> None:
    from torchtitan.models.common.decoder import Decoder

    assert list(inspect.signature(Decoder.get_attention_masks).parameters) == ["self", "positions"]
    source = inspect.getsource(Decoder.get_attention_masks)
    assert "first_attention" in source and "FlexAttention.Config" in source


def test_torchtitan_still_disables_fsdp_gradient_division() -> None:
    import torchtitan.distributed.fsdp as tt_fsdp

    assert callable(tt_fsdp.disable_fsdp_gradient_division)
    assert "set_gradient_divide_factor(1.0)" in inspect.getsource(tt_fsdp.disable_fsdp_gradient_division)


# ---------------------------------------------------------------- the dense mask is exactly torchtitan's
def random_positions(batch: int, seq: int, rng: random.Random) -> torch.Tensor:
    rows = []
    for _ in range(batch):
        row: list[int] = []
        while len(row) < seq:
            length = rng.choice([1, 2, 3, rng.randint(1, seq)])
            row += list(range(min(length, seq - len(row))))
        rows.append(row)
    return torch.tensor(rows)


def stock_mask(positions: torch.Tensor) -> torch.Tensor:
    """torchtitan's block-causal mask_mod evaluated at every (b, q, kv): shape (B, 1, L, L)."""
    from torchtitan.models.common.attention import (
        get_causal_mask_mod,
        get_efficient_causal_mask_mod_for_packed_document,
    )

    mask_mod = and_masks(get_causal_mask_mod(), get_efficient_causal_mask_mod_for_packed_document(positions))
    batch, seq = positions.shape
    b = torch.arange(batch)[:, None, None]
    q = torch.arange(seq)[None, :, None]
    kv = torch.arange(seq)[None, None, :]
    h = torch.zeros((), dtype=torch.long)
    return mask_mod(b, h, q, kv).expand(batch, seq, seq)[:, None]


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("seed", range(5))
def test_dense_mask_equals_the_stock_mask_mod(batch: int, seed: int) -> None:
    positions = random_positions(batch, 64, random.Random(seed * 10 + batch))
    ours = cpu_compat.doc_causal_mask(positions)
    assert ours.shape == (batch, 1, 64, 64) and ours.dtype == torch.bool
    assert torch.equal(ours, stock_mask(positions))


def test_dense_mask_is_not_plain_causal() -> None:
    positions = torch.tensor([[0, 1, 2, 0, 1]])
    mask = cpu_compat.doc_causal_mask(positions)[0, 0]
    assert not mask[3, 2]  # the second document does not see the first
    assert mask[4, 3] and mask[2, 0] and not mask[0, 1]


def test_sdpa_forward_equals_flex_attention_with_the_stock_block_mask() -> None:
    from torchtitan.models.common.attention import (
        get_causal_mask_mod,
        get_efficient_causal_mask_mod_for_packed_document,
    )

    torch.manual_seed(0)
    batch, seq, heads, dim = 3, 128, 2, 16
    positions = random_positions(batch, seq, random.Random(7))
    q, k, v = (torch.randn(batch, seq, heads, dim) for _ in range(3))  # (B, L, N, H) as torchtitan passes them
    mask_mod = and_masks(get_causal_mask_mod(), get_efficient_causal_mask_mod_for_packed_document(positions))
    block = create_block_mask(mask_mod, batch, None, seq, seq, device="cpu", _compile=False)
    want = flex_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), block_mask=block).transpose(1, 2)
    got = cpu_compat._sdpa_forward(None, q, k, v, attention_masks=cpu_compat.doc_causal_mask(positions))
    assert got.shape == (batch, seq, heads, dim)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_sdpa_forward_refuses_what_it_cannot_apply() -> None:
    q = torch.randn(1, 4, 1, 8)
    mask = cpu_compat.doc_causal_mask(torch.tensor([[0, 1, 2, 3]]))
    with pytest.raises(NotImplementedError, match="score_mod/out_transform"):
        cpu_compat._sdpa_forward(None, q, q, q, attention_masks=mask, out_transform=lambda o, lse: o)
    with pytest.raises(NotImplementedError, match="score_mod/out_transform"):
        cpu_compat._sdpa_forward(None, q, q, q, attention_masks=mask, score_mod=lambda s, b, h, qi, ki: s)


# ---------------------------------------------------------------- gloo: the FSDP patch, on 2 real ranks
# One FSDP backward on two gloo ranks, with or without the patch. Each case is its own pair of processes: a failed
# stock backward can leave a collective half-issued, and a later collective on the same group then races with it
# (CI once saw one rank crash at the barrier that used to separate the two cases).
FSDP_WORKER = """
    import json, sys
    import torch, torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    import torchtitan.distributed.fsdp as tt_fsdp
    from bot.inrank import cpu_compat

    rank, store, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    dist.init_process_group("gloo", store=dist.FileStore(store, 2), rank=rank, world_size=2)
    mesh = init_device_mesh("cpu", (2,))
    if mode == "patched":
        cpu_compat.patch_gloo_premul_sum()
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 4)
    fully_shard(model, mesh=mesh)
    tt_fsdp.disable_fsdp_gradient_division(model)
    try:
        model(torch.randn(2, 4)).sum().backward()
        out = "ok"
    except RuntimeError as exc:
        out = str(exc)
    if out == "ok":
        dist.destroy_process_group()
    print(json.dumps(out))
"""


def _two_rank_fsdp_backward(mode: str) -> list[str]:
    """What each of two real gloo ranks' FSDP backward returned: "ok" or the error."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTUNE_")}
    env.update(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", textwrap.dedent(FSDP_WORKER), str(rank), store, mode],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
                cwd=REPO,
            )
            for rank in range(2)
        ]
        try:
            outputs = [proc.communicate(timeout=180) for proc in procs]
        finally:
            for proc in procs:
                proc.kill()
    failed = [
        f"rank {r} (exit {p.returncode}):\n{err[-2000:]}"
        for r, (p, (_, err)) in enumerate(zip(procs, outputs, strict=True))
        if p.returncode
    ]
    assert not failed, "\n".join(failed)
    return [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]


def test_gloo_fsdp_patch_is_needed_and_fixes_two_rank_fsdp() -> None:
    for out in _two_rank_fsdp_backward("stock"):
        assert "Cannot use ReduceOp.PREMUL_SUM with Gloo" in out, "gloo FSDP works without the patch now: drop it"
    assert _two_rank_fsdp_backward("patched") == ["ok", "ok"]


# ---------------------------------------------------------------- MoE: GroupedExperts in the parameters' dtype
def test_torchtitan_still_computes_grouped_experts_in_bf16() -> None:
    """The patch exists because torchtitan casts tokens and expert weights to bf16 whatever the param dtype."""
    from torchtitan.models.common.moe import GroupedExperts

    source = inspect.getsource(GroupedExperts.forward)
    assert source.count(".bfloat16()") >= 4, (
        "GroupedExperts.forward no longer casts to bf16: drop the grouped_experts_dtype patch"
    )
    assert "self._grouped_mm(" in source and list(inspect.signature(GroupedExperts.forward).parameters) == [
        "self",
        "x_RD",
        "num_tokens_per_expert_E",
    ]


def _experts(dtype: torch.dtype):
    from torchtitan.models.common.moe import GroupedExperts

    torch.manual_seed(0)
    experts = GroupedExperts(GroupedExperts.Config(dim=16, hidden_dim=24, num_experts=4))
    with torch.no_grad():
        for w in (experts.w1_EFD, experts.w2_EDF, experts.w3_EFD):
            w.copy_(torch.randn_like(w) * 0.1)
    return experts.to(dtype)


def test_grouped_experts_patch_equals_a_per_expert_loop_in_fp32() -> None:
    experts = _experts(torch.float32)
    counts = torch.tensor([3, 0, 5, 8])
    x = torch.randn(int(counts.sum()), 16, requires_grad=True)
    got = cpu_compat._grouped_experts_forward(experts, x, counts)
    assert got.dtype == torch.float32
    rows, start = [], 0
    for e, n in enumerate(counts.tolist()):
        xe = x[start : start + n]
        h = torch.nn.functional.silu(xe @ experts.w1_EFD[e].T) * (xe @ experts.w3_EFD[e].T)
        rows.append(h @ experts.w2_EDF[e].T)
        start += n
    torch.testing.assert_close(got, torch.cat(rows), atol=1e-5, rtol=1e-5)
    got.backward(torch.randn_like(got))
    assert x.grad is not None and experts.w1_EFD.grad is not None and bool(torch.isfinite(experts.w2_EDF.grad).all())
    # the stock forward (bf16) is further from the fp32 loop than the patched one
    stock = type(experts).forward(experts, x.detach(), counts)
    assert (stock - torch.cat(rows)).abs().max() > (got - torch.cat(rows)).abs().max()


def test_grouped_experts_patch_keeps_bf16_params_in_bf16() -> None:
    experts = _experts(torch.bfloat16)
    counts = torch.tensor([8, 8, 0, 0])
    x = torch.randn(16, 16)
    got = cpu_compat._grouped_experts_forward(experts, x, counts)
    want = type(experts).forward(experts, x, counts)  # the stock bf16 path
    assert got.dtype == x.dtype
    torch.testing.assert_close(got, want)


def test_torch_still_traces_grouped_mm_only_in_bf16() -> None:
    """Why the fp32 path is a custom op: the stock op's fake kernel refuses fp32 (drop the ops when this fails)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(), pytest.raises(RuntimeError, match="BF16"):
        torch._grouped_mm(torch.empty(16, 8), torch.empty(2, 8, 4), offs=torch.tensor([8, 16], dtype=torch.int32))


def test_grouped_experts_patch_compiles_in_fp32_and_equals_eager() -> None:
    """A compiled fp32 MoE block (torchtitan compiles each block with fullgraph=True) traces the custom op and gives
    eager's output and gradients."""
    experts = _experts(torch.float32)
    counts = torch.tensor([3, 0, 5, 8])
    x = torch.randn(int(counts.sum()), 16)

    def run(fn) -> tuple[torch.Tensor, ...]:
        experts.zero_grad()
        xi = x.clone().requires_grad_(True)
        out = fn(experts, xi, counts)
        out.backward(torch.ones_like(out))
        return out.detach(), xi.grad, experts.w1_EFD.grad.clone(), experts.w2_EDF.grad.clone()

    eager = run(cpu_compat._grouped_experts_forward)
    compiled = run(torch.compile(cpu_compat._grouped_experts_forward, fullgraph=True, backend="aot_eager"))
    for want, got in zip(eager, compiled, strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
