"""bot/runner/procs.py: a child started with ``die_with_parent`` is signalled when its parent is SIGKILLed (Linux)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bot.runner.procs import alive, descendants

PARENT = """
import subprocess, sys, time
from bot.runner.procs import die_with_parent
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], preexec_fn=die_with_parent() if sys.argv[1] == "yes" else None)
print(child.pid, flush=True)
time.sleep(600)
"""


def _orphan_after_parent_killed(with_hook: bool, wait_s: float) -> tuple[int, bool]:
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, "yes" if with_hook else "no"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
        start_new_session=True,
    )
    child = int(parent.stdout.readline())
    assert child in descendants(parent.pid)
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + wait_s
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    survived = alive(child)
    if survived:
        os.kill(child, signal.SIGKILL)
    return child, survived


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_a_child_started_with_die_with_parent_ends_when_its_parent_is_sigkilled() -> None:
    assert _orphan_after_parent_killed(with_hook=True, wait_s=30)[1] is False
    # without it the child (asleep for 10 minutes) is orphaned and lives on
    assert _orphan_after_parent_killed(with_hook=False, wait_s=1)[1] is True
