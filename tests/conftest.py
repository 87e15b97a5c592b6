"""Test-wide set-up: the shared test doubles (``tests/campaign_fakes.py``, ``tests/forge/*``) are importable from
every test folder. The folders mirror the package layout (``tests/core`` tests ``bot/core``, and so on)."""

from __future__ import annotations

import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent
for folder in (TESTS, TESTS / "forge"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
