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
    suite = None
    if args.suite == "moe":
        from bot.bench.gate_moe import SUITE as suite
    report = run_bench(out_dir=Path(args.out), jobs=args.jobs, suite=suite)
    print(render_bench(report))
    if args.json:
        emit_json(report.summary())
    return EXIT_OK


def cmd_bench_tuners(args: argparse.Namespace) -> int:
    from bot.agent import POLICIES
    from bot.bench.tuners import DEFAULT_POLICIES, bench, default_tasks, render, select_tasks
    from bot.core.recipe import load_recipe

    recipes = [Path(r) for r in args.recipe] if args.recipe else default_tasks()
    for r in recipes:
        if not r.exists():
            raise UsageError(f"{r}: no such recipe")
    if args.seeds < 1:
        raise UsageError(f"--seeds: expected at least 1; got {args.seeds}")
    names = [n for n in (args.tasks or "").split(",") if n]
    chosen = select_tasks(recipes, names)
    known = sorted({load_recipe(p).name for p in recipes})
    if names and not chosen:
        raise UsageError(f"--tasks: no task is called {', '.join(names)}; expected recipe ids or model ids of: {', '.join(known)}")
    policies = [p for p in (args.policies or "").split(",") if p] or None
    allowed = ("attune", *(p for p in POLICIES if p != "heuristic"))
    bad = [p for p in policies or [] if p not in allowed]
    if bad:
        raise UsageError(f"--policies: unknown {', '.join(bad)}; expected a comma list of {', '.join(allowed)} (default {','.join(DEFAULT_POLICIES)})")
    if args.trace and not select_tasks(chosen, [args.trace]):
        raise UsageError(f"--trace: {args.trace} is not one of the tasks run ({', '.join(sorted(load_recipe(p).name for p in chosen))})")
    result = bench(chosen, seeds=args.seeds, policies=policies, trace=args.trace)
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
    bg.add_argument("--suite", choices=("dense", "moe"), default="dense",
                    help="dense: the llama3-tiny cases (default); moe: the moe-tiny MoE cases (bot/bench/gate_moe.py)")
    bg.set_defaults(func=cmd_bench_gate)
    bt = b.add_parser("tuners", help="every policy under the same budget in the simulator (SIMULATED)")
    bt.add_argument("--recipe", action="append", default=[])
    bt.add_argument("--seeds", type=int, default=3)
    bt.add_argument("--tasks", default="", help="comma list of tasks (recipe ids like llama3.1-8b/h100x8, or model ids); default all")
    bt.add_argument("--policies", default="", help="comma list of policies (default attune and every baseline)")
    bt.add_argument("--trace", default="", help="a task whose seed-0 campaigns are printed step by step (change, why, measured, decision)")
    bt.add_argument("--json", action="store_true")
    bt.set_defaults(func=cmd_bench_tuners)
