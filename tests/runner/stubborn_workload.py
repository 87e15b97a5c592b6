"""A workload module for the runner tests: the tiny CPU config, in ranks that ignore SIGTERM.

A rank that ignores SIGTERM (its own handler, a blocked collective) must still be gone after the
runner kills a hung run. Imported by torchtitan inside each rank (``--module``) and by the
in-process config resolution, where it changes nothing (no ``LOCAL_RANK``).

Such a rank would outlive a test session that is itself killed hard (SIGKILL/SIGTERM of pytest
skips every cleanup), so each rank also watches its own lifetime: it exits when torchrun, its
parent, has been gone for 30 s (long enough for the test to see an orphan the runner left), and
after 5 minutes in any case.
"""

from __future__ import annotations

import os
import signal
import threading
import time

from bot.inrank.workloads.llama3_tiny import llama3_tiny_cpu

__all__ = ["llama3_tiny_cpu"]

MAX_LIFETIME_S = 300.0
ORPHAN_GRACE_S = 30.0


def _watchdog(parent: int, started: float) -> None:
    orphaned_at = None
    while True:
        time.sleep(1.0)
        now = time.monotonic()
        if orphaned_at is None and os.getppid() != parent:
            orphaned_at = now
        if now - started > MAX_LIFETIME_S or (orphaned_at is not None and now - orphaned_at > ORPHAN_GRACE_S):
            os._exit(1)


if "LOCAL_RANK" in os.environ:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    threading.Thread(target=_watchdog, args=(os.getppid(), time.monotonic()), daemon=True).start()
