"""``attune demo --recipe``: the MoE recipe is the second embedded example; a bad --recipe is one clear line, exit 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bot.cli.campaign import DEMO_RECIPES

REPO = Path(__file__).resolve().parents[2]


def test_every_embedded_example_is_a_shipped_recipe() -> None:
    assert DEMO_RECIPES == ("llama3-tiny/cpu.yaml", "moe-tiny/cpu.yaml")
    assert all((REPO / "recipes" / r).is_file() for r in DEMO_RECIPES)


@pytest.mark.parametrize(
    ("arg", "says"),
    [
        ("../outside.yaml", "--recipe: expected a recipe under recipes/"),
        ("moe-tiny/nope.yaml", "nope.yaml: no such recipe"),
    ],
)
def test_a_bad_demo_recipe_is_one_line_and_exit_2(arg: str, says: str, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    before = sorted(p.name for p in tmp_path.iterdir())
    out = subprocess.run(
        [sys.executable, "-m", "bot.cli", "demo", "--recipe", arg],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=120,
    )
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and "Traceback" not in out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before
