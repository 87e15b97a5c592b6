"""``attune recipe show|set``: the exact torchrun command and resolved config of a recipe, or a one-line lever edit."""

from __future__ import annotations

import argparse
import json
from typing import Any

from bot.cli.common import EXIT_FAILED, EXIT_OK


def cmd_recipe_show(args: argparse.Namespace) -> int:
    import shlex

    from bot.core.recipe import load_recipe
    from bot.runner.command import build_launch
    from bot.runner.resolve import ResolveError, resolve_recipe

    recipe = load_recipe(args.recipe)
    steps = recipe.bench.steps
    if recipe.cluster.launcher == "sim":
        print(f"# {recipe.name}: simulated ({recipe.cluster.devices} x {recipe.cluster.hardware}); no torchtitan command")
        print(json.dumps({"levers": recipe.levers, "pinned": recipe.pinned}, indent=1))
        return EXIT_OK
    if recipe.cluster.launcher == "slurm":
        from pathlib import Path

        from bot.runner.slurm import batch_script, sbatch_argv

        out = Path("runs/<out>")
        try:
            body, _ = batch_script(recipe, steps=steps, out_dir=out)
        except ValueError as exc:
            print(f"# batch script: refused\n{exc}")
            return EXIT_FAILED
        print("# command (on a Slurm login node)")
        print(shlex.join(sbatch_argv(out / "job.sbatch", out)))
        print("# batch script (job.sbatch)")
        print(body, end="")
    else:
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
    from bot.core.recipe import load_recipe, set_lever
    from bot.runner.check import runnable_problem

    def problem(recipe) -> str | None:  # the layout, hardware or model its launcher would refuse (bot.runner.check)
        found = runnable_problem(recipe)
        return None if found is None else f"{'.'.join(found[0])}: {found[1]}"

    before = load_recipe(args.recipe).levers.get(args.lever)
    value = set_lever(args.recipe, args.lever, args.value, check=problem)
    print(f"{args.recipe}: {args.lever}: {before!r} -> {value!r}")
    return EXIT_OK


def register(sub: Any) -> None:
    rc = sub.add_parser("recipe", help="show or edit a recipe").add_subparsers(dest="recipe_cmd", required=True)
    s = rc.add_parser("show", help="print the full command and the resolved torchtitan config")
    s.add_argument("recipe")
    s.set_defaults(func=cmd_recipe_show)
    s = rc.add_parser("set", help="set one lever (a one-line edit)")
    s.add_argument("recipe")
    s.add_argument("lever")
    s.add_argument("value")
    s.set_defaults(func=cmd_recipe_set)
