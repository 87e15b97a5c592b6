"""``attune recipe init|show|set``: draft a recipe from a torchtitan command line; the exact torchrun command and resolved
config of a recipe; a one-line lever edit."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from bot.cli.common import EXIT_FAILED, EXIT_OK, UsageError, emit_json, output_problem

MAX_DEVICES = 2**20  # a world size no cluster reaches: above it a flag is a typo, not a cluster


def _check_out(out: Path, force: bool) -> None:
    """Refuse an --out the recipe cannot be written to, before anything is resolved, built or made."""
    problem = output_problem(str(out), make_folders=True)
    if problem:
        raise UsageError(f"--out {problem}")
    if out.exists() and not force:
        raise UsageError(f"{out}: exists; choose another --out or pass --force")


def cmd_recipe_init(args: argparse.Namespace) -> int:
    """Resolve the user's torchtitan command line, build its model, write the drafted recipe (or refuse: one line)."""
    from bot.core.recipe import parse_recipe_text
    from bot.core.records import atomic_write_text
    from bot.facts import FactsError, model_facts
    from bot.facts.build import QUANTIZED_NOTE, importable
    from bot.runner.draft import draft_recipe, render
    from bot.runner.resolve import ResolveError, resolve_args
    from bot.sim.hardware import get_hardware, hardware_id

    try:
        hw = get_hardware(hardware_id(args.hardware))
    except ValueError as exc:
        raise UsageError(f"--hardware: {exc}") from None
    if not (1 <= args.nodes <= MAX_DEVICES and 1 <= args.devices_per_node <= MAX_DEVICES):
        raise UsageError(f"--nodes and --devices-per-node: expected positive integers up to {MAX_DEVICES:,}")
    if args.nodes * args.devices_per_node > MAX_DEVICES:
        raise UsageError(f"--nodes x --devices-per-node: expected at most {MAX_DEVICES:,} devices in all")
    out = (
        Path(args.out)
        if args.out
        else Path("recipes") / args.config / f"{hw.id}x{args.nodes * args.devices_per_node}.yaml"
    )
    _check_out(out, args.force)
    overrides = list(args.overrides or [])
    root = Path.cwd()
    argv = ["--module", args.module, "--config", args.config, *overrides]
    try:
        with importable(root):
            flat = resolve_args(argv, capability=hw.cuda_capability)
        facts = model_facts(args.module, args.config, overrides, root=root)
    except ResolveError as exc:
        raise UsageError(f"--module {args.module} --config {args.config}: {_blame(str(exc))}") from None
    except FactsError as exc:
        raise UsageError(f"--module {args.module} --config {args.config}: {exc}") from None
    draft = draft_recipe(
        module=args.module,
        config=args.config,
        overrides=overrides,
        flat=flat,
        spec=facts.spec,
        hw=hw,
        nodes=args.nodes,
        devices_per_node=args.devices_per_node,
        launcher=args.launcher,
        quantized=QUANTIZED_NOTE in facts.family_notes,
    )
    text = render(draft)
    parse_recipe_text(text, str(out))  # the draft is a valid recipe (a RecipeError here is a bug: exit 2, no file)
    made = _debug_assets(root, flat) if args.launcher != "sim" else []
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, text)
    if args.json:
        emit_json(
            {
                "path": str(out),
                "recipe": draft.recipe,
                "made_explicit": draft.made_explicit,
                "assets_made": [str(p.relative_to(root)) for p in made],
                "model": facts.spec.model_dump(include={"n_params", "n_active_params", "n_layers", "n_experts"}),
            }
        )
    else:
        for path in made:
            print(f"made {path.relative_to(root)} (offline stand-in for torchtitan's test assets)")
        print(
            f"{out}: {draft.recipe['id']} ({len(draft.recipe['levers'])} levers, "
            f"{facts.spec.n_params / 1e9:.3g} B parameters); check it with `attune recipe show {out}`"
        )
    return EXIT_OK


def _debug_assets(root, flat: dict) -> list:
    """A config that trains on torchtitan's ``c4_test`` data reads test assets from its source repository, which no
    wheel ships: make the missing ones (tokenizer, data) offline. Any other config's assets are the user's to provide."""
    from bot.runner.debug_assets import DebugAssetError, ensure_debug_assets, plan_from_config

    try:
        if not plan_from_config(flat).dataset_paths:
            return []
        return ensure_debug_assets(root, flat)
    except DebugAssetError as exc:
        raise UsageError(str(exc)) from None


def _blame(message: str) -> str:
    """torchtitan's refusal, with an import failure named as the module's."""
    if "ImportError" in message or "Cannot import module" in message:
        return "workload.module: " + message
    return message


def cmd_recipe_show(args: argparse.Namespace) -> int:
    import shlex

    from bot.core.recipe import load_recipe
    from bot.runner.command import build_launch
    from bot.runner.resolve import ResolveError, resolve_recipe
    from bot.runner.workdir import recipe_root

    recipe = load_recipe(args.recipe)
    steps = recipe.bench.steps
    if recipe.cluster.launcher == "sim":
        from bot.runner.check import check_runnable

        check_runnable(recipe, args.recipe)  # as `attune run` would refuse it: the file, the field, what is known
        print(
            f"# {recipe.name}: simulated ({recipe.cluster.devices} x {recipe.cluster.hardware}); no torchtitan command"
        )
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
        flat = resolve_recipe(recipe, steps=steps, workdir=recipe_root(args.recipe))
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
    rc = sub.add_parser("recipe", help="draft, show or edit a recipe").add_subparsers(dest="recipe_cmd", required=True)
    s = rc.add_parser(
        "init",
        help="draft a recipe from a working torchtitan config (run in the tuning repository)",
        description="attune recipe init --module M --config C --hardware H --nodes N --devices-per-node D "
        "[--launcher local|slurm|sim] [--out PATH] [--json] [-- torchtitan overrides]",
    )
    s.add_argument("--module", required=True, help="torchtitan --module (a package path; the repository's own works)")
    s.add_argument("--config", required=True, help="torchtitan --config (a config function of the module)")
    s.add_argument("--hardware", required=True, help="h100, H100-SXM5-80GB, h200, b200, cpu, ...")
    s.add_argument("--nodes", type=int, required=True)
    s.add_argument("--devices-per-node", type=int, required=True)
    s.add_argument("--launcher", choices=("local", "slurm", "sim"), default="local")
    s.add_argument("--out", help="where to write it (default recipes/<config>/<hardware>x<devices>.yaml)")
    s.add_argument("--force", action="store_true", help="overwrite an existing file")
    s.add_argument("--json", action="store_true", help="print the drafted recipe as JSON")
    s.add_argument("overrides", nargs="*", help="after --: torchtitan overrides as on the torchrun command line")
    s.set_defaults(func=cmd_recipe_init)
    s = rc.add_parser("show", help="print the full command and the resolved torchtitan config")
    s.add_argument("recipe")
    s.set_defaults(func=cmd_recipe_show)
    s = rc.add_parser("set", help="set one lever (a one-line edit)")
    s.add_argument("recipe")
    s.add_argument("lever")
    s.add_argument("value")
    s.set_defaults(func=cmd_recipe_set)
