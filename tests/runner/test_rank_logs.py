"""bot/runner/rank_logs.py: the cause of a multi-rank crash, read from the log of the rank torchrun names first."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.runner.rank_logs import crash_cause, root_cause

# torchrun's summary of a failed run (torch 2.13, trimmed): rank 0 saw the peer go away, rank 1 failed first
SUMMARY = """\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
torchtitan.train FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-12-08_00:38:59
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 8727)
  error_file: /o/ranks/x/attempt_0/0/error.json
  traceback : Traceback (most recent call last):
  RuntimeError: [gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:16094.
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-08_00:38:59
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : {exitcode} (pid: 8728)
  error_file: {error_file}
  traceback : {traceback}
============================================================
"""
RAISED = SUMMARY.format(exitcode=1, error_file="/o/ranks/x/attempt_0/1/error.json", traceback="Traceback (most ...")
ABORTED = SUMMARY.format(exitcode=-6, error_file="<N/A>", traceback="Signal 6 (SIGABRT) received by PID 8728")


def _rank_log(root: Path, rank: int, text: str) -> Path:
    folder = root / "ranks" / "4b365f74_tvpzfh9a" / "attempt_0" / str(rank)
    folder.mkdir(parents=True)
    (folder / "stderr.log").write_text(text)
    return root / "ranks"


@pytest.mark.parametrize(
    ("console", "stderr", "cause"),
    [
        (
            RAISED,
            '[rank1]:Traceback (most recent call last):\n[rank1]:  File "hooks.py", line 214, in boom\n'
            "[rank1]:RuntimeError: attune test hook: deliberate crash at step 2\n",
            "rank 1: RuntimeError: attune test hook: deliberate crash at step 2",
        ),
        (
            ABORTED,
            "terminate called after throwing an instance of 'c10::Error'\n  what():  bad optional access\n",
            "rank 1: what():  bad optional access; Signal 6 (SIGABRT) received by PID 8728",
        ),
        (ABORTED, "", "rank 1: Signal 6 (SIGABRT) received by PID 8728"),
    ],
    ids=["exception", "abort-with-a-last-line", "abort-with-an-empty-log"],
)
def test_the_cause_is_the_first_failed_ranks_own(tmp_path: Path, console: str, stderr: str, cause: str) -> None:
    _rank_log(tmp_path, 0, "RuntimeError: Connection closed by peer\n")  # the rank that saw the other go away
    assert crash_cause(_rank_log(tmp_path, 1, stderr), console) == cause


def test_nothing_is_claimed_without_a_summary_or_the_ranks_log(tmp_path: Path) -> None:
    assert root_cause("RuntimeError: something\n") is None
    assert root_cause(RAISED) == (1, "Traceback (most ...")
    assert crash_cause(tmp_path / "ranks", RAISED) == ""  # no rank logs: a one-rank run keeps its console's line
    assert crash_cause(_rank_log(tmp_path, 1, "RuntimeError: x\n"), "exit code 1") == ""
