"""bot/runner/slurmscript.py and the runner's pure parts (bot/runner/slurm.py): the batch script, the outcome of a
finished job, the growing job log. The script is also checked by bash itself (``bash -n``)."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from bot.core.recipe import Recipe, load_recipe
from bot.core.records import StepMetric
from bot.core.slurm import SlurmSettings
from bot.runner.slurm import LogTail, Stopped, batch_script, classify, sbatch_argv
from bot.runner.slurmscript import render, sbatch_lines, torchrun_argv
from bot.runner.slurmtext import JobInfo

REPO = Path(__file__).resolve().parents[2]
SLURM_RECIPE = REPO / "recipes" / "llama3-tiny" / "cpu-slurm.yaml"


def recipe_with(**cluster: object) -> Recipe:
    r = load_recipe(SLURM_RECIPE)
    return r.model_copy(update={"cluster": r.cluster.model_copy(update=cluster)})


def test_script_has_torchtitans_multinode_shape(tmp_path: Path) -> None:
    body, backstop = batch_script(load_recipe(SLURM_RECIPE), steps=10, out_dir=tmp_path)
    assert backstop is None
    lines = body.splitlines()
    assert lines[0] == "#!/bin/bash"
    assert {
        "#SBATCH --nodes=2",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --no-requeue",
        "#SBATCH --time=0:15:00",
        "#SBATCH --cpus-per-task=1",
    } <= set(lines)
    assert not any("--gpus-per-node" in ln for ln in lines)  # CPU hardware asks for no GPU
    assert 'nodes=( $(scontrol show hostnames "$SLURM_JOB_NODELIST") )' in lines
    srun = [ln for ln in lines if ln.startswith("srun ")]
    assert len(srun) == 1
    assert srun[0].startswith(f"srun --kill-on-bad-exit=1 {sys.executable} -m torch.distributed.run ")
    for part in (
        '"--nnodes=$SLURM_NNODES"',
        "--nproc-per-node=1",
        '"--rdzv-id=$SLURM_JOB_ID"',
        "--rdzv-backend=c10d",
        '"--rdzv-endpoint=$head_addr:29500"',
        "--max-restarts=0",
        "--local-ranks-filter=0",
        " -m torchtitan.train ",
    ):
        assert part in srun[0], part
    assert srun[0].endswith(" activation-checkpoint:full") and "--training.steps 10" in srun[0]
    assert "export TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE='[rank${rank}]:'" in lines
    assert f"export ATTUNE_STACK_FILE={tmp_path}/stack.json" in lines and "export ATTUNE_CPU_COMPAT=1" in lines
    assert subprocess.run(["bash", "-n"], input=body, text=True).returncode == 0


def test_site_settings_become_sbatch_lines_in_order() -> None:
    settings = SlurmSettings(
        partition="gpu",
        account="proj",
        qos="high",
        time_limit="2:00:00",
        gres="gpu:h100:8",
        cpus_per_task=96,
        extra_sbatch=["--exclusive", "--mem=0"],
    )
    r = recipe_with(hardware="h100", devices_per_node=8)
    assert sbatch_lines(r, settings, time_limit=settings.time_limit) == [
        "#SBATCH --job-name=attune-llama3-tiny-cpu-slurm",
        "#SBATCH --nodes=2",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --no-requeue",
        "#SBATCH --partition=gpu",
        "#SBATCH --account=proj",
        "#SBATCH --qos=high",
        "#SBATCH --time=2:00:00",
        "#SBATCH --gres=gpu:h100:8",
        "#SBATCH --cpus-per-task=96",
        "#SBATCH --exclusive",
        "#SBATCH --mem=0",
    ]


def test_gpu_hardware_asks_for_one_gpu_per_rank_unless_told() -> None:
    r = recipe_with(hardware="h100", devices_per_node=8)
    assert "#SBATCH --gpus-per-node=8" in sbatch_lines(r, SlurmSettings(), time_limit=None)
    assert "#SBATCH --gpus-per-node=4" in sbatch_lines(r, SlurmSettings(gpus_per_node=4), time_limit=None)
    assert not any("gpus" in ln for ln in sbatch_lines(r, SlurmSettings(gres="gpu:8"), time_limit=None))


def test_budget_cap_below_the_time_limit_becomes_the_jobs_time_limit(tmp_path: Path) -> None:
    r = load_recipe(SLURM_RECIPE)  # time_limit 0:15:00
    body, backstop = batch_script(r, steps=10, out_dir=tmp_path, max_wall_s=150.0)
    assert backstop == "2" and "#SBATCH --time=2" in body.splitlines()
    body, backstop = batch_script(r, steps=10, out_dir=tmp_path, max_wall_s=7200.0)  # the recipe's is tighter
    assert backstop is None and "#SBATCH --time=0:15:00" in body.splitlines()


def test_prologue_container_and_quoting(tmp_path: Path) -> None:
    settings = SlurmSettings(
        prologue=["module load cuda/12.4", "source /lustre/venv/bin/activate"],
        container_image="nvcr.io#nvidia/pytorch:25.01-py3",
        container_mounts=["/data:/data"],
    )
    r = recipe_with(slurm=settings)
    r = r.model_copy(update={"env": {"NCCL_SOCKET_IFNAME": "eth0,en", "ODD": "a b'c"}})
    body, _ = batch_script(r, steps=4, out_dir=tmp_path / "run dir")
    lines = body.splitlines()
    assert lines.index("module load cuda/12.4") < lines.index("head_node=${nodes[0]}")
    srun = next(ln for ln in lines if ln.startswith("srun ")).replace("'", "")
    assert (
        " --container-image=nvcr.io#nvidia/pytorch:25.01-py3 " in srun and " torchrun " in srun
    )  # the image's torchrun
    assert f"--container-mounts=/data:/data,{tmp_path}/run dir:{tmp_path}/run dir," in srun
    assert "export ODD='a b'\"'\"'c'" in lines
    assert subprocess.run(["bash", "-n"], input=body, text=True).returncode == 0


def test_the_recipe_names_the_torchrun_command(tmp_path: Path) -> None:
    r = recipe_with(slurm=SlurmSettings(torchrun="/lustre/env/bin/python -m torch.distributed.run"))
    body, _ = batch_script(r, steps=4, out_dir=tmp_path)
    srun = next(ln for ln in body.splitlines() if ln.startswith("srun "))
    assert srun.startswith('srun --kill-on-bad-exit=1 /lustre/env/bin/python -m torch.distributed.run "--nnodes=')


def test_an_env_name_that_is_no_variable_is_refused() -> None:
    r = load_recipe(SLURM_RECIPE)
    with pytest.raises(ValueError, match="not an environment variable name"):
        render(r, SlurmSettings(), command=["true"], env={"A B": "1"}, mounts=[], time_limit=None)


def test_sbatch_argv_escapes_percent_in_the_log_path(tmp_path: Path) -> None:
    argv = sbatch_argv(tmp_path / "100%" / "job.sbatch", tmp_path / "100%")
    assert argv[:2] == ["sbatch", "--parsable"] and argv[3] == f"--output={tmp_path}/100%%/slurm-%j.out"


def test_torchrun_argv_is_one_node_of_the_job() -> None:
    r = load_recipe(SLURM_RECIPE)
    argv = torchrun_argv(r, SlurmSettings(rdzv_port=29600), ["--module", "m"], ["/venv/bin/torchrun"])
    assert argv[:6] == [
        "/venv/bin/torchrun",
        "--nnodes=$SLURM_NNODES",
        "--nproc-per-node=1",
        "--rdzv-id=$SLURM_JOB_ID",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=$head_addr:29600",
    ]
    assert argv[-4:] == ["-m", "torchtitan.train", "--module", "m"]


# -- classification of a finished job ----------------------------------------------------------------------------------

T0 = datetime(2026, 12, 1, 10, 0, 0)


def job(state: str, **kw: object) -> JobInfo:
    return JobInfo(
        job_id="7",
        state=state,
        submit=T0,
        start=datetime(2026, 12, 1, 10, 0, 5),
        end=datetime(2026, 12, 1, 10, 1, 5),
        node_list="n[1-2]",
        num_nodes=2,
        **kw,
    )  # type: ignore[arg-type]


def steps(n: int) -> list[StepMetric]:
    return [StepMetric(step=i, loss=5.0 - i * 0.1, tps=1000.0) for i in range(1, n + 1)]


@pytest.mark.parametrize(
    ("info", "n", "log", "want", "fragment"),
    [
        (job("COMPLETED"), 10, "", "ok", ""),
        (job("COMPLETED"), 6, "", "crash", "ended after 6 of 10 steps"),
        (job("NODE_FAIL", reason="NodeDown"), 4, "", "node_fail", "lost a node"),
        (job("BOOT_FAIL"), 0, "", "node_fail", "BOOT_FAIL"),
        (job("PREEMPTED"), 4, "", "preempted", "not a measurement"),
        (job("COMPLETED", restarts=1), 6, "", "preempted", "restarts 1"),
        (job("TIMEOUT", reason="TimeLimit"), 4, "", "timeout", "Slurm time limit"),
        (job("OUT_OF_MEMORY"), 2, "", "oom", "OUT_OF_MEMORY"),
        (
            job("FAILED"),
            2,
            "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
            "oom",
            "CUDA out of memory",
        ),
        (job("FAILED", exit_code="1:0"), 2, "[rank0]: RuntimeError: boom\n", "crash", "RuntimeError: boom"),
        (job("FAILED", exit_code="1:0"), 2, "", "crash", "Slurm job FAILED, exit code 1:0"),
        (job("CANCELLED"), 3, "", "crash", "cancelled outside ATTUNE"),
        (None, 0, "", "crash", "could not be read"),
    ],
)
def test_classify_a_finished_job(info: JobInfo | None, n: int, log: str, want: str, fragment: str) -> None:
    outcome, reason = classify(info, stopped=None, steps=steps(n), want_steps=10, job_log=log)
    assert outcome == want and fragment in reason, reason


def test_this_runners_own_stop_wins_over_slurms_cancelled() -> None:
    stop = Stopped(outcome="stopped", reason="stopped early: slower")
    assert classify(job("CANCELLED"), stopped=stop, steps=steps(5), want_steps=10, job_log="") == (
        "stopped",
        "stopped early: slower",
    )
    # a job that completed all its steps before the cancel landed is ok, whatever the runner meant to do
    assert classify(job("COMPLETED"), stopped=stop, steps=steps(10), want_steps=10, job_log="")[0] == "ok"


def test_a_time_limit_set_from_the_wall_clock_cap_says_so() -> None:
    outcome, reason = classify(
        job("TIMEOUT"), stopped=None, steps=steps(3), want_steps=10, job_log="", backstop_min="5"
    )
    assert outcome == "timeout" and "5 min, set from the run's wall-clock cap" in reason and "campaign" not in reason


def test_job_times_give_elapsed_and_queue_wait() -> None:
    info = job("COMPLETED")
    assert info.elapsed_s == 60.0 and info.queue_wait_s == 5.0


def test_log_tail_returns_whole_lines_as_they_arrive(tmp_path: Path) -> None:
    path = tmp_path / "slurm-7.out"
    tail = LogTail(path)
    assert tail.lines() == []  # not there yet
    path.write_bytes(b"one\ntw")
    assert tail.lines() == ["one"]
    with path.open("ab") as fh:
        fh.write(b"o\nthree")
    assert tail.lines() == ["two"]
    assert tail.flush() == ["three"] and tail.flush() == []


def test_every_rank_loads_the_seed_checkpoint_which_a_container_sees(tmp_path: Path) -> None:
    from bot.runner.seed import SeedCheckpoint

    seed = SeedCheckpoint(key="k1", path=str(tmp_path / "seed" / "step-0"))
    r = recipe_with(slurm=SlurmSettings(container_image="img", container_mounts=[]))
    body, _ = batch_script(r, steps=4, out_dir=tmp_path / "run", seed=seed)
    srun = next(ln for ln in body.splitlines() if ln.startswith("srun ")).replace("'", "").replace('"', "")
    assert f" --checkpoint.initial-load-path {seed.path} " in srun and " --checkpoint.load-only" in srun
    assert f"{tmp_path}/seed:{tmp_path}/seed" in srun
    plain, _ = batch_script(r, steps=4, out_dir=tmp_path / "run")
    assert "initial-load-path" not in plain
