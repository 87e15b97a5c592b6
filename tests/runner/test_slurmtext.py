"""bot/runner/slurmtext.py on what Slurm 22.05 really printed (tests/runner/slurm_samples, see its README)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from bot.runner.slurmtext import (
    SACCT_FIELDS,
    SlurmTextError,
    base_state,
    config_value,
    pairs,
    parse_jobcomp,
    parse_sacct,
    parse_sbatch,
    parse_scontrol,
    parse_squeue,
)

SAMPLES = Path(__file__).resolve().parent / "slurm_samples"


def sample(name: str) -> str:
    return (SAMPLES / name).read_text()


def test_sbatch_parsable_is_the_job_id() -> None:
    assert parse_sbatch(sample("sbatch.txt")) == "9"
    assert parse_sbatch("sbatch: warning: something\n123;cluster-a\n") == "123"  # federated form, warning first


@pytest.mark.parametrize("text", ["", "sbatch: error: Batch job submission failed: Invalid partition name specified\n"])
def test_sbatch_without_a_job_id_is_an_error(text: str) -> None:
    with pytest.raises(SlurmTextError):
        parse_sbatch(text)


def test_squeue_line_of_a_running_job() -> None:
    info = parse_squeue(sample("squeue.txt"), "2")
    assert info is not None and info.state == "RUNNING" and not info.terminal
    assert info.node_list == "n[1-2]" and info.num_nodes == 2 and info.reason == ""
    assert info.submit == datetime(2026, 12, 1, 10, 27, 55) and info.start == datetime(2026, 12, 1, 10, 27, 58)
    assert info.queue_wait_s == 3.0
    assert parse_squeue(sample("squeue.txt"), "3") is None  # another job's lines are not this job's


def test_squeue_line_of_a_requeued_job_is_pending_with_its_reason() -> None:
    info = parse_squeue(sample("squeue-requeued.txt"), "1")
    assert info is not None and info.state == "PENDING" and info.reason == "BeginTime" and info.node_list == ""


def test_scontrol_running_job_has_no_end() -> None:
    info = parse_scontrol(sample("scontrol-running.txt"), "9")
    assert info is not None and info.state == "RUNNING" and info.end is None and info.elapsed_s is None
    assert info.num_nodes == 2 and info.restarts == 0


@pytest.mark.parametrize(
    ("name", "job", "state", "reason", "elapsed"),
    [
        ("scontrol-completed.txt", "14", "COMPLETED", "", 0.0),
        ("scontrol-failed.txt", "13", "FAILED", "NonZeroExitCode", 0.0),
        ("scontrol-cancelled.txt", "10", "CANCELLED", "", 1.0),
        ("scontrol-node_fail.txt", "9", "NODE_FAIL", "NodeDown", 2.0),
        ("scontrol-preempted.txt", "11", "PREEMPTED", "", 3.0),
        ("scontrol-timeout.txt", "15", "TIMEOUT", "TimeLimit", 81.0),
    ],
)
def test_scontrol_final_states(name: str, job: str, state: str, reason: str, elapsed: float) -> None:
    info = parse_scontrol(sample(name), job)
    assert info is not None and info.terminal
    assert (info.state, info.reason, info.elapsed_s) == (state, reason, elapsed)
    assert info.node_list == "n[1-2]" and info.source == "scontrol"


def test_scontrol_exit_code_and_values_holding_equals_signs() -> None:
    line = sample("scontrol-failed.txt")
    assert parse_scontrol(line, "13").exit_code == "3:0"  # type: ignore[union-attr]
    kv = pairs(line)
    assert kv["TRES"] == "cpu=2,node=2,billing=2" and kv["AllocNode:Sid"] == "localhost:6785" and kv["Power"] == ""


def test_scontrol_requeued_job_counts_its_restart() -> None:
    info = parse_scontrol(sample("scontrol-requeued.txt"), "1")
    assert info is not None and info.state == "PENDING" and info.restarts == 1 and info.reason == "BeginTime"


def test_scontrol_answers_nothing_for_a_purged_job() -> None:
    assert parse_scontrol("slurm_load_jobs error: Invalid job id specified\n", "5") is None


def test_job_completion_log_takes_the_jobs_last_line() -> None:
    text = sample("jobcomp.txt")
    requeued = parse_jobcomp(text, "8")  # a requeue writes a PENDING line first, then the real end
    assert (
        requeued is not None and requeued.state == "CANCELLED" and requeued.node_list == "" and requeued.num_nodes == 0
    )
    timeout = parse_jobcomp(text, "15")
    assert (
        timeout is not None and timeout.state == "TIMEOUT" and timeout.elapsed_s == 81.0 and timeout.source == "jobcomp"
    )
    assert parse_jobcomp(text, "1") is not None and parse_jobcomp(text, "1").state == "COMPLETED"  # type: ignore[union-attr]
    assert parse_jobcomp(text, "99") is None


def test_sacct_parsable_line() -> None:
    assert SACCT_FIELDS.split(",")[0] == "JobID"
    line = "42|CANCELLED by 0|0:15|2026-12-01T10:00:00|2026-12-01T10:00:30|2026-12-01T10:05:30|gpu[001-002]|2|None\n"
    info = parse_sacct(line, "42")
    assert info is not None and info.state == "CANCELLED" and info.exit_code == "0:15"
    assert (
        info.queue_wait_s == 30.0
        and info.elapsed_s == 300.0
        and info.node_list == "gpu[001-002]"
        and info.num_nodes == 2
    )
    assert parse_sacct(sample("sacct-disabled.txt"), "42") is None


def test_base_state_drops_what_follows_the_state() -> None:
    assert (
        base_state("CANCELLED by 1000") == "CANCELLED"
        and base_state("COMPLETED+") == "COMPLETED"
        and base_state("") == ""
    )


def test_config_value_reads_the_completion_log_location() -> None:
    text = sample("config.txt")
    assert config_value(text, "JobCompType") == "jobcomp/filetxt"
    assert config_value(text, "JobCompLoc") == "/tmp/sl1/jobcomp.txt"
    assert config_value(text, "NoSuchKey") is None
