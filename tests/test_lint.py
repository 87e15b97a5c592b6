"""The tree is lint-clean, formatted and type-checked with the project's own settings (pyproject.toml: [tool.ruff],
[tool.mypy]), and each check can fail: the same settings refuse a small tree with the fault they exist to catch.

The default suite runs these (``./dev test``, and so CI); .pre-commit-config.yaml runs the same tools before a commit.
A missing tool skips locally and fails under CI (``CI`` set), where the test extra is installed.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def tool(module: str, *args: str, cwd: Path = ROOT, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``python -m <module> args`` in ``cwd`` with this interpreter (the venv's tools, the repository's settings)."""
    if importlib.util.find_spec(module) is None:
        message = f"{module} is not installed; install the test extra (./dev setup)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return subprocess.run(
        [sys.executable, "-m", module, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


def shown(out: subprocess.CompletedProcess[str]) -> str:
    return (out.stdout[-4000:] + out.stderr[-2000:]).strip()


def small_tree(tmp_path: Path, files: dict[str, str]) -> Path:
    """A tree with the repository's pyproject.toml and ``files`` (path -> text)."""
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


# -- ruff ----------------------------------------------------------------------------------------------------------


def test_ruff_check_passes() -> None:
    out = tool("ruff", "check", "--no-cache", ".")
    assert out.returncode == 0, shown(out)


def test_ruff_format_check_passes() -> None:
    out = tool("ruff", "format", "--check", "--no-cache", ".")
    assert out.returncode == 0, "run `ruff format .`:\n" + shown(out)


def test_ruff_refuses_an_unused_import_and_unformatted_code(tmp_path: Path) -> None:
    tree = small_tree(tmp_path, {"bot/x.py": "import os\n\n\ndef f( a ):\n    return a\n"})
    check = tool("ruff", "check", "--no-cache", ".", cwd=tree)
    assert check.returncode == 1 and "F401" in check.stdout, shown(check)
    fmt = tool("ruff", "format", "--check", "--no-cache", ".", cwd=tree)
    assert fmt.returncode == 1 and "bot/x.py" in fmt.stdout, shown(fmt)


# -- mypy ----------------------------------------------------------------------------------------------------------


def test_mypy_passes() -> None:
    # the cache (.mypy_cache, ignored by git) makes a rerun quick; CI starts without one
    out = tool("mypy", "--no-error-summary")
    assert out.returncode == 0, shown(out)


def test_mypy_is_strict_on_core_campaign_drive_and_gate_and_basic_elsewhere(tmp_path: Path) -> None:
    untyped = "def f(x):\n    return x\n"
    files = {f"{pkg}/__init__.py": "" for pkg in ("bot", "bot/core", "bot/campaign", "bot/drive", "bot/agent", "gate")}
    files |= {f"{pkg}/x.py": untyped for pkg in ("bot/core", "bot/campaign", "bot/drive", "bot/agent", "gate")}
    files["bot/agent/y.py"] = "def g() -> int:\n    return 'one'\n"  # a real error: caught everywhere
    tree = small_tree(tmp_path, files)
    out = tool("mypy", "--cache-dir", str(tmp_path / "cache"), "--no-error-summary", cwd=tree)
    flagged = {line.split(":", 1)[0] for line in out.stdout.splitlines() if ": error:" in line}
    assert flagged == {"bot/core/x.py", "bot/campaign/x.py", "bot/drive/x.py", "gate/x.py", "bot/agent/y.py"}, shown(
        out
    )
