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


# The default suite runs on two pytest-xdist workers, a test file to a worker (pyproject's addopts), and the files are
# handed out in collection order. The longest go first (longest-processing-time-first scheduling), so that neither
# worker is left to run one of them alone at the end. Seconds each took in a one-process run of the default suite.
LONGEST_FIRST = (
    "github/test_workflows_act.py",  # 386 s
    "drive/test_local_campaign.py",  # 224 s
    "cli/test_campaign_commands.py",  # 205 s on two workers (its top tests in a CI run's --durations)
    "runner/test_slurm.py",  # 123 s
    "drive/test_cross_driver.py",  # 98 s
    "runner/test_local.py",  # 93 s
    "cli/test_campaign_signals.py",  # 74 s
    "cli/test_debug_recipes.py",  # 74 s on two workers
    "gate/test_gate_e2e.py",  # 63 s
    "drive/test_crash_resume.py",  # 60 s
    "runner/test_layouts.py",  # 59 s
)


def pytest_collection_modifyitems(items: list) -> None:
    rank = {TESTS / name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(Path(item.path), len(rank)))  # stable: every other order is kept
