"""``attune bench gate|tuners``: the published benchmarks (:mod:`bot.bench`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from bot.cli.common import EXIT_OK, UsageError, emit_json


def cmd_bench_gate(args: argparse.Namespace) -> int:
    from bot.bench.gate import render_bench, run_bench

    if args.jobs < 1:
        raise UsageError(f"--jobs: expected at least 1; got {args.jobs}")
    report = run_bench(out_dir=Path(args.out), jobs=args.jobs)
    print(render_bench(report))
    if args.json:
        emit_json(report.summary())
    return EXIT_OK


def cmd_bench_tuners(args: argparse.Namespace) -> int:
    from bot.bench.tuners import bench, default_tasks, render

    recipes = [Path(r) for r in args.recipe] if args.recipe else default_tasks()
    for r in recipes:
        if not r.exists():
            raise UsageError(f"{r}: no such recipe")
    result = bench(recipes, seeds=args.seeds)
    print(render(result))
    if args.json:
        emit_json({k: v for k, v in result.items() if k != "oracle"} | {"oracle": {t: {k: v for k, v in o.items() if k != "oracle_levers"} for t, o in result["oracle"].items()}})
    return EXIT_OK


def register(sub: Any) -> None:
    b = sub.add_parser("bench", help="benchmarks").add_subparsers(dest="bench_cmd", required=True)
    bg = b.add_parser("gate", help="fault-injection benchmark of the gate (real CPU torchtitan runs)")
    bg.add_argument("--out", default=".attune/bench-gate")
    bg.add_argument("--jobs", type=int, default=2, help="real runs at a time (default 2: one per core of a 2-core box)")
    bg.add_argument("--json", action="store_true")
    bg.set_defaults(func=cmd_bench_gate)
    bt = b.add_parser("tuners", help="every policy under the same budget in the simulator (SIMULATED)")
    bt.add_argument("--recipe", action="append", default=[])
    bt.add_argument("--seeds", type=int, default=3)
    bt.add_argument("--json", action="store_true")
    bt.set_defaults(func=cmd_bench_tuners)
