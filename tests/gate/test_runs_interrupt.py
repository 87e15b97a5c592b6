"""gate/runs.py: Ctrl-C during a parallel ``run_many`` (two ``python -m gate.runs`` worker processes, each running
real torchtitan under torchrun) ends both workers, their torchruns and their ranks before the caller exits.

Ctrl-C is what a terminal does: SIGINT to the whole foreground process group — the caller and its workers (torchrun
and its ranks run in sessions of their own and get nothing). The workers leave the decision to the caller, which
terminates them; each worker ends its run on SIGTERM.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from procs_helpers import cmdline, ranks, survivors, wait_for, working_in
from shared_run import shared_recipe_text

from bot.runner.procs import descendants

REPO = Path(__file__).resolve().parents[2]
DRIVER = """
import sys
from pathlib import Path
from gate.runs import RunSpec, run_many
text = Path(sys.argv[1]).read_text()
specs = {f"r{k}": RunSpec(label=f"repeat {k}", recipe_text=text, steps=400, repeat=k) for k in (1, 2)}
run_many(specs, Path(sys.argv[2]), jobs=2)
"""


@pytest.mark.torchtitan
def test_ctrl_c_during_parallel_calibration_runs_ends_every_worker_torchrun_and_rank(tmp_path: Path) -> None:
    recipe = tmp_path / "cpu.yaml"
    recipe.write_text(shared_recipe_text())
    cache = tmp_path / "cache"
    log = tmp_path / "driver.log"
    proc = subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(recipe), str(cache)],
        cwd=REPO,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # its own group: the test's is never signalled
    try:
        wait_for("a rank under each of the two workers", lambda: len(ranks(proc.pid)) >= 2, 300, proc, log)
        tree = descendants(proc.pid)
        workers = [p for p in tree if "gate.runs" in cmdline(p)]
        assert len(workers) == 2, [cmdline(p) for p in tree]
        os.killpg(proc.pid, signal.SIGINT)
        rc = proc.wait(timeout=120)
        left = survivors(tree) + survivors(working_in(cache))  # the moment the caller has exited
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert rc != 0 and "KeyboardInterrupt" in log.read_text(), log.read_text()[-3000:]
    assert left == [], left
