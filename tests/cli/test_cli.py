"""bot/cli (run, recipe): ``attune run`` (real torchtitan), ``attune recipe show|set``; user mistakes exit 2 with one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from shared_run import STEPS, cli_ok_run

from bot.cli import main
from bot.core.records import read_record

REPO = Path(__file__).resolve().parents[2]
CPU_RECIPE = REPO / "recipes" / "llama3-tiny" / "cpu.yaml"
ATTUNE = Path(sys.executable).with_name("attune")


def attune(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(ATTUNE), *args], capture_output=True, text=True, timeout=timeout, cwd=REPO)


def assert_one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip("\n").splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("attune: ")
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    return lines[0]


@pytest.fixture
def recipe_copy(tmp_path: Path) -> Path:
    path = tmp_path / "cpu.yaml"
    path.write_text(CPU_RECIPE.read_text())
    return path


@pytest.mark.torchtitan
def test_run_json() -> None:
    run = cli_ok_run()  # attune run RECIPE --steps 8 --json --out DIR (real torchtitan, shared with test_local)
    proc = run.proc
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    last = proc.stdout.strip().splitlines()[-1]
    result = json.loads(last)
    for key in (
        "record",
        "outcome",
        "steps",
        "loss_first",
        "loss_last",
        "tps_median",
        "step_time_median_s",
        "device_hours",
        "simulated",
    ):
        assert key in result, key
    assert result["outcome"] == "ok"
    assert result["steps"] == STEPS
    assert result["simulated"] is False
    assert result["loss_last"] < result["loss_first"]
    assert result["tps_median"] > 0 and result["step_time_median_s"] > 0 and result["device_hours"] > 0
    assert Path(result["record"]) == run.out / "record.json"
    record = read_record(result["record"])
    assert record.outcome == "ok" and record.summary.tps_median == result["tps_median"]
    assert record.recipe_path == str(run.recipe)
    assert (run.out / "train.log").exists()


def test_run_malformed_recipe(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    text = CPU_RECIPE.read_text().replace("  training.local_batch_size: 1", "  training.local_batch_size: many")
    bad.write_text(text)
    line_no = text.splitlines().index("  training.local_batch_size: many") + 1
    out = tmp_path / "out"
    proc = attune("run", str(bad), "--steps", "6", "--json", "--out", str(out))
    line = assert_one_line_error(proc)
    assert f"{bad}:{line_no}: levers.training.local_batch_size: expected an integer" in line
    assert proc.stdout == ""
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml"]


def test_run_missing_recipe(tmp_path: Path) -> None:
    line = assert_one_line_error(attune("run", str(tmp_path / "nope.yaml")))
    assert "nope.yaml" in line


def test_run_too_few_steps(recipe_copy: Path, tmp_path: Path) -> None:
    line = assert_one_line_error(attune("run", str(recipe_copy), "--steps", "1", "--out", str(tmp_path / "o")))
    assert "--steps" in line
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("lever", "value", "fragment"),
    [
        ("training.local_batch_size", "abc", "expected an integer"),
        ("no.such", "1", "unknown lever"),
        ("activation_checkpoint", "half", "expected one of"),
        ("training.local_batch_size", "3", "3 would leave a recipe that cannot run: "),
    ],  # global batch 8: not divisible
)
def test_recipe_set_refused(recipe_copy: Path, lever: str, value: str, fragment: str) -> None:
    before = recipe_copy.read_bytes()
    line = assert_one_line_error(attune("recipe", "set", str(recipe_copy), lever, value))
    assert str(recipe_copy) in line and fragment in line
    assert recipe_copy.read_bytes() == before


def test_recipe_set(recipe_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = recipe_copy.read_text().splitlines()
    assert main(["recipe", "set", str(recipe_copy), "training.local_batch_size", "2"]) == 0
    assert capsys.readouterr().out.strip() == f"{recipe_copy}: training.local_batch_size: 1 -> 2"
    after = recipe_copy.read_text().splitlines()
    assert [(a, b) for a, b in zip(before, after, strict=True) if a != b] == [
        ("  training.local_batch_size: 1", "  training.local_batch_size: 2")
    ]


def test_recipe_show(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["recipe", "show", str(CPU_RECIPE)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "# command"
    command = out[1]
    assert command.startswith("OMP_NUM_THREADS=2 ") and "torchrun --standalone" in command
    assert " -m torchtitan.train --module bot.inrank.workloads.llama3_tiny --config llama3_tiny_cpu " in command
    assert command.endswith(" activation-checkpoint:full")
    assert "--training.steps 20" in command
    assert out[2] == "# resolved torchtitan config"
    fields = dict(line.split(" = ", 1) for line in out[3:])
    assert fields["training.local_batch_size"] == "1"
    assert fields["training.global_batch_size"] == "8"
    assert fields["activation_checkpoint.mode"] == "'full'"
    assert fields["optimizer.param_groups.0.optimizer_kwargs.lr"] == "0.003"
    assert fields["compile.enable"] == "False"
    assert list(fields) == sorted(fields)


def test_recipe_show_of_a_slurm_recipe_prints_its_batch_script(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["recipe", "show", str(REPO / "recipes" / "llama3-tiny" / "cpu-slurm.yaml")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "# command (on a Slurm login node)" and out[1].startswith("sbatch --parsable ")
    assert out[2] == "# batch script (job.sbatch)" and out[3] == "#!/bin/bash"
    assert "#SBATCH --nodes=2" in out and "#SBATCH --time=0:15:00" in out
    srun = [line for line in out if line.startswith("srun ")]
    assert len(srun) == 1 and " --rdzv-backend=c10d " in srun[0] and " -m torchtitan.train " in srun[0]
    assert "# resolved torchtitan config" in out


def test_recipe_show_refused_config(recipe_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recipe_copy.write_text(
        recipe_copy.read_text().replace(
            "  compile.enable: false", "  compile.enable: false\n  compile.enable_async_tensor_parallel: true"
        )
    )
    assert main(["recipe", "show", str(recipe_copy)]) == 3
    out = capsys.readouterr().out
    assert "# resolved config: refused by torchtitan" in out and "Async TP" in out


def test_recipe_show_refuses_a_simulated_recipe_run_would_refuse(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An unknown cluster.hardware was printed as "simulated (32 x tpu9000)", exit 0, where `attune run` refuses it."""
    task = REPO / "bot" / "bench" / "tasks" / "llama3.1-70b" / "h200x32.yaml"
    bad = tmp_path / "r.yaml"
    bad.write_text(task.read_text().replace("hardware: h200", "hardware: tpu9000"))
    assert main(["recipe", "show", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:" in err and "cluster.hardware: 'tpu9000' is unknown to the simulator; known: " in err
    assert main(["recipe", "show", str(task)]) == 0


GLM = REPO / "bot" / "bench" / "tasks" / "glm-4.5" / "h100x128.yaml"


def test_run_takes_the_campaign_limits(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """trial.yml passes the budget cap and the early-stop bound: a stopped trial is a measurement (exit 0), a
    capped run a failed one (exit 3)."""
    assert main(["run", str(GLM), "--json", "--out", str(tmp_path / "s"), "--stop-below", "1e9"]) == 0
    stopped = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert stopped["outcome"] == "stopped" and stopped["tps_median"] > 0 and stopped["simulated"] is True
    assert main(["run", str(GLM), "--json", "--out", str(tmp_path / "c"), "--max-wall-s", "600"]) == 3
    capped = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert capped["outcome"] == "timeout" and capped["reason"].startswith("stopped at the wall-clock cap of 600 s")
    assert (
        "campaign" not in capped["reason"] and "campaign" not in stopped["reason"]
    )  # a run on its own: the user's caps


@pytest.mark.parametrize(
    "args",
    [["--max-wall-s", "0"], ["--stop-below", "-5"], ["--stop-below", "10", "--stop-after", "1"], ["--stop-after", "4"]],
)
def test_run_refuses_bad_limits(args: list[str], tmp_path: Path) -> None:
    """``--stop-after`` alone was silently ignored: the run went ahead with no early stop."""
    line = assert_one_line_error(attune("run", str(GLM), "--out", str(tmp_path), *args))
    assert "--max-wall-s" in line or "--stop-below" in line
    assert not (tmp_path / "record.json").exists()


def test_run_refuses_a_limit_that_is_not_a_number(tmp_path: Path) -> None:
    proc = attune("run", str(GLM), "--out", str(tmp_path), "--max-wall-s", "soon")
    assert (
        proc.returncode == 2 and "argument --max-wall-s: invalid float value: 'soon'" in proc.stderr
    )  # argparse's usage error
    assert "Traceback" not in proc.stderr and not (tmp_path / "record.json").exists()


def test_a_reader_that_goes_away_ends_the_command_quietly() -> None:
    """``attune recipe show R | head`` used to end in a BrokenPipeError traceback: the reader's end is closed before
    the command writes, so its first write fails."""
    proc = subprocess.Popen(
        [str(ATTUNE), "recipe", "show", "bot/bench/tasks/llama3.1-8b/h100x8.yaml"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 141, err  # 128 + SIGPIPE, as a shell reports a writer whose reader went away
    assert err == ""


def test_sim_calibrate_json_is_one_json_object_and_the_table_is_for_people(capsys: pytest.CaptureFixture[str]) -> None:
    """``--json`` prints the object alone (the table before it broke every JSON reader); without it, the table."""
    assert main(["sim", "calibrate", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["simulated"] is True and report["rows"] == len(report["row_errors"]) > 0
    assert main(["sim", "calibrate"]) == 0
    table = capsys.readouterr().out
    assert "simulated vs published" in table and not table.lstrip().startswith("{")
