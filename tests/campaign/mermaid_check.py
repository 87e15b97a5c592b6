"""Mermaid's own parser, run in Node.js under jsdom (npm ``mermaid`` and ``jsdom``, pinned in package.json): every chart
in one process. Without Node or the packages the test is skipped with the reason, and fails under ``CI=true``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).with_name("mermaid_parse.mjs")


def parse_all(charts: list[str]) -> list[dict]:
    """``{"ok": bool, "type" | "error": str}`` per chart, from ``mermaid.parse``."""
    node = shutil.which("node")
    missing = [p for p in ("mermaid", "jsdom") if not (ROOT / "node_modules" / p / "package.json").is_file()]
    if node is None or missing:
        why = "node is not installed" if node is None else f"npm packages missing: {', '.join(missing)} (run `npm ci`)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"mermaid check cannot start: {why}")
        pytest.skip(f"mermaid check cannot start: {why}")
    out = subprocess.run(
        [node, str(SCRIPT)], input=json.dumps(charts), capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])
