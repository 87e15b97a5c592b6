"""bot/runner/logparse.py: torchtitan metric lines, OOM text, structured-log spans."""

from __future__ import annotations

import json
import math
from datetime import datetime
from pathlib import Path

import pytest
import torch
from torchtitan.tools.utils import Color

from bot.runner.logparse import is_oom, parse_step_line, span_medians, strip_ansi

# the line as torchtitan 0.3.0's components/metrics.py prints it, colours on (the default)
RED, GREEN, ORANGE, TURQ, BLUE = Color.red, Color.green, Color.orange, Color.turquoise, Color.blue
CYAN, MAGENTA, YELLOW, RESET = Color.cyan, Color.magenta, Color.yellow, Color.reset
PREFIX = "[rank0]:[titan] 2026-08-20 12:00:00,123 - root - INFO - "


def colored(step: int, loss: str, tps: str, mfu: str = "38.23%") -> str:
    return (
        f"{PREFIX}{RED}step: {step:2}  {GREEN}loss: {loss}  {ORANGE}grad_norm:  1.2345  "
        f"{TURQ}memory: 45.67GiB(48.12%)  {BLUE}tps: {tps}  {CYAN}tflops: 1,378.12  {MAGENTA}mfu: {mfu}{RESET}\n"
    )


def test_colored_line_with_thousands_separators() -> None:
    parsed = parse_step_line(colored(10, " 7.12345", "16,543"))
    assert parsed is not None
    metric, when = parsed
    assert metric.step == 10
    assert metric.loss == pytest.approx(7.12345)
    assert metric.grad_norm == pytest.approx(1.2345)
    assert metric.memory_gib == pytest.approx(45.67)
    assert metric.memory_pct == pytest.approx(48.12)
    assert metric.tps == 16543
    assert metric.tflops == pytest.approx(1378.12)
    assert metric.mfu == pytest.approx(38.23)
    assert when == datetime(2026, 8, 20, 12, 0, 0, 123000)


def test_plain_line_from_a_real_cpu_run() -> None:
    line = "[rank0]:[titan] 2026-11-30 06:03:38,584 - root - INFO - step:  2  loss:  4.34533  grad_norm:  1.5338  memory:  0.57GiB(2.44%)  tps: 4,235  tflops: 0.03  mfu: 0.01%\n"
    metric, when = parse_step_line(line)  # type: ignore[misc]
    assert (metric.step, metric.loss, metric.grad_norm, metric.tps, metric.mfu) == (2, 4.34533, 1.5338, 4235, 0.01)
    assert when == datetime(2026, 11, 30, 6, 3, 38, 584000)


def test_mfu_not_available() -> None:
    metric, _ = parse_step_line(colored(3, " 7.00000", "1,000,001", mfu="N/A"))  # type: ignore[misc]
    assert metric.mfu is None
    assert metric.tps == 1_000_001


@pytest.mark.parametrize(
    "line",
    [
        "step: 1 loss: 10.9 grad_norm: 3.1 memory: 1.0GiB(1.0%) tps: 12 tflops: 0.1 mfu: 0.1%",  # narrow, few decimals
        "step:     1   loss:   10.900000   grad_norm:   3.100000   memory:   1.00GiB(1.00%)   tps: 12   tflops: 0.10   mfu: 0.10%",
        "step: 1  loss: 10.9",  # older versions: fewer fields
    ],
)
def test_different_widths(line: str) -> None:
    metric, when = parse_step_line(line)  # type: ignore[misc]
    assert metric.step == 1 and metric.loss == pytest.approx(10.9)
    assert when is None


def test_negative_and_non_finite_losses() -> None:
    assert parse_step_line("step: 4  loss: -1.0000  grad_norm: 0.0")[0].loss == -1.0  # type: ignore[index]
    assert math.isnan(parse_step_line("step: 4  loss:      nan  grad_norm:     nan")[0].loss)  # type: ignore[index]


@pytest.mark.parametrize(
    "line",
    [
        f"{PREFIX}{YELLOW}validate step: 10  {GREEN}loss: 7.1234  {TURQ}memory: 45.67GiB(48.12%)  {BLUE}tps: 6,543{RESET}",
        f"{PREFIX}validate step: 10  loss: 7.1234  memory: 45.67GiB(48.12%)  tps: 6,543",
        f"{PREFIX}Trainer is initialized with local batch size 1, global batch size 8, gradient accumulation steps 8, sequence length 256, total steps 8 (warmup 5)",
        f"{PREFIX}Training starts at step 1",
        "[rank0]:[titan] 2026-11-30 06:03:38,100 - [step 1] fwd_bwd_end took 145.14 ms",
        "",
    ],
)
def test_other_lines_are_ignored(line: str) -> None:
    assert parse_step_line(line) is None


def test_strip_ansi() -> None:
    assert strip_ansi(colored(1, "1.0", "2")).startswith(PREFIX + "step:  1  loss: 1.0  grad_norm:")


# ---------------------------------------------------------------- OOM detection on real text
def _real_cpu_oom_text() -> str:
    try:
        torch.empty(1 << 46, dtype=torch.uint8)  # 64 TiB
    except RuntimeError as exc:
        return f"[rank0]: RuntimeError: {exc}"
    pytest.skip("this host allocated 64 TiB")


def test_real_cpu_allocator_oom_is_detected() -> None:
    text = _real_cpu_oom_text()
    assert "DefaultCPUAllocator" in text
    assert is_oom(text)


def test_cuda_oom_is_detected() -> None:
    # docs/reference/torchtitan.md §6 (torch's CUDA caching allocator message)
    line = (
        "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
        "79.10 GiB of which 1.23 GiB is free. Including non-PyTorch memory, this process has 77.86 GiB memory in use. "
        "If reserved but unallocated memory is large try setting PYTORCH_ALLOC_CONF=expandable_segments:True to avoid fragmentation."
    )
    assert is_oom(line)
    assert is_oom("torch.OutOfMemoryError: HIP out of memory. Tried to allocate 1.00 GiB")
    assert is_oom("Traceback (most recent call last):\nMemoryError")


@pytest.mark.parametrize(
    "text",
    [
        "[rank0]: RuntimeError: attune test hook: deliberate crash at step 3",
        "[rank0]:[titan] 2026-11-30 06:03:37,357 - root - INFO - CPU memory usage for model: 0.54GiB(2.29%)",
        "[rank0]:[titan] 2026-11-30 06:03:37,128 - root - WARNING - Error running lspci: [Errno 2] No such file or directory",
        "ValueError: When dp_mesh_dims is provided, all parameters must be DTensors",
    ],
)
def test_non_oom_text(text: str) -> None:
    assert not is_oom(text)


# ---------------------------------------------------------------- structured JSONL spans
def _event(name: str, step: int | None, value: float | None = None, **extra: object) -> str:
    rec: dict[str, object] = {
        "delta_ms": 0.1,
        "tid": 1,
        "rank": 0,
        "global_rank": 0,
        "local_rank": 0,
        "source": "training",
        "host_name": "vm",
        "pid": 1,
        "time": 1796018617,
        "time_ms": 1796018617080,
        "time_us": 1796018617080012,
        "log_type": "event",
        "log_type_name": name,
        "event_name": None,
        "caller": "trainer.py:925:train_step",
        "seq_id": 0,
    }
    if step is not None:
        rec["step"] = step
        rec["relative_step"] = step
    if value is not None:
        rec["value"] = value
    rec.update(extra)
    return json.dumps(rec)


def _write_log(folder: Path, name: str, steps: dict[int, dict[str, list[float]]]) -> None:
    lines = [_event("structured_logger_started", None), _event("torch_distributed_init_end", None, 4.5)]
    for step, spans in steps.items():
        for span, values in spans.items():
            for v in values:
                lines.append(_event(f"{span}_start", step))
                lines.append(_event(f"{span}_end", step, v))
        lines.append(_event("metric_value", step, 984.0, log_type="instant", event_name="local_valid_tokens"))
    lines.append("{not json")
    (folder / name).write_text("\n".join(lines) + "\n")


def test_span_medians(tmp_path: Path) -> None:
    steps = {
        1: {"step": [5000.0], "fwd_bwd": [4000.0, 900.0], "optim": [50.0]},  # step 1: compile/init, never counted
        2: {"step": [100.0], "fwd_bwd": [40.0, 40.0], "optim": [5.0]},  # 2 microbatches: summed per step
        3: {"step": [120.0], "fwd_bwd": [50.0, 50.0], "optim": [6.0]},
        4: {"step": [110.0], "fwd_bwd": [45.0, 44.0], "optim": [7.0]},
    }
    _write_log(tmp_path, "training.global_rank_0.20260820-120000-ABCDEF.jsonl", steps)
    _write_log(
        tmp_path, "training.global_rank_1.20260820-120000-GHIJKL.jsonl", {2: {"step": [1.0]}, 3: {"step": [1.0]}}
    )
    assert span_medians(tmp_path) == {"step": 110.0, "fwd_bwd": 89.0, "optim": 6.0}
    assert span_medians(tmp_path, skip_steps=3) == {"step": 110.0, "fwd_bwd": 89.0, "optim": 7.0}


def test_span_medians_reads_the_latest_rank0_file(tmp_path: Path) -> None:
    _write_log(tmp_path, "training.global_rank_0.20260820-120000-AAAAAA.jsonl", {2: {"step": [999.0]}})
    _write_log(tmp_path, "training.global_rank_0.20260820-130000-BBBBBB.jsonl", {2: {"step": [10.0]}})
    assert span_medians(tmp_path) == {"step": 10.0}


def test_span_medians_without_logs(tmp_path: Path) -> None:
    assert span_medians(tmp_path) == {}
    assert span_medians(tmp_path / "missing") == {}
