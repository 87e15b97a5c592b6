"""``attune bench gate|tuners|recipes|measure``: the published benchmarks (:mod:`bot.bench`)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bot.cli.common import EXIT_OK, UsageError, emit_json

if TYPE_CHECKING:
    from bot.bench.gate_faults import Suite
    from bot.core.recipe import Recipe

# old policy names still accepted by ``--policies``/``--baselines``: ``attune``, the agent's label in the
# benchmark's reports before the default policy had one name (``heuristic``, as ``campaign run --policy`` says)
DEPRECATED_ALIASES = {"attune": "heuristic"}


def cmd_bench_gate(args: argparse.Namespace) -> int:
    from bot.bench.gate_faults import render_bench, run_bench
    from bot.cli.common import console
    from bot.cli.progress import CountDisplay, wanted

    if args.jobs < 1:
        raise UsageError(f"--jobs: expected at least 1; got {args.jobs}")
    suite: Suite | None = None
    if args.suite == "moe":
        from bot.bench.gate_faults_moe import SUITE as suite
    if wanted(args.json):  # a live display on a terminal: the runs done of those to run, elapsed, ETA
        with CountDisplay(console(), "bench gate", 0, "runs") as display:
            report = run_bench(out_dir=Path(args.out), jobs=args.jobs, progress=display.message, suite=suite)
    else:
        report = run_bench(out_dir=Path(args.out), jobs=args.jobs, suite=suite)
    print(render_bench(report))
    if args.json:
        emit_json(report.summary())
    return EXIT_OK


def cmd_bench_tuners(args: argparse.Namespace) -> int:
    from bot.bench.tuners import bench, default_policies, render, select_tasks
    from bot.cli.common import console
    from bot.cli.progress import CountDisplay, wanted

    if args.seeds < 1:
        raise UsageError(f"--seeds: expected at least 1; got {args.seeds}")
    names = _names("--tasks", args.tasks)
    policies = _tuner_policies(_names("--policies", args.policies))
    loaded = _tuner_recipes(args.recipe)
    chosen = _chosen_tasks(loaded, names)
    if args.trace and not select_tasks(chosen, [args.trace], loaded):
        raise UsageError(
            f"--trace: {args.trace} is not one of the tasks run ({', '.join(sorted(loaded[p].name for p in chosen))})"
        )
    if wanted(args.json):  # a live display on a terminal: campaigns done of all, simulated device-hours, elapsed, ETA
        total = len(chosen) * len(policies or default_policies()) * args.seeds
        spent = [0.0]
        with CountDisplay(console(), "bench tuners", total, "campaigns") as display:

            def finished(row: dict[str, Any]) -> None:
                spent[0] += row["device_hours"]
                display.finished(
                    f"{row['task']} {row['policy']} seed {row['seed']}: {row['gain']:+.1%} "
                    f"({spent[0]:.4g} simulated device-hours in all)"
                )

            result = bench(
                chosen, seeds=args.seeds, policies=policies, trace=args.trace, progress=finished, loaded=loaded
            )
    else:
        result = bench(chosen, seeds=args.seeds, policies=policies, trace=args.trace, loaded=loaded)
    print(render(result))
    if args.json:
        emit_json(
            {k: v for k, v in result.items() if k != "oracle"}
            | {"oracle": {t: {k: v for k, v in o.items() if k != "oracle_levers"} for t, o in result["oracle"].items()}}
        )
    return EXIT_OK


def cmd_bench_recipes(args: argparse.Namespace) -> int:
    """torchtitan's registry configs drafted, simulated and tuned (:mod:`bot.bench.recipes`; SIMULATED)."""
    from bot.bench.recipes import REGISTRIES, coverage, registry_configs, render_coverage

    if args.seeds < 1:
        raise UsageError(f"--seeds: expected at least 1; got {args.seeds}")
    named = _names("--baselines", args.baselines) or []
    if "heuristic" in (DEPRECATED_ALIASES.get(n, n) for n in named):
        raise UsageError("--baselines: heuristic is the agent, always run; name baselines only")
    baselines = _tuner_policies(named) or []
    configs = _names("--configs", args.configs)
    known = {n for m in REGISTRIES for c in registry_configs(m) for n in (c, f"{m}:{c}")}
    unknown = [c for c in configs or [] if c not in known]
    if unknown:
        raise UsageError(
            f"--configs: no registry config is called {', '.join(unknown)}; expected names like qwen3_32b "
            f"(registries: {', '.join(REGISTRIES)})"
        )

    def done(row: dict[str, Any]) -> None:  # a line per config as it finishes, on stderr (stdout is the report)
        figures = (
            f"agent {row['agent']['gain']:+.1%}, {row['agent']['oracle_fraction']:.1%} of the oracle"
            if row["agent"]
            else row["why"]
        )
        print(f"bench recipes: {row['config']}: {figures} (SIMULATED)", file=sys.stderr, flush=True)

    result = coverage(seeds=args.seeds, baselines=tuple(baselines), configs=configs, progress=done)
    print(render_coverage(result))
    if args.json:
        emit_json(result)
    return EXIT_OK


def _names(flag: str, text: str | None) -> list[str] | None:
    """A comma list flag: None when not given, else its names (a usage error naming ``flag`` when it names none)."""
    if text is None:
        return None
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise UsageError(f"{flag}: expected a comma list of names; got {text!r} (leave {flag} out for all)")
    return names


def _tuner_policies(policies: list[str] | None) -> list[str] | None:
    """``--policies``: each one known, and ``claude`` only with its key (without it every step would be the heuristic's).
    A name of DEPRECATED_ALIASES is read as the policy it names, with a warning on stderr."""
    from bot.agent import POLICIES
    from bot.bench.tuners import DEFAULT_POLICIES

    if policies is None:
        return None
    old = [p for p in policies if p in DEPRECATED_ALIASES]
    policies = [DEPRECATED_ALIASES.get(p, p) for p in policies]
    for name in old:
        if policies.count(DEPRECATED_ALIASES[name]) > 1:
            raise UsageError(
                f"--policies: {DEPRECATED_ALIASES[name]} given twice ({name} is its deprecated name); give it once"
            )
    bad = [p for p in policies if p not in POLICIES]
    if bad:
        raise UsageError(
            f"--policies: unknown {', '.join(bad)}; expected a comma list of {', '.join(POLICIES)} (default {','.join(DEFAULT_POLICIES)})"
        )
    if "claude" in policies and not os.environ.get("ANTHROPIC_API_KEY"):
        raise UsageError(
            "--policies: claude needs ANTHROPIC_API_KEY set (without it every claude step would be the heuristic's); "
            "set the key or leave claude out"
        )
    for name in old:
        print(
            f"attune: warning: --policies: {name} is a deprecated name of {DEPRECATED_ALIASES[name]}; "
            f"use {DEPRECATED_ALIASES[name]}",
            file=sys.stderr,
        )
    return policies


def _tuner_recipes(given: list[str]) -> dict[Path, Recipe]:
    """The tasks' recipes, each loaded once: the ``--recipe`` files (each a different ``launcher: sim`` recipe), or
    the benchmark's task recipes (``bot/bench/tasks``)."""
    from bot.bench.tuners import baseline_problem, default_task_recipes
    from bot.core.recipe import load_recipe
    from bot.runner import check_runnable

    if not given:
        tasks = default_task_recipes()
        for path, recipe in tasks.items():
            check_runnable(recipe, path)
        return tasks
    loaded: dict[Path, Recipe] = {}
    seen: dict[Path, str] = {}
    ids: dict[str, str] = {}
    for text in given:
        path = Path(text)
        if not path.is_file():
            raise UsageError(f"--recipe {text}: no such recipe")
        first = seen.get(path.resolve())
        if first is not None:
            raise UsageError(
                f"--recipe {text}: given twice{'' if first == text else f' (also as {first})'}; give each recipe once"
            )
        recipe = load_recipe(path)
        if recipe.cluster.launcher != "sim":
            raise UsageError(
                f"--recipe {text}: cluster.launcher is {recipe.cluster.launcher!r}; bench tuners runs simulated recipes "
                "only (launcher: sim)"
            )
        check_runnable(recipe, path)  # hardware and model the simulator knows, before any task runs
        problem = baseline_problem(recipe)
        if problem is not None:
            raise UsageError(
                f"--recipe {text}: the recipe as written does not run in the simulator ({problem}); a task "
                "starts from a working recipe, whose gains the tuners are measured by"
            )
        if recipe.name in ids:
            raise UsageError(
                f"--recipe {text}: the same task ({recipe.name}) as {ids[recipe.name]}; give each task once"
            )
        seen[path.resolve()], ids[recipe.name], loaded[path] = text, text, recipe
    return loaded


def _chosen_tasks(loaded: dict[Path, Recipe], names: list[str] | None) -> list[Path]:
    """The recipes ``--tasks`` names (all when it is not given); a usage error naming each name that is no task."""
    from bot.bench.tuners import select_tasks, unknown_tasks

    if names is None:
        return list(loaded)
    unknown = unknown_tasks(loaded, names)
    if unknown:
        known = sorted({r.name for r in loaded.values()})
        raise UsageError(
            f"--tasks: no task is called {', '.join(unknown)}; expected recipe ids or model ids of: {', '.join(known)}"
        )
    return select_tasks(list(loaded), names, loaded)


def cmd_bench_measure(args: argparse.Namespace) -> int:
    """The campaign's A/B decisions benchmarked: real comparisons on this machine (idle and under a busy loop the
    benchmark starts and stops) and simulated ones (:mod:`bot.bench.ab_decisions`)."""
    from bot.bench.ab_decisions import render, run_bench
    from bot.cli.common import console
    from bot.cli.progress import CountDisplay, wanted
    from bot.core.recipe import RecipeError, load_recipe

    _check_measure_numbers(args)
    if args.remeasure:
        return _remeasure(args)
    path = Path(args.recipe)
    if not path.is_file():
        raise UsageError(f"{args.recipe}: no such recipe")
    try:
        recipe = load_recipe(path)
    except RecipeError as exc:
        raise UsageError(str(exc).splitlines()[0]) from exc
    if not args.sim_only and recipe.cluster.launcher != "local":
        raise UsageError(
            f"{args.recipe}: cluster.launcher is {recipe.cluster.launcher!r}; real comparisons need a local recipe (or --sim-only)"
        )
    windows = _windows(args.sim_windows)
    kw = {
        "repeats": args.repeats,
        "steps": args.steps,
        "warmup": args.warmup,
        "sim_trials": args.sim_trials,
        "real": not args.sim_only,
        "sim_seed": args.sim_seed,
        "sim_windows": windows,
    }
    if wanted(args.json) and not args.sim_only:
        with CountDisplay(console(), "bench measure", 0, "runs") as display:
            report = run_bench(recipe, Path(args.out), progress=display.message, **kw)
    else:
        report = run_bench(recipe, Path(args.out), **kw)
    print(render(report))
    if args.json:
        emit_json({k: v for k, v in report.items()})
    return EXIT_OK


MEASURE_WARMUP = 3  # --warmup when not given


def _check_measure_numbers(args: argparse.Namespace) -> None:
    """Every numeric flag of ``bench measure`` in range, or a usage error naming the flag at fault; sets ``args.warmup``
    to its default when it was not given (so a --steps too small for it names --steps, not the flag left out)."""
    for name in ("repeats", "sim_trials"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')}: expected at least 1; got {getattr(args, name)}")
    if args.sim_seed < 0:
        raise UsageError(f"--sim-seed: expected 0 or more; got {args.sim_seed}")
    if args.steps < 2:
        raise UsageError(f"--steps: expected at least 2 (a warm-up step and a measured one); got {args.steps}")
    if args.warmup is None:
        if args.steps <= MEASURE_WARMUP:
            raise UsageError(
                f"--steps: expected more than the {MEASURE_WARMUP} warm-up steps (--warmup {MEASURE_WARMUP}, its default); "
                f"got {args.steps}"
            )
        args.warmup = MEASURE_WARMUP
    if args.warmup < 1 or args.warmup >= args.steps:
        raise UsageError(
            f"--warmup: expected 1 to {args.steps - 1} (fewer than --steps {args.steps}); got {args.warmup}"
        )


def _windows(text: str) -> list[int]:
    """``--sim-windows 1,2,4,15``: positive step counts, or a usage error naming the flag."""
    if not text:
        return []
    try:
        windows = [int(x) for x in text.split(",")]
    except ValueError:
        windows = []
    if not windows or any(not 1 <= w <= 15 for w in windows):
        raise UsageError(
            f"--sim-windows: expected a comma list of step counts from 1 to 15 (e.g. 2,4,15); got {text!r}"
        )
    return windows


def _remeasure(args: argparse.Namespace) -> int:
    """``--remeasure ID``: every kept step of a finished local campaign, its incumbent against it, measured again."""
    from bot.bench.ab_decisions import remeasure
    from bot.core.recipe import load_recipe
    from bot.core.repo import Repo
    from bot.drive.local_ports import FileStateStore

    root = Path(args.repo).resolve()
    state = FileStateStore(Repo(root).work / "campaigns").load(args.remeasure)
    if state is None:
        raise UsageError(f"--remeasure: no campaign {args.remeasure!r} in {root}")
    results = remeasure(
        state,
        load_recipe(root / state.recipe_path),
        Path(args.out) / args.remeasure,
        steps=args.steps,
        warmup=args.warmup,
    )
    for r in results:
        ci = "—" if r["lo"] is None else f"[{r['lo']:+.1%}, {r['hi']:+.1%}]"
        print(
            f"step {r['step']} {r['change']}: campaign {r['campaign_estimate']:+.1%}; re-measured {r['decision']} {r['estimate']:+.1%} {ci} "
            f"in {r['runs']} runs, {r['wall_s']:.0f} s; interval above zero: {'yes' if r['above_zero'] else 'NO'}"
        )
    if args.json:
        emit_json({"campaign": state.id, "steps": results})
    return EXIT_OK


def register(sub: Any) -> None:
    b = sub.add_parser("bench", help="benchmarks").add_subparsers(dest="bench_cmd", required=True)
    bg = b.add_parser("gate", help="fault-injection benchmark of the gate (real CPU torchtitan runs)")
    bg.add_argument("--out", default=".attune/bench-gate")
    bg.add_argument("--jobs", type=int, default=2, help="real runs at a time (default 2: one per core of a 2-core box)")
    bg.add_argument("--json", action="store_true")
    bg.add_argument(
        "--suite",
        choices=("dense", "moe"),
        default="dense",
        help="dense: the llama3-tiny cases (default); moe: the moe-tiny MoE cases (bot/bench/gate_faults_moe.py)",
    )
    bg.set_defaults(func=cmd_bench_gate)
    bt = b.add_parser("tuners", help="every policy under the same budget in the simulator (SIMULATED)")
    bt.add_argument("--recipe", action="append", default=[])
    bt.add_argument("--seeds", type=int, default=3)
    bt.add_argument(
        "--tasks",
        default=None,
        help="comma list of tasks (recipe ids, <model>/<cluster> as under bot/bench/tasks/, or model ids); default all",
    )
    bt.add_argument(
        "--policies", default=None, help="comma list of policies (default heuristic, the agent, and every baseline)"
    )
    bt.add_argument(
        "--trace",
        default="",
        help="a task whose seed-0 campaigns are printed step by step (change, why, measured, decision)",
    )
    bt.add_argument("--json", action="store_true")
    bt.set_defaults(func=cmd_bench_tuners)
    br = b.add_parser(
        "recipes", help="torchtitan's registry configs: recipe init, a baseline, the agent and baselines (SIMULATED)"
    )
    br.add_argument("--seeds", type=int, default=3)
    br.add_argument(
        "--baselines", default="costmodel,tpe", help="comma list of baseline policies (default costmodel,tpe)"
    )
    br.add_argument("--configs", default=None, help="comma list of configs (name or module:config); default every one")
    br.add_argument("--json", action="store_true")
    br.set_defaults(func=cmd_bench_recipes)
    bm = b.add_parser(
        "measure",
        help="the A/B decisions themselves: false gains, detection, interval width, runs (real CPU + SIMULATED)",
    )
    bm.add_argument("--recipe", default="recipes/llama3-tiny/cpu.yaml")
    bm.add_argument("--repeats", type=int, default=2, help="real comparisons per change and condition (idle, load)")
    bm.add_argument("--steps", type=int, default=12, help="training steps per real run")
    bm.add_argument(
        "--warmup", type=int, default=None, help=f"warm-up steps per real run (not measured; default {MEASURE_WARMUP})"
    )
    bm.add_argument("--sim-trials", type=int, default=2000, help="simulated comparisons per true gain")
    bm.add_argument("--sim-only", action="store_true", help="only the simulated comparisons (no real runs)")
    bm.add_argument("--sim-seed", type=int, default=0, help="seed of the simulated comparisons' noise")
    bm.add_argument(
        "--sim-windows",
        default="",
        metavar="W,W,...",
        help="also the simulated comparisons once per measurement window (steps after the warm-up a run's median uses)",
    )
    bm.add_argument(
        "--remeasure", default="", metavar="ID", help="instead: measure every kept step of local campaign ID again"
    )
    bm.add_argument("--repo", default=".", help="the repository of the --remeasure campaign")
    bm.add_argument("--out", default=".attune/bench-measure")
    bm.add_argument("--json", action="store_true")
    bm.set_defaults(func=cmd_bench_measure)
