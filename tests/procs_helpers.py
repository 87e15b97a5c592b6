"""Process-tree checks for the signal tests (Linux ``/proc``; no psutil): the ranks under a process, the processes
working inside a folder, and waiting for a condition with a deadline that fails the test instead of hanging it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from bot.runner.procs import alive, descendants

T = TypeVar("T")
ATTUNE = Path(sys.executable).with_name("attune")


def start_attune(repo: Path, *args: str, out: Path) -> subprocess.Popen[bytes]:
    """``attune ARGS`` in ``repo``, in a session of its own (a signal to the test's group never reaches it)."""
    return subprocess.Popen(
        [str(ATTUNE), *args], cwd=repo, stdout=out.open("wb"), stderr=subprocess.STDOUT, start_new_session=True
    )


def ranks(pid: int) -> list[int]:
    """The torchtitan ranks under ``pid`` (processes torchrun started: ``LOCAL_RANK`` is in their environment)."""
    found = []
    for child in descendants(pid):
        try:
            with open(f"/proc/{child}/environ", "rb") as fh:
                if b"\0LOCAL_RANK=" in b"\0" + fh.read():
                    found.append(child)
        except OSError:
            continue
    return found


def working_in(folder: Path) -> list[int]:
    """Live processes whose working directory is inside ``folder`` (torchrun and its ranks run in the run's folder:
    this finds them even after they were orphaned and adopted by init)."""
    folder = Path(folder).resolve()
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cwd = Path(os.readlink(f"/proc/{entry}/cwd"))
            except OSError:
                continue
            if cwd.is_relative_to(folder) and alive(int(entry)):
                found.append(int(entry))
    return found


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


def wait_for(
    what: str, probe: Callable[[], T], timeout_s: float, proc: subprocess.Popen | None = None, log: Path | None = None
) -> T:
    """Poll ``probe`` until it answers something truthy; fail (with the process's output) after ``timeout_s`` or when
    ``proc`` exits first."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = probe()
        if got:
            return got
        tail = log.read_text(errors="replace")[-3000:] if log and log.exists() else ""
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"waiting for {what}: the process exited ({proc.returncode}) first\n{tail}")
        if time.monotonic() > deadline:
            raise AssertionError(f"waiting for {what}: not seen in {timeout_s:.0f}s\n{tail}")
        time.sleep(0.2)


def survivors(pids: list[int]) -> list[str]:
    return [f"{p} {cmdline(p)[:120]}" for p in pids if alive(p)]
