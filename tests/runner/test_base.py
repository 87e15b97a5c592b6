"""bot/runner/base.py: the run summary (warm-up and step 1 excluded), the launcher registry."""

from __future__ import annotations

import statistics

import pytest

from bot.core.records import StepMetric
from bot.runner import get_runner
from bot.runner.base import stack_fingerprint, summarize


def _steps(tps: list[float], every: int = 1, step_s: float = 0.5) -> list[StepMetric]:
    out = []
    for i, t in enumerate(tps):
        step = i + 1 if every == 1 else max(1, i * every)
        out.append(
            StepMetric(
                step=step, loss=10.0 - i, tps=t, memory_gib=1.0 + i / 10, mfu=1.0 + i, time_s=(step - 1) * step_s
            )
        )
    return out


def test_step_one_and_warmup_are_not_measured() -> None:
    steps = _steps([100.0, 900.0, 1000.0, 1100.0, 1200.0, 1300.0])
    s = summarize(steps, warmup_steps=1, devices=2, wall_s=36.0, startup_s=10.0, tokens_per_step=1024)
    assert s.tps_median == statistics.median([900.0, 1000.0, 1100.0, 1200.0, 1300.0])
    s = summarize(steps, warmup_steps=3, devices=2, wall_s=36.0, startup_s=10.0, tokens_per_step=1024)
    assert s.tps_median == 1200.0  # steps 4..6
    assert s.tps_cv == pytest.approx(statistics.pstdev([1100.0, 1200.0, 1300.0]) / 1200.0)
    assert s.mfu == 5.0
    assert s.step_time_median_s == pytest.approx(0.5)
    assert (s.loss_first, s.loss_last, s.steps_completed) == (10.0, 5.0, 6)
    assert s.peak_memory_gib == pytest.approx(1.5)
    assert s.device_hours == pytest.approx(2 * 36.0 / 3600)
    assert s.wall_s == 36.0 and s.startup_s == 10.0 and s.tokens_per_step == 1024


def test_short_run_falls_back_to_steps_after_the_first() -> None:
    steps = _steps([100.0, 900.0, 1000.0])
    s = summarize(steps, warmup_steps=5, devices=1, wall_s=10.0, startup_s=None, tokens_per_step=None)
    assert s.tps_median == 950.0
    only_first = summarize(_steps([100.0]), warmup_steps=1, devices=1, wall_s=1.0, startup_s=None, tokens_per_step=None)
    assert only_first.tps_median is None


def test_step_time_is_per_step_when_lines_are_log_freq_apart() -> None:
    # metrics.log_freq 10: lines at steps 1, 10, 20, 30; 0.5 s per step
    steps = _steps([100.0, 1000.0, 1000.0, 1000.0], every=10, step_s=0.5)
    s = summarize(steps, warmup_steps=1, devices=1, wall_s=30.0, startup_s=None, tokens_per_step=None)
    assert s.step_time_median_s == pytest.approx(0.5)


def test_step_time_from_tps_without_timestamps() -> None:
    steps = [StepMetric(step=i, loss=1.0, tps=512.0) for i in range(1, 6)]
    s = summarize(steps, warmup_steps=1, devices=2, wall_s=5.0, startup_s=None, tokens_per_step=2048)
    assert s.step_time_median_s == pytest.approx(2048 / (512.0 * 2))


def test_empty_run() -> None:
    s = summarize([], warmup_steps=1, devices=1, wall_s=3.0, startup_s=None, tokens_per_step=None)
    assert s.steps_completed == 0 and s.tps_median is None and s.loss_first is None


def test_get_runner() -> None:
    from bot.runner.local import LocalRunner

    runner = get_runner("local", hang_s=5.0)
    assert isinstance(runner, LocalRunner) and runner.hang_s == 5.0
    from bot.core.recipe import RecipeError

    with pytest.raises(RecipeError, match="unknown launcher 'mpi'"):
        get_runner("mpi")
    from bot.runner.slurm import SlurmRunner

    slurm = get_runner("slurm", hang_s=7.0)
    assert isinstance(slurm, SlurmRunner) and slurm.hang_s == 7.0


def test_stack_fingerprint_on_this_host() -> None:
    import torch

    fp = stack_fingerprint()
    assert fp.torch == torch.__version__
    assert fp.torchtitan.startswith("0.")
    if not torch.cuda.is_available():
        assert fp.device_family == "cpu" and fp.device_name == "cpu" and fp.cuda is None


def test_early_stop_waits_for_measured_steps_then_stops_a_clearly_slower_run() -> None:
    from bot.runner.base import EarlyStop, early_stop_reason

    steps = _steps([50.0, 90.0, 95.0, 85.0, 99.0])
    rule = EarlyStop(below_tps=100.0, after_steps=3)
    assert early_stop_reason(steps[:3], 1, rule) is None  # steps 2-3: only two measured past the warm-up
    why = early_stop_reason(steps[:4], 1, rule)
    assert (
        why
        == "stopped early: the median of 3 measured steps, 90 tokens/s/device, is below the early-stop threshold of 100"
    )
    based = early_stop_reason(steps[:4], 1, EarlyStop(below_tps=100.0, basis="the incumbent less the noise band"))
    assert based == why + " (the incumbent less the noise band)"  # a campaign says what its bound is
    assert early_stop_reason(steps, 1, EarlyStop(below_tps=80.0)) is None  # not slower than the bound: runs on
    assert early_stop_reason(steps, 1, None) is None
    assert early_stop_reason(steps[:4], 2, rule) is None  # a longer warm-up leaves two measured steps


def test_early_stop_needs_a_positive_bound_and_two_steps() -> None:
    from pydantic import ValidationError

    from bot.runner.base import EarlyStop

    with pytest.raises(ValidationError):
        EarlyStop(below_tps=0.0)
    with pytest.raises(ValidationError):
        EarlyStop(below_tps=10.0, after_steps=1)
