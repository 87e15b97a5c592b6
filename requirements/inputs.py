"""The fingerprint of what the locks are compiled from: pyproject.toml's dependency lists and torch-cpu.txt's pin.

``requirements/update`` writes it into each lock's header; tests/test_dependency_locks.py recomputes it, so a
dependency change in pyproject.toml without a new lock fails the suite. Run as a script: prints the fingerprint.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEADER = "# inputs-sha256: "


def torch_pin(root: Path = ROOT) -> str:
    """The ``torch==…`` requirement of torch-cpu.txt, without its marker and hash."""
    text = (root / "requirements" / "torch-cpu.txt").read_text()
    found = re.search(r"^(torch==\S+)", text, re.M)
    if found is None:
        raise SystemExit("requirements/torch-cpu.txt: no `torch==<version>` line")
    return found.group(1)


def fingerprint(root: Path = ROOT) -> str:
    """sha256 of the runtime dependencies, the `test` extra and the torch pin, in order."""
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    inputs = {
        "dependencies": project.get("dependencies", []),
        "test": project.get("optional-dependencies", {}).get("test", []),
        "torch": torch_pin(root),
    }
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


if __name__ == "__main__":
    sys.stdout.write(fingerprint() + "\n")
