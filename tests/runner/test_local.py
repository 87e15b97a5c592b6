"""bot/runner/local.py: real torchtitan under torchrun on the CPU (8 steps), and its outcomes.

Each run here is a real ``torchrun … -m torchtitan.train`` of the tiny CPU recipe; failures are
made real by the test-only workload hooks (a raise, a stall, an impossible allocation).
"""

from __future__ import annotations

import math
import statistics
import subprocess
from pathlib import Path

import pytest
from shared_run import STEPS, cli_ok_run

from bot.core.recipe import Recipe, load_recipe
from bot.core.records import RunRecord, read_record, write_record
from bot.runner.local import LocalRunner

pytestmark = pytest.mark.torchtitan
CPU_RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "llama3-tiny" / "cpu.yaml"
# one OpenMP thread: on a shared 2-core box, 2 spinning threads are up to 10x slower (docs/reference/cpu-torchtitan.md §1)
ONE_THREAD = {"OMP_NUM_THREADS": "1"}


def _survivors(marker: str) -> list[str]:
    """Processes whose command line mentions ``marker`` (the run's unique out dir)."""
    out = subprocess.run(["ps", "-eo", "pid,stat,args"], capture_output=True, text=True, check=True)
    alive = []
    for line in out.stdout.splitlines()[1:]:
        _pid, stat, args = line.split(None, 2)
        if marker in args and not stat.startswith("Z"):  # a zombie is dead, only not yet reaped
            alive.append(line)
    return alive


@pytest.fixture(scope="module")
def ok_run() -> tuple[RunRecord, Path]:
    """One real 8-step run of the CPU recipe (warm-up: step 1 only), made through ``attune run``
    and shared with tests/test_cli.py: the record is the local runner's."""
    run = cli_ok_run()
    assert run.proc.returncode == 0, run.proc.stdout[-3000:] + run.proc.stderr[-3000:]
    return read_record(run.out / "record.json"), run.out


def test_ok_run(ok_run: tuple[RunRecord, Path]) -> None:
    record, out = ok_run
    assert record.outcome == "ok", f"{record.reason}\n{record.log_tail}"
    assert record.reason == ""
    assert [s.step for s in record.steps] == list(range(1, STEPS + 1))
    assert all(math.isfinite(s.loss) for s in record.steps)
    assert record.summary.steps_completed == STEPS
    assert record.simulated is False and record.hook is None
    assert record.launch.launcher == "local" and record.launch.world_size == 1
    assert record.launch.command[1:3] == ["-m", "torch.distributed.run"]  # torchrun, from the running Python itself
    assert record.launch.command[-1] == "activation-checkpoint:full"
    assert (out / "train.log").read_text().count(" loss: ") >= STEPS


def test_ok_run_loss_falls(ok_run: tuple[RunRecord, Path]) -> None:
    record, _ = ok_run
    losses = record.losses()
    assert record.summary.loss_first == losses[0] and record.summary.loss_last == losses[-1]
    assert losses[-1] < losses[0] - 0.5, losses
    assert statistics.mean(losses[-3:]) < statistics.mean(losses[:3])


def test_ok_run_throughput_excludes_step_one(ok_run: tuple[RunRecord, Path]) -> None:
    record, _ = ok_run
    s = record.summary
    after_warmup = [m.tps for m in record.steps if m.step > 1]
    assert s.tps_median == statistics.median(after_warmup)
    assert s.tps_median is not None and s.tps_median > 0
    assert s.tokens_per_step == 8 * 256
    assert s.step_time_median_s is not None and 0 < s.step_time_median_s < 30
    assert s.startup_s is not None and 0 < s.startup_s < s.wall_s
    assert s.device_hours == pytest.approx(s.wall_s / 3600, rel=1e-3)
    assert s.peak_memory_gib is not None and s.peak_memory_gib > 0
    # the timestamps of the step lines: step 1 is time 0, later steps later
    assert record.steps[0].time_s == 0.0
    assert all(b.time_s > a.time_s for a, b in zip(record.steps, record.steps[1:], strict=False))  # type: ignore[operator]


def test_ok_run_spans_and_record(ok_run: tuple[RunRecord, Path], tmp_path: Path) -> None:
    record, out = ok_run
    assert {"step", "fwd_bwd", "optim"} <= set(record.spans_ms)
    assert 0 < record.spans_ms["fwd_bwd"] <= record.spans_ms["step"]
    assert list((out / "titan" / "structured_logs").glob("training.global_rank_0.*.jsonl"))
    assert record.pinned["debug.seed"] == 42 and record.levers["activation_checkpoint"] == "full"
    assert record.stack.device_family == "cpu"
    path = write_record(record, tmp_path / "record.json")
    assert read_record(path) == record


def test_crash(cpu_recipe: Recipe, tmp_path: Path) -> None:
    record = LocalRunner(hook="crash_at:3", hang_s=60, extra_env=ONE_THREAD).run(
        cpu_recipe, steps=STEPS, out_dir=tmp_path
    )
    assert record.outcome == "crash", f"{record.outcome}: {record.reason}\n{record.log_tail}"
    assert "deliberate crash at step 3" in record.reason
    assert record.hook == "crash_at:3"
    assert [s.step for s in record.steps] == [1, 2]
    assert record.summary.steps_completed == 2


def test_a_crash_on_a_rank_the_console_does_not_show_is_named_from_that_ranks_log(tmp_path: Path) -> None:
    """Two ranks, the console shows rank 0 only (``--local-ranks-filter``); rank 1 raises: the reason is rank 1's
    own exception (torchrun's summary alone says ``ChildFailedError``)."""
    recipe = load_recipe(CPU_RECIPE.with_name("cpu-2rank.yaml"))
    record = LocalRunner(hook="crash_at:2@1", hang_s=60).run(recipe, steps=4, out_dir=tmp_path)
    assert record.outcome == "crash", f"{record.outcome}: {record.reason}\n{record.log_tail}"
    assert record.reason == "rank 1: RuntimeError: attune test hook: deliberate crash at step 2"


def test_hang_is_killed_with_every_rank(cpu_recipe: Recipe, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """hang_at:3 stalls the rank; hang_s=15 without a new step line is a hang; afterwards no process of
    the run survives. The ranks also ignore SIGTERM: torchrun runs each rank in a session of its own,
    so killing torchrun's process group alone would orphan them."""
    monkeypatch.syspath_prepend(str(CPU_RECIPE.parents[2]))  # the in-process resolve imports the module too
    workload = cpu_recipe.workload.model_copy(update={"module": "tests.runner.stubborn_workload"})
    out = tmp_path / "hang-run"
    runner = LocalRunner(hook="hang_at:3", hang_s=15, extra_env=ONE_THREAD)
    record = runner.run(cpu_recipe.model_copy(update={"workload": workload}), steps=STEPS, out_dir=out)
    assert record.outcome == "hang", f"{record.outcome}: {record.reason}\n{record.log_tail}"
    assert record.reason == "no new step line for 15s; process group killed"
    assert record.hook == "hang_at:3"
    assert [s.step for s in record.steps] == [1, 2]
    assert record.summary.wall_s < 180
    assert _survivors(str(out)) == []


def test_budget_cap_stops_the_run_inside_what_is_left(cpu_recipe: Recipe, tmp_path: Path) -> None:
    """A run that would go on (hung at step 3, hang_s far away) is stopped at its wall-clock cap (a campaign's budget
    cap), every rank included, and its wall clock — what the campaign is charged — stays inside the cap."""
    from bot.runner.local import KILL_MARGIN_S

    cap = KILL_MARGIN_S + 30.0
    record = LocalRunner(hook="hang_at:3", hang_s=600, extra_env=ONE_THREAD).run(
        cpu_recipe, steps=STEPS, out_dir=tmp_path, max_wall_s=cap
    )
    assert record.outcome == "timeout", f"{record.outcome}: {record.reason}\n{record.log_tail}"
    assert record.reason == f"stopped at the wall-clock cap of {cap:,.0f} s; process group killed"
    assert record.summary.wall_s <= cap
    assert _survivors(str(tmp_path)) == []


def test_oom(cpu_recipe: Recipe, tmp_path: Path) -> None:
    record = LocalRunner(hook="oom_at:3", hang_s=60, extra_env=ONE_THREAD).run(
        cpu_recipe, steps=STEPS, out_dir=tmp_path
    )
    assert record.outcome == "oom", f"{record.outcome}: {record.reason}\n{record.log_tail}"
    assert "DefaultCPUAllocator" in record.reason
    assert [s.step for s in record.steps] == [1, 2]


def test_invalid_layout_is_not_launched(cpu_recipe: Recipe, tmp_path: Path) -> None:
    record = LocalRunner().run(
        cpu_recipe.with_lever("parallelism.tensor_parallel_degree", 2), steps=STEPS, out_dir=tmp_path
    )
    assert record.outcome == "invalid"
    assert "must multiply to the 1 devices" in record.reason
    assert not (tmp_path / "train.log").exists()
    assert not (tmp_path / "titan").exists()
    assert record.steps == [] and record.summary.wall_s == 0.0


def test_refused_config_is_invalid_without_launch(cpu_recipe: Recipe, tmp_path: Path) -> None:
    record = LocalRunner().run(
        cpu_recipe.with_lever("compile.enable_async_tensor_parallel", True), steps=STEPS, out_dir=tmp_path
    )
    assert record.outcome == "invalid"
    assert "Async TP" in record.reason
    assert not (tmp_path / "train.log").exists()


def test_more_than_one_node_is_invalid(cpu_recipe: Recipe, tmp_path: Path) -> None:
    recipe = cpu_recipe.model_copy(update={"cluster": cpu_recipe.cluster.model_copy(update={"nodes": 2})})
    record = LocalRunner().run(recipe, steps=STEPS, out_dir=tmp_path)
    assert record.outcome == "invalid" and "one node" in record.reason
    assert not (tmp_path / "train.log").exists()


def test_a_clearly_slower_trial_is_stopped_early_every_rank_included(cpu_recipe: Recipe, tmp_path: Path) -> None:
    """With a bound no run can reach, the run ends once two steps past the warm-up are measured: outcome
    ``stopped`` with what it measured, no rank left behind, well before the steps it was asked for."""
    from bot.runner.base import EarlyStop

    recipe = cpu_recipe.model_copy(update={"bench": cpu_recipe.bench.model_copy(update={"warmup_steps": 1})})
    record = LocalRunner(hang_s=120, extra_env=ONE_THREAD).run(
        recipe, steps=STEPS, out_dir=tmp_path, early_stop=EarlyStop(below_tps=1e12, after_steps=2)
    )
    assert record.outcome == "stopped", f"{record.outcome}: {record.reason}\n{record.log_tail}"
    assert (
        record.reason.startswith("stopped early: the median of 2 measured steps")
        and "process group killed" in record.reason
    )
    assert 3 <= len(record.steps) < STEPS and record.summary.tps_median is not None
    assert _survivors(str(tmp_path)) == []


def test_a_run_into_the_folder_of_an_interrupted_run_starts_without_that_runs_files(
    cpu_recipe: Recipe, tmp_path: Path
) -> None:
    """A campaign resumed after a kill runs the interrupted run again in the same folder: the killed run's torchtitan
    output (structured logs the span medians are read from) is gone before the new run starts."""
    stale = tmp_path / "titan" / "structured_logs" / "training.global_rank_0.old.jsonl"
    stale.parent.mkdir(parents=True)
    stale.write_text('{"step": 1}\n')
    recipe = cpu_recipe.model_copy(
        update={"cluster": cpu_recipe.cluster.model_copy(update={"nodes": 2})}
    )  # refused before launch
    LocalRunner().run(recipe, steps=STEPS, out_dir=tmp_path)
    assert not stale.exists() and not (tmp_path / "titan").exists()
