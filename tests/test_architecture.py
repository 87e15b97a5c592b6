"""The layer contract of docs/architecture.md (``[tool.importlinter]`` in pyproject.toml) holds, and it can fail: the same
check on a copy of the tree with one back-pointing import added is broken."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).with_name("lint-imports")


def lint(tree: Path) -> subprocess.CompletedProcess:
    # the tree under test is first on the path: grimp reads that copy of bot/ and gate/, not the installed one
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tree), "PYTHONSAFEPATH": "1"}
    return subprocess.run(
        [str(LINT), "--config", str(tree / "pyproject.toml"), "--no-cache"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def copy_tree(dest: Path) -> Path:
    for part in ("bot", "gate"):
        shutil.copytree(ROOT / part, dest / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")
    return dest


def test_the_layer_contract_is_kept() -> None:
    out = lint(ROOT)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "0 broken" in out.stdout


@pytest.mark.parametrize(
    ("module", "back_import", "contract"),
    [
        ("bot/core/records.py", "import bot.drive.executor", "layers"),  # the bottom pointing at the top
        ("gate/config_check.py", "import bot.campaign.machine", "gate knows nothing"),
        ("bot/agent/heuristic/__init__.py", "import bot.campaign.report", "layers"),  # siblings are independent
        ("bot/runner/base.py", "import bot.runner.local", "no import cycles"),  # a base importing its plug-in
    ],
)
def test_a_back_pointing_import_breaks_it(tmp_path: Path, module: str, back_import: str, contract: str) -> None:
    tree = copy_tree(tmp_path / "tree")
    path = tree / module
    path.write_text(path.read_text() + f"\n\ndef _back() -> None:\n    {back_import}  # noqa\n")
    out = lint(tree)
    assert out.returncode != 0, out.stdout[-3000:]
    broken = out.stdout.split("Broken contracts", 1)[-1]
    assert contract in broken, broken[:3000]
