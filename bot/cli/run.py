"""``attune run``: run a recipe (torchtitan under torchrun, or the simulator) and write its run record."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bot.cli.common import EXIT_FAILED, EXIT_OK, UsageError, console, emit_json

if TYPE_CHECKING:
    from bot.core.recipe import Recipe


def _steps(flag: int | None, recipe: Recipe) -> int:
    """The steps to run: ``--steps`` when given (2 or more, beyond the recipe's warm-up), else the recipe's own."""
    from bot.core.recipe import MAX_BENCH_STEPS

    if flag is None:
        return recipe.bench.steps
    if flag < 2:
        raise UsageError(f"--steps: expected at least 2; got {flag}")
    if flag > MAX_BENCH_STEPS:  # a record of 10^9 steps does not fit in memory (the run was killed)
        raise UsageError(f"--steps: expected at most {MAX_BENCH_STEPS:,} (a benchmark measures tens); got {flag:,}")
    if flag <= recipe.bench.warmup_steps:
        raise UsageError(
            f"--steps: expected more than the recipe's bench.warmup_steps ({recipe.bench.warmup_steps}), "
            f"which are not measured; got {flag}"
        )
    return flag


def _out_dir(flag: str | None, recipe: Recipe) -> Path:
    """The run's folder (``--out``, default ``runs/<recipe>``): a folder or nothing yet, never a file."""
    out = Path(flag or f"runs/{recipe.name.replace('/', '_')}")
    for path in (out, *out.parents):
        if path.exists() and not path.is_dir():
            what = "--out" if flag else "the default output folder"
            where = "" if path == out else f" {path}"
            raise UsageError(f"{what} {out}:{where} is a file; expected a folder for the run record and the run's logs")
        if path.exists():
            break
    return out


STOP_AFTER = 3  # measured steps before --stop-below may stop a run, unless --stop-after says otherwise


def _limits(args: argparse.Namespace) -> dict[str, Any]:
    """The run's limits (``--max-wall-s``, ``--stop-below``/``--stop-after``), each a positive finite number."""
    from bot.runner import EarlyStop

    limits: dict[str, Any] = {}
    if args.max_wall_s is not None:
        if not (math.isfinite(args.max_wall_s) and args.max_wall_s > 0):
            raise UsageError(f"--max-wall-s: expected a positive number of seconds; got {args.max_wall_s}")
        limits["max_wall_s"] = args.max_wall_s
    if args.stop_after is not None and args.stop_below is None:
        raise UsageError("--stop-after: only with --stop-below (the tokens/s a run is stopped under)")
    if args.stop_below is not None:
        after = STOP_AFTER if args.stop_after is None else args.stop_after
        if not (math.isfinite(args.stop_below) and args.stop_below > 0) or after < 2:
            raise UsageError(
                f"--stop-below/--stop-after: expected a positive, finite tokens/s and at least 2 steps; got {args.stop_below}, {after}"
            )
        limits["early_stop"] = EarlyStop(below_tps=args.stop_below, after_steps=after)
    return limits


def cmd_run(args: argparse.Namespace) -> int:
    from bot.campaign.report import render_run_summary
    from bot.core.recipe import load_recipe
    from bot.core.records import MEASURED_OUTCOMES, write_record
    from bot.runner import check_runnable, get_runner

    recipe = load_recipe(args.recipe)
    check_runnable(recipe, args.recipe)  # before anything is made: no output folder, no run
    steps = _steps(args.steps, recipe)
    out = _out_dir(args.out, recipe)
    limits = _limits(args)
    con = console() if not args.json else None
    options: dict[str, Any] = {"hook": args.hook} if args.hook else {}
    if recipe.cluster.launcher in ("local", "slurm") and recipe.devices > 1:
        # more than one rank: sharded init differs per layout, so the run loads its objective's seed checkpoint
        # (bot/runner/seed.py), cached where the gate caches its runs (under Slurm: made on this login node, one rank)
        options["seed_cache"] = Path(".attune")
    runner = get_runner(recipe.cluster.launcher, **options)
    if con:
        con.print(f"[bold]attune run[/] {args.recipe} ({recipe.cluster.launcher}, {steps} steps) -> {out}")
    record = runner.run(recipe, steps=steps, out_dir=out, recipe_path=str(args.recipe), **limits)
    path = write_record(record, out / "record.json")
    if con:
        con.print(render_run_summary(record, str(path)))
    if args.json:
        s = record.summary
        emit_json(
            {
                "record": str(path),
                "outcome": record.outcome,
                "reason": record.reason,
                "steps": s.steps_completed,
                "loss_first": s.loss_first,
                "loss_last": s.loss_last,
                "tps_median": s.tps_median,
                "tps_cv": s.tps_cv,
                "step_time_median_s": s.step_time_median_s,
                "mfu": s.mfu,
                "device_hours": s.device_hours,
                "simulated": record.simulated,
            }
        )
    return EXIT_OK if record.outcome in MEASURED_OUTCOMES else EXIT_FAILED  # stopped: measured, ended early on purpose


def register(sub: Any) -> None:
    r = sub.add_parser("run", help="run a recipe and write its run record")
    r.add_argument("recipe")
    r.add_argument("--steps", type=int)
    r.add_argument("--out")
    r.add_argument("--json", action="store_true")
    r.add_argument(
        "--max-wall-s", type=float, help="stop the run (outcome timeout) before it has run this many seconds"
    )
    r.add_argument(
        "--stop-below",
        type=float,
        metavar="TPS",
        help="stop early (outcome stopped) once the measured median is below TPS tokens/s/device",
    )
    r.add_argument(
        "--stop-after",
        type=int,
        default=None,
        metavar="N",
        help=f"measured steps before --stop-below may stop it (default {STOP_AFTER}; only with --stop-below)",
    )
    r.add_argument("--hook", help=argparse.SUPPRESS)  # test-only workload hook
    r.set_defaults(func=cmd_run)
