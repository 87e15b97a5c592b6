"""The ``attune`` command: run, recipe, gate, campaign, demo, leaderboard, bench, lessons, sim, github.

Every handler returns an exit code. User mistakes (a bad recipe, an unknown lever, a refused
value, a missing file) print one line on stderr and exit 2 — never a traceback. With ``--json``
the last stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

EXIT_OK, EXIT_REJECT, EXIT_USAGE, EXIT_FAILED = 0, 1, 2, 3


class UsageError(Exception):
    """A user mistake, phrased as one line."""


def _console():
    from rich.console import Console

    return Console(stderr=False, highlight=False, soft_wrap=True)  # progress lines are never cut at 80 columns in a log


def emit_json(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj, default=str) + "\n")
    sys.stdout.flush()


# ---------------------------------------------------------------- run / recipe
def cmd_run(args: argparse.Namespace) -> int:
    from bot.recipe import load_recipe
    from bot.records import MEASURED_OUTCOMES, write_record
    from bot.report import render_run_summary
    from bot.runner.base import EarlyStop, get_runner

    recipe = load_recipe(args.recipe)
    out = Path(args.out or f"runs/{recipe.name.replace('/', '_')}")
    steps = args.steps or recipe.bench.steps
    if steps < 2:
        raise UsageError(f"--steps: expected at least 2; got {steps}")
    console = _console() if not args.json else None
    limits: dict[str, Any] = {}
    if args.max_wall_s is not None:
        if not args.max_wall_s > 0:
            raise UsageError(f"--max-wall-s: expected a positive number of seconds; got {args.max_wall_s}")
        limits["max_wall_s"] = args.max_wall_s
    if args.stop_below is not None:
        if not args.stop_below > 0 or args.stop_after < 2:
            raise UsageError(f"--stop-below/--stop-after: expected a positive tokens/s and at least 2 steps; got {args.stop_below}, {args.stop_after}")
        limits["early_stop"] = EarlyStop(below_tps=args.stop_below, after_steps=args.stop_after)
    runner = get_runner(recipe.cluster.launcher, **({"hook": args.hook} if args.hook else {}))
    if console:
        console.print(f"[bold]attune run[/] {args.recipe} ({recipe.cluster.launcher}, {steps} steps) -> {out}")
    record = runner.run(recipe, steps=steps, out_dir=out, recipe_path=str(args.recipe), **limits)
    path = write_record(record, out / "record.json")
    if console:
        console.print(render_run_summary(record, str(path)))
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


def cmd_recipe_show(args: argparse.Namespace) -> int:
    import shlex

    from bot.recipe import load_recipe
    from bot.runner.command import build_launch
    from bot.runner.resolve import ResolveError, resolve_recipe

    recipe = load_recipe(args.recipe)
    steps = recipe.bench.steps
    if recipe.cluster.launcher == "sim":
        print(f"# {recipe.name}: simulated ({recipe.cluster.devices} x {recipe.cluster.hardware}); no torchtitan command")
        print(json.dumps({"levers": recipe.levers, "pinned": recipe.pinned}, indent=1))
        return EXIT_OK
    launch = build_launch(recipe, steps=steps, dump_folder="runs/<out>/titan")
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in launch.env.items())
    print("# command")
    print((env + " " if env else "") + shlex.join(launch.argv))
    try:
        flat = resolve_recipe(recipe, steps=steps)
    except ResolveError as exc:
        print(f"# resolved config: refused by torchtitan\n{exc}")
        return EXIT_FAILED
    print("# resolved torchtitan config")
    for key in sorted(flat):
        if not key.startswith("model_spec.model.layers."):
            print(f"{key} = {flat[key]!r}")
    return EXIT_OK


def cmd_recipe_set(args: argparse.Namespace) -> int:
    from bot.recipe import load_recipe, set_lever

    before = load_recipe(args.recipe).levers.get(args.lever)
    value = set_lever(args.recipe, args.lever, args.value)
    print(f"{args.recipe}: {args.lever}: {before!r} -> {value!r}")
    return EXIT_OK


# ---------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="attune", description="Tune a torchtitan recipe for throughput, one lever at a time, behind a correctness gate.")
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("run", help="run a recipe and write its run record")
    r.add_argument("recipe")
    r.add_argument("--steps", type=int)
    r.add_argument("--out")
    r.add_argument("--json", action="store_true")
    r.add_argument("--max-wall-s", type=float, help="stop the run (outcome timeout) before it has run this many seconds")
    r.add_argument("--stop-below", type=float, metavar="TPS",
                   help="stop early (outcome stopped) once the measured median is below TPS tokens/s/device")
    r.add_argument("--stop-after", type=int, default=3, metavar="N", help="measured steps before --stop-below may stop it (default 3)")
    r.add_argument("--hook", help=argparse.SUPPRESS)  # test-only workload hook
    r.set_defaults(func=cmd_run)

    rc = sub.add_parser("recipe", help="show or edit a recipe").add_subparsers(dest="recipe_cmd", required=True)
    s = rc.add_parser("show", help="print the full command and the resolved torchtitan config")
    s.add_argument("recipe")
    s.set_defaults(func=cmd_recipe_show)
    s = rc.add_parser("set", help="set one lever (a one-line edit)")
    s.add_argument("recipe")
    s.add_argument("lever")
    s.add_argument("value")
    s.set_defaults(func=cmd_recipe_set)

    for register in _registrars():
        register(sub)
    return p


def _registrars() -> list[Callable[[Any], None]]:
    """Sub-command groups that live beside the modules they drive."""
    from bot import cli_more

    return cli_more.REGISTRARS


def main(argv: list[str] | None = None) -> int:
    from bot.recipe import RecipeError

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (RecipeError, UsageError) as exc:
        print(f"attune: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except FileNotFoundError as exc:
        print(f"attune: {exc.filename}: no such file", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("attune: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
