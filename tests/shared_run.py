"""One real ``attune run`` of the CPU recipe per test session, shared by ``tests/test_cli.py``
(the command's contract) and ``tests/runner/test_local.py`` (the local runner's ``ok`` record).

A real run costs ~20 s on an idle 2-core box, so it is made once. The recipe is the shipped one
with two test settings: one OpenMP thread (two spinning threads are up to 10x slower when
another process shares the box; docs/reference/cpu-torchtitan.md §1) and one warm-up step (so the summary's
exclusion of step 1 is visible).
"""

from __future__ import annotations

import atexit
import functools
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CPU_RECIPE = REPO / "recipes" / "llama3-tiny" / "cpu.yaml"
ATTUNE = Path(sys.executable).with_name("attune")
STEPS = 8


@dataclass(frozen=True)
class SharedRun:
    proc: subprocess.CompletedProcess[str]
    recipe: Path
    out: Path


def shared_recipe_text() -> str:
    text = CPU_RECIPE.read_text()
    new = text.replace('OMP_NUM_THREADS: "2"', 'OMP_NUM_THREADS: "1"').replace(
        "  warmup_steps: 5\n", "  warmup_steps: 1\n"
    )
    assert new.count("\n") == text.count("\n") and 'OMP_NUM_THREADS: "1"' in new and "  warmup_steps: 1\n" in new
    return new


@functools.cache
def cli_ok_run() -> SharedRun:
    tmp = Path(tempfile.mkdtemp(prefix="attune-shared-run-"))
    atexit.register(shutil.rmtree, tmp, True)
    recipe = tmp / "cpu.yaml"
    recipe.write_text(shared_recipe_text())
    out = tmp / "run"
    argv = [str(ATTUNE), "run", str(recipe), "--steps", str(STEPS), "--json", "--out", str(out)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=REPO)
    return SharedRun(proc=proc, recipe=recipe, out=out)
