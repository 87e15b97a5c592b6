"""Test-wide set-up: the shared test doubles (``tests/campaign_fakes.py``, ``tests/forge/*``) are importable from
every test folder. The folders mirror the package layout (``tests/core`` tests ``bot/core``, and so on)."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

# A shell that starts the suite in the background without job control (`cmd &` in a script, nohup) leaves SIGINT
# ignored, and every process the tests start inherits that: Ctrl-C could then never reach a run, a calibration worker
# or a runner under test. The tests signal real processes as a user's terminal would, so they start from Python's own
# SIGINT handling (a handler, not SIG_IGN, is what children do not inherit).
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

TESTS = Path(__file__).resolve().parent
for folder in (TESTS, TESTS / "forge"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
