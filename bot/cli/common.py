"""What every command shares: exit codes, the one-line user error, JSON output, the console."""

from __future__ import annotations

import json
import sys
from typing import Any

EXIT_OK, EXIT_REJECT, EXIT_USAGE, EXIT_FAILED = 0, 1, 2, 3


class UsageError(Exception):
    """A user mistake, phrased as one line."""


def console():
    """A rich console whose progress lines are never cut at 80 columns in a log."""
    from rich.console import Console

    return Console(stderr=False, highlight=False, soft_wrap=True)


def emit_json(obj: dict[str, Any]) -> None:
    """The command's result as one JSON object on the last stdout line."""
    sys.stdout.write(json.dumps(obj, default=str) + "\n")
    sys.stdout.flush()
