"""bot/runner/slurm.py against a real Slurm: two nodes on this host (tests/runner/slurm_cluster.py).

The two-node CPU recipe runs real torchtitan end to end through ``attune run`` (two nodes x one rank, c10d
rendezvous) and its losses are compared with the same layout on one machine (``launcher: local``, two ranks). The
classification cases run a sleep job instead of torchtitan (the runner's test-only ``payload``) and make the real
Slurm event happen to it: scancel from outside, a node set down, Slurm's time limit, preemption by a job in a
higher-priority partition, a queue wait over the budget, the budget cap; each leaves a record.
"""

from __future__ import annotations

import json
import math
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from bot.core.recipe import Recipe, load_recipe
from bot.core.records import RunRecord, read_record, write_record
from bot.core.slurm import SlurmSettings
from bot.runner.local import LocalRunner
from bot.runner.slurm import SlurmRunner

from .slurm_cluster import SlurmCluster

pytestmark = pytest.mark.slurm
REPO = Path(__file__).resolve().parents[2]
SLURM_RECIPE = REPO / "recipes" / "llama3-tiny" / "cpu-slurm.yaml"
SLEEP = ["sleep", "180"]  # outlasts Slurm's one-minute limit plus its 30 s check


def with_slurm(recipe: Recipe, **settings: object) -> Recipe:
    base = (recipe.cluster.slurm or SlurmSettings()).model_dump()
    cluster = recipe.cluster.model_copy(update={"slurm": SlurmSettings(**{**base, **settings})})
    return recipe.model_copy(update={"cluster": cluster})


def sleep_run(
    cluster: SlurmCluster,
    tmp_path: Path,
    *,
    action: Callable[[str], None] | None = None,
    recipe: Recipe | None = None,
    **run: object,
) -> RunRecord:
    """A sleep job through the real runner; ``action(job_id)`` runs once the job is running. The record is written
    and read back (what a trial leaves behind)."""
    recipe = recipe or load_recipe(SLURM_RECIPE)
    out_dir = (tmp_path / "run").resolve()
    runner = SlurmRunner(
        payload=SLEEP, poll_s=0.5, startup_s=600, slurm_env=cluster.env, compile_state=tmp_path / "compile-generation"
    )
    errors: list[BaseException] = []

    def act() -> None:
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                lines = cluster.run("squeue", "-h", "-t", "R", "-o", "%i %Z").stdout.splitlines()
                mine = [
                    ln.split()[0] for ln in lines if ln.split()[1:] == [str(out_dir)]
                ]  # this run's job (its folder)
                if mine:
                    time.sleep(1.0)  # let the runner see it running too
                    assert action is not None
                    action(mine[0])
                    return
                time.sleep(0.2)
            raise AssertionError("the job never ran")
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    helper = threading.Thread(target=act, daemon=True) if action else None
    if helper:
        helper.start()
    record = runner.run(recipe, out_dir=out_dir, recipe_path=str(SLURM_RECIPE), **run)  # type: ignore[arg-type]
    if helper:
        helper.join(30)
    assert not errors, errors
    path = write_record(record, out_dir / "record.json")
    back = read_record(path)
    assert back == record
    return back


@pytest.fixture(scope="module")
def time_limit_job(
    slurm_cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory
) -> tuple[threading.Thread, dict]:
    """A sleep job with Slurm's shortest time limit (one minute; slurmctld enforces it within ~30 s more), started
    before the end-to-end run so that the two overlap (each node has a CPU for each job)."""
    tmp = tmp_path_factory.mktemp("time-limit")
    result: dict = {}

    def go() -> None:
        try:
            result["record"] = sleep_run(
                slurm_cluster, tmp, recipe=with_slurm(load_recipe(SLURM_RECIPE), time_limit="1")
            )
        except BaseException as exc:  # reported by the test
            result["error"] = exc

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    return thread, result


# -- two nodes x one rank, real torchtitan ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def e2e(
    slurm_cluster: SlurmCluster, time_limit_job: tuple[threading.Thread, dict], tmp_path_factory: pytest.TempPathFactory
) -> tuple[RunRecord, Path, float]:
    """``attune run`` as trial.yml's run job calls it on a login node: from a checkout, ``--out run/``, the budget cap."""
    checkout = tmp_path_factory.mktemp("slurm-e2e")
    shutil.copytree(REPO / "recipes", checkout / "recipes")
    t0 = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bot.cli",
            "run",
            str(SLURM_RECIPE.relative_to(REPO)),
            "--json",
            "--out",
            "run/",
            "--max-wall-s",
            "3600",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=checkout,
        env=slurm_cluster.env,
    )
    wall = time.monotonic() - t0
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    answer = json.loads(proc.stdout.strip().splitlines()[-1])
    assert answer["record"] == "run/record.json"
    out = checkout / "run"
    record = read_record(out / "record.json")
    s = record.summary
    print(
        f"\nslurm e2e (2 nodes x 1 rank): {record.outcome}, loss {s.loss_first} -> {s.loss_last}, "
        f"{s.tps_median} tokens/s/device, {s.device_hours:.5f} device-hours ({s.wall_s:.0f}s x 2 devices), "
        f"queue wait {record.launch.queue_wait_s}s, start-up {s.startup_s:.1f}s, attune run {wall:.1f}s"
    )
    return record, out, wall


def test_two_node_cpu_recipe_runs_ok_and_its_loss_falls(e2e: tuple[RunRecord, Path, float]) -> None:
    record, out, _ = e2e
    assert record.outcome == "ok", f"{record.reason}\n{record.log_tail}"
    assert [m.step for m in record.steps] == list(range(1, 11))
    assert all(math.isfinite(m.loss) for m in record.steps)
    losses = record.losses()
    assert losses[-1] < losses[0] - 1.0, losses
    launch = record.launch
    assert launch.launcher == "slurm" and launch.nodes == 2 and launch.devices_per_node == 1 and launch.world_size == 2
    assert launch.job_id and launch.job_state == "COMPLETED" and launch.node_list == "n[1-2]"
    assert launch.queue_wait_s is not None and launch.queue_wait_s >= 0
    assert launch.command[:2] == ["sbatch", "--parsable"] and launch.command[2] == f"--chdir={out}"
    # the stack is the one rank 0 ran on (it wrote stack.json at exit), here the same as this host's
    assert (
        (out / "stack.json").exists()
        and record.stack.torch == torch.__version__
        and record.stack.device_family == "cpu"
    )


def test_each_node_ran_one_rank_and_the_metrics_are_global_rank_zeros(e2e: tuple[RunRecord, Path, float]) -> None:
    record, out, _ = e2e
    script = (out / "job.sbatch").read_text()
    assert "#SBATCH --nodes=2" in script and "#SBATCH --ntasks-per-node=1" in script
    assert "--rdzv-backend=c10d" in script and '"--nnodes=$SLURM_NNODES"' in script and "--nproc-per-node=1" in script
    job_log = (out / f"slurm-{record.launch.job_id}.out").read_text()
    assert "[rank0]:" in job_log and "[rank1]:" in job_log  # one rank per node, both ran
    rank0 = (out / "train.log").read_text()
    assert "[rank1]:" not in rank0 and rank0.count(" loss: ") >= 10


def test_device_hours_are_allocated_devices_times_the_running_time(e2e: tuple[RunRecord, Path, float]) -> None:
    record, _, wall = e2e
    s = record.summary
    assert s.wall_s > 0 and s.wall_s <= wall  # Slurm's start-to-end, inside what attune run took
    assert s.device_hours == pytest.approx(2 * s.wall_s / 3600)
    assert s.startup_s is not None and 0 < s.startup_s < s.wall_s + 2  # start-up is charged (it is in wall_s)
    assert s.tps_median is not None and s.tps_median > 0 and s.tokens_per_step == 8 * 256


def test_two_nodes_match_two_local_ranks_of_the_same_layout(e2e: tuple[RunRecord, Path, float], tmp_path: Path) -> None:
    """Same layout (2 ranks, replicate 2), one machine: the losses agree (gloo's sum of two addends is the same
    whichever process adds them)."""
    record, out, _ = e2e
    recipe = load_recipe(SLURM_RECIPE)
    local = recipe.model_copy(
        update={"cluster": recipe.cluster.model_copy(update={"launcher": "local", "nodes": 1, "devices_per_node": 2})}
    )
    # the Slurm run loaded the seed checkpoint `attune run` made on the login node; the twin loads the same one
    assert record.seed_checkpoint, "the two-node run loaded no seed checkpoint"
    twin = LocalRunner(seed_cache=out.parent / ".attune").run(
        local, out_dir=tmp_path / "local", recipe_text=SLURM_RECIPE.read_text()
    )
    assert twin.outcome == "ok", f"{twin.reason}\n{twin.log_tail}"
    assert twin.seed_checkpoint == record.seed_checkpoint
    diff = max(abs(a - b) for a, b in zip(record.losses(), twin.losses(), strict=True))
    print(
        f"\nslurm 2x1 vs local 1x2 losses: max abs difference {diff:.3g}; local {twin.summary.tps_median} tokens/s/device"
    )
    assert diff <= 1e-5, (record.losses(), twin.losses())


def test_an_early_stop_cancels_the_job_and_is_a_measurement(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    """Real torchtitan, stopped by ``attune run --stop-below`` once two steps past the warm-up are measured."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bot.cli",
            "run",
            str(SLURM_RECIPE),
            "--json",
            "--out",
            str(tmp_path / "run"),
            "--steps",
            "20",
            "--stop-below",
            "1e9",
            "--stop-after",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
        env=slurm_cluster.env,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]  # stopped: measured, ended on purpose
    record = read_record(tmp_path / "run" / "record.json")
    assert record.outcome == "stopped" and "cancelled" in record.reason, record.reason
    assert record.launch.job_state == "CANCELLED" and record.summary.steps_completed < 20
    assert [m.step for m in record.steps][:5] == [1, 2, 3, 4, 5] and record.summary.tps_median
    assert record.launch.job_id not in slurm_cluster.jobs()  # its own job is gone (another test's may still run)


# -- classification, sleep jobs -----------------------------------------------------------------------------------------


def test_a_job_over_its_slurm_time_limit_is_a_timeout(time_limit_job: tuple[threading.Thread, dict]) -> None:
    thread, result = time_limit_job
    thread.join(300)
    assert not thread.is_alive() and "error" not in result, result
    record: RunRecord = result["record"]
    assert record.outcome == "timeout", record.reason
    assert record.launch.job_state == "TIMEOUT" and "Slurm time limit" in record.reason
    assert record.summary.wall_s >= 60


def test_a_job_cancelled_outside_attune_is_a_crash_that_says_so(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    record = sleep_run(slurm_cluster, tmp_path, action=lambda job: slurm_cluster.run("scancel", job))
    assert record.outcome == "crash", record.reason
    assert "cancelled outside ATTUNE" in record.reason and record.launch.job_state == "CANCELLED"
    assert record.hook == "payload: sleep 180"


def test_a_node_killed_mid_run_is_node_fail(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    def kill_node(job: str) -> None:
        slurm_cluster.run("scontrol", "update", "nodename=n2", "state=down", "reason=attune-test")

    try:
        record = sleep_run(slurm_cluster, tmp_path, action=kill_node)
    finally:
        slurm_cluster.resume("n2")
        slurm_cluster.wait_idle()
    assert record.outcome == "node_fail", record.reason
    assert record.launch.job_state == "NODE_FAIL" and "lost a node" in record.reason
    assert record.summary.device_hours == pytest.approx(2 * record.summary.wall_s / 3600)


def test_a_preempted_job_is_preempted(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    def preempt(job: str) -> None:  # a job in the higher-priority partition wants both nodes, whole
        slurm_cluster.run("sbatch", "-p", "urgent", "-N", "2", "--exclusive", "-o", "/dev/null", "--wrap", "sleep 1")

    record = sleep_run(slurm_cluster, tmp_path, action=preempt)
    slurm_cluster.wait_idle()
    assert record.outcome == "preempted", record.reason
    assert record.launch.job_state == "PREEMPTED" and "not a measurement" in record.reason


def test_the_budget_cap_cancels_the_job_inside_the_cap(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    record = sleep_run(slurm_cluster, tmp_path, max_wall_s=16.0)
    assert record.outcome == "timeout", record.reason
    assert record.reason.startswith("stopped at the wall-clock cap of 16 s of running time; job ")
    assert record.launch.job_state == "CANCELLED"
    # the job was cancelled, perhaps while it compiled: later jobs compile into a new generation of the cache
    script = (tmp_path / "run" / "job.sbatch").read_text()
    gen = (tmp_path / "compile-generation").read_text().strip()
    assert "export TORCHINDUCTOR_CACHE_DIR=" in script and f"/g-{gen}\n" not in script
    assert 0 < record.summary.device_hours <= 2 * 16.0 / 3600
    assert "#SBATCH --time=1" in (tmp_path / "run" / "job.sbatch").read_text()  # Slurm's backstop: the cap, in minutes


def test_pending_longer_than_the_queue_budget_is_cancelled_and_not_charged(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    recipe = with_slurm(load_recipe(SLURM_RECIPE), queue_budget="0:04", extra_sbatch=["--begin=now+600"])
    record = sleep_run(slurm_cluster, tmp_path, recipe=recipe)
    assert record.outcome == "pending_timeout", record.reason
    assert "queue budget" in record.reason and "BeginTime" in record.reason
    assert record.summary.device_hours == 0 and record.launch.job_state == "CANCELLED"
    assert slurm_cluster.jobs() == []


def test_no_first_step_line_is_a_hang_and_the_job_is_cancelled(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    runner = SlurmRunner(payload=SLEEP, poll_s=0.5, startup_s=4.0, slurm_env=slurm_cluster.env)
    record = runner.run(load_recipe(SLURM_RECIPE), out_dir=tmp_path / "run")
    assert record.outcome == "hang" and "no first step line for 4s" in record.reason
    assert slurm_cluster.jobs() == []


def test_sbatch_refusing_the_job_is_invalid_with_its_message(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    recipe = with_slurm(load_recipe(SLURM_RECIPE), partition="nosuchpartition")
    record = SlurmRunner(slurm_env=slurm_cluster.env).run(recipe, out_dir=tmp_path / "run")
    assert record.outcome == "invalid" and record.reason.startswith("sbatch refused the job:")
    assert "partition" in record.reason.lower() and record.launch.job_id is None


def test_a_config_torchtitan_refuses_is_never_submitted(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    recipe = load_recipe(SLURM_RECIPE).with_lever("training.local_batch_size", 3)  # 8 is not divisible by 3 x 2
    before = slurm_cluster.run("squeue", "-h", "-t", "all", "-o", "%i").stdout.split()
    record = SlurmRunner(slurm_env=slurm_cluster.env).run(recipe, out_dir=tmp_path / "run")
    assert record.outcome == "invalid" and "not divisible" in record.reason
    assert record.launch.job_id is None and not (tmp_path / "run" / "job.sbatch").exists()
    assert slurm_cluster.run("squeue", "-h", "-t", "all", "-o", "%i").stdout.split() == before


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_runner_cancels_its_job(
    slurm_cluster: SlurmCluster, tmp_path: Path, sig: signal.Signals
) -> None:
    """What a cancelled workflow does to ``attune run`` (SIGINT, then SIGTERM): the job must not outlive it."""
    code = (
        "import sys; from pathlib import Path; from bot.core.recipe import load_recipe; from bot.runner.slurm import SlurmRunner; "
        "SlurmRunner(payload=['sleep', '180'], poll_s=0.5, startup_s=600).run(load_recipe(sys.argv[1]), out_dir=Path(sys.argv[2]))"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(SLURM_RECIPE), str(tmp_path / "run")],
        env=slurm_cluster.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not slurm_cluster.run("squeue", "-h", "-t", "R", "-o", "%i").stdout.split():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
            time.sleep(0.2)
        time.sleep(1.0)  # the runner follows the job now
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0 and "KeyboardInterrupt" in out, out[-2000:]
    deadline = time.monotonic() + 20  # scancel is sent before the runner exits; Slurm then ends the job (KillWait 2 s)
    while slurm_cluster.jobs() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert slurm_cluster.jobs() == []  # cancelled, not left to run out its 180 s
