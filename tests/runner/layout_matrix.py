"""Measure the real-run matrix of 2-rank layouts on this machine: ``python -m tests.runner.layout_matrix [OUT] [STEPS]``.

Every layout of ``bot.core.layouts.LAYOUTS_2`` is applied to ``recipes/llama3-tiny/cpu-2rank.yaml`` and run for real
(torchtitan under torchrun, 2 gloo ranks, the CPU compatibility layer, the objective's seed checkpoint) with the
runner's own layout pre-flight *off*, so what is recorded is torchtitan's answer, not the catalog's. The outcomes are
written to ``tests/data/cpu2_layout_matrix.json`` with how they were measured; the legality tests read that file.
"""

from __future__ import annotations

import json
import platform
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "llama3-tiny" / "cpu-2rank.yaml"
OUT = REPO / "tests" / "data" / "cpu2_layout_matrix.json"


def layout_text(levers: dict) -> str:
    from bot.bench.gate_faults import edit_recipe_text

    return edit_recipe_text(RECIPE.read_text(), levers=levers, source="layout")


def run_layout(name: str, levers: dict, *, steps: int, work: Path, seed_cache: Path) -> dict:
    from bot.core.recipe import parse_recipe_text
    from bot.runner.local import LocalRunner

    text = layout_text(levers)
    recipe = parse_recipe_text(text, name)
    rec = LocalRunner(timeout_s=300, startup_s=240, seed_cache=seed_cache, check_layout=False).run(
        recipe, steps=steps, out_dir=work / name, recipe_text=text
    )
    reason = rec.reason
    if rec.outcome == "crash":
        reason = rank_error(work / name / "train.log") or reason
    return {
        "layout": name,
        "levers": levers,
        "outcome": rec.outcome,
        "reason": reason[:400],
        "losses": [s.loss for s in rec.steps],
        "tokens_per_s": rec.summary.tps_median,
        "wall_s": round(rec.summary.wall_s, 1),
        "seed_checkpoint": rec.seed_checkpoint,
    }


def rank_error(log: Path) -> str:
    """A rank's exception line and the frame that raised it (torchrun's own ChildFailedError says nothing)."""
    import re

    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    frame = ""
    for line in lines:
        body = re.sub(r"^(\[rank\d+\]:)+", "", line).strip()
        if body.startswith("File "):
            frame = body
        elif re.match(r"^[A-Za-z_.]*(Error|Exception)\b", body):
            return f"{body} ({frame})" if frame else body
    return ""


def main(argv: list[str]) -> None:
    import torch

    from bot.core.layouts import LAYOUTS_2

    out = Path(argv[0]) if argv else OUT
    steps = int(argv[1]) if len(argv) > 1 else 3
    names = argv[2].split(",") if len(argv) > 2 else list(LAYOUTS_2)
    work = Path(tempfile.mkdtemp(prefix="attune-layouts-"))
    rows = []
    t0 = time.monotonic()
    for name in names:
        row = run_layout(name, LAYOUTS_2[name], steps=steps, work=work, seed_cache=work / "cache")
        print(json.dumps(row), flush=True)
        rows.append(row)
    from importlib.metadata import version

    doc = {
        "how": (
            f"python -m tests.runner.layout_matrix: each layout of bot.core.layouts.LAYOUTS_2 applied to "
            f"recipes/llama3-tiny/cpu-2rank.yaml, run for real with bot.runner.local.LocalRunner (torchrun, 2 gloo ranks, "
            f"1 thread each, CPU compatibility layer, seed checkpoint, layout pre-flight off), {steps} steps each, "
            f"on a shared 2-core machine: tokens/s are indicative only"
        ),
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "stack": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "torchtitan": version("torchtitan"),
            "cpu": platform.processor() or platform.machine(),
        },
        "steps": steps,
        "wall_s": round(time.monotonic() - t0, 1),
        "layouts": rows,
    }
    if out.exists() and len(argv) > 2:  # a re-measure of some layouts: keep the other rows
        old = json.loads(out.read_text())
        fresh = {row["layout"]: row for row in rows}
        doc["layouts"] = [fresh.get(row["layout"], row) for row in old["layouts"]]
        doc["how"] = old["how"] + f"; re-measured {', '.join(names)} at {doc['measured_at']}"
        doc["measured_at"], doc["wall_s"] = old["measured_at"], old["wall_s"]
    out.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
