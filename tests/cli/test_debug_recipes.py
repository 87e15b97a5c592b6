"""torchtitan's own debug configs, as `attune recipe init` wrote them into recipes/, train on this CPU through
`attune run`: ranks start in the repository root, where the configs' relative tokenizer and c4_test paths resolve."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ATTUNE = [sys.executable, "-m", "bot.cli"]


@pytest.mark.torchtitan
@pytest.mark.parametrize(
    ("recipe", "steps"), [("recipes/llama3_debugmodel/cpux1.yaml", 4), ("recipes/deepseek_v3_debugmodel/cpux1.yaml", 4)]
)
def test_a_stock_debug_config_trains_with_a_falling_loss(tmp_path, recipe, steps):
    out = tmp_path / "run"
    proc = subprocess.run(
        [*ATTUNE, "run", recipe, "--steps", str(steps), "--out", str(out), "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["outcome"] == "ok" and result["steps"] == steps and not result["simulated"]
    assert result["loss_last"] < result["loss_first"] - 0.5, result
    record = json.loads((out / "record.json").read_text())
    assert record["model"] == recipe.split("/")[1]
