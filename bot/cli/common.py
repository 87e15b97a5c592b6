"""What every command shares: exit codes, the one-line user error, JSON output, the console."""

from __future__ import annotations

import json
import sys
from pathlib import Path
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


def output_problem(path: str, *, make_folders: bool = False) -> str | None:
    """Why the file ``path`` (an ``--out`` flag) cannot be written, found before any work is done;
    ``make_folders``: its missing folders will be made (then the nearest existing one must be a folder)."""
    target = Path(path)
    if target.is_dir():
        return f"{path}: is a folder; expected a file"
    folder = target.parent
    while make_folders and not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        return f"{path}: {folder} is {'a file' if folder.exists() else 'missing'}; expected a folder there"
    return None
