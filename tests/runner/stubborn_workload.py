"""A workload module for the runner tests: the tiny CPU config, in ranks that ignore SIGTERM.

A rank that ignores SIGTERM (its own handler, a blocked collective) must still be gone after the
runner kills a hung run. Imported by torchtitan inside each rank (``--module``) and by the
in-process config resolution, where it changes nothing (no ``LOCAL_RANK``).
"""

from __future__ import annotations

import os
import signal

from bot.workloads.llama3_tiny import llama3_tiny_cpu

__all__ = ["llama3_tiny_cpu"]

if "LOCAL_RANK" in os.environ:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
