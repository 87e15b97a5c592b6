"""The processes a run leaves behind, and how none survive the process that started them (Linux ``/proc``).

- :func:`die_with_parent`: a ``preexec_fn`` for ``subprocess.Popen`` that asks the kernel to send the child a
  signal when its parent dies (``prctl(PR_SET_PDEATHSIG)``, Linux only; elsewhere it does nothing). torchrun
  started this way gets SIGTERM when the ``attune`` process that launched it is SIGKILLed, and torchrun's elastic
  agent then terminates its ranks; a ``python -m gate.runs`` worker likewise. The signal is sent when the *thread*
  that forked the child exits (prctl(2)), so a child must be started from the thread that waits for it.
- :func:`descendants`, :func:`alive`: the process tree under a pid, read from ``/proc``.
- :func:`end_tree`: terminate a launched process and every descendant's process group, then kill what is left.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent(sig: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child receive ``sig`` when this process (its parent thread) dies; None off
    Linux. If the parent died between the fork and the prctl call, the child signals itself at once."""
    if not sys.platform.startswith("linux"):
        return None
    parent = os.getpid()
    prctl = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).prctl  # looked up before the fork

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:  # the parent is already gone: the kernel will not send it any more
            os.kill(os.getpid(), sig)

    return preexec


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            stat = fh.read()
    except OSError:
        return None
    return stat[stat.rfind(")") + 2 :].split()  # the command name may hold spaces


def descendants(pid: int) -> list[int]:
    """Every descendant of ``pid`` (Linux ``/proc``; empty elsewhere)."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        fields = _stat_fields(int(entry))
        if fields and len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(entry))
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    """Whether ``pid`` is running (a zombie is not)."""
    fields = _stat_fields(pid)
    if fields is not None:
        return fields[0] != "Z"
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not os.path.isdir("/proc")  # /proc exists but has no entry: gone


def end_tree(proc: subprocess.Popen) -> None:
    """Terminate torchrun and every rank, then kill what is left.

    torchrun starts each rank in a session (process group) of its own, so killing torchrun's
    group alone can orphan a rank that outlives the SIGTERM (torchrun is then SIGKILLed before
    it reaps it). Every descendant's group is signalled, and the ranks are waited for.
    """
    pids = [proc.pid, *descendants(proc.pid)]
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        pids += [p for p in descendants(proc.pid) if p not in pids]  # while the tree is intact
        groups = set()
        for pid in pids:
            try:
                groups.add(os.getpgid(pid))
            except ProcessLookupError:
                continue
        for pgid in groups:
            try:
                os.killpg(pgid, sig)
            except (ProcessLookupError, PermissionError):
                continue
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            proc.poll()
            if not any(alive(pid) for pid in pids):
                return
            time.sleep(0.1)
