"""Sub-command groups beyond run/recipe: campaign, demo, leaderboard, lessons, gate, bench, sim, github."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bot.cli import EXIT_OK, EXIT_USAGE, UsageError, _console, emit_json


# ------------------------------------------------------------------ campaign / demo
def _progress(console):
    from rich.markup import escape

    def on_event(state, action, event) -> None:
        kind = getattr(action, "type", "")
        if kind in ("run_baseline", "run_trial", "confirm") and hasattr(event, "run"):
            r = event.run
            label = f"step {r.n} {r.kind}"
            if r.kind == "baseline":
                label = f"baseline {r.attempt}" + (" (warm-up, not counted)" if r.attempt <= state.baseline_warmup_runs else "")
            ab = "" if r.reference_tps is None else f" (A/B: incumbent re-measured {r.reference_tps:,.0f})"
            console.print(f"  {label}: {r.outcome} {'' if r.tps is None else f'{r.tps:,.0f} tok/s/device'}{ab}  \\[spent {state.spent:.4f}/{state.budget:.4f} dh]")
        elif kind == "open_step":
            st = state.step(event.n)
            console.print(f"[bold]step {st.n}[/]: {escape(st.change.title())}  ({st.change.policy}{'; ' + ', '.join(st.change.lessons) if st.change.lessons else ''})")
        elif kind in ("check_config", "check_convergence"):
            v = event.verdict
            console.print(f"  gate {v.stage}: {v.verdict} (tier {v.tier})" + ("" if v.ok else f" — {escape(v.reasons[0][:160])}"))
        elif kind == "calibrate":
            console.print(f"  gate loss band: {escape(event.note)}  \\[spent {state.spent:.4f}/{state.budget:.4f} dh]")
        elif kind == "merge":
            console.print(f"  [green]kept[/]: step {event.n} merged")
        elif kind == "close":
            console.print(f"  closed: {escape(action.reason[:160])}")
    return on_event


def _run_campaign(repo: Path, recipe_rel: str, *, budget: float, policy: str, forge: str, as_json: bool, seed: int = 0,
                  cache_dir: Path | None = None) -> int:
    from bot.local_campaign import build_driver, measurement_options, new_state, summary_json
    from bot.recipe import load_recipe
    from bot.report import render_campaign_summary

    recipe = load_recipe(repo / recipe_rel)
    if budget <= 0:
        raise UsageError(f"--budget: expected a positive number of device-hours; got {budget}")
    console = _console()
    if not as_json:
        console.print(f"[bold]attune campaign[/] {recipe_rel} in {repo} — policy {policy}, budget {budget} device-hours")
    driver = build_driver(repo, recipe_rel, policy=policy, forge=forge, on_event=None if as_json else _progress(console), seed=seed,
                          cache_dir=cache_dir)
    options = measurement_options(recipe.cluster.launcher)  # e.g. a warm-up run first on this machine
    state = driver.start(new_state(recipe, recipe_rel, budget=budget, policy=policy, **options))
    if not as_json:  # markdown as it is: never re-wrapped, and its [links] are not rich markup
        print(render_campaign_summary(state))
        lb = repo / "leaderboard.md"
        if forge == "local" and lb.exists():
            print(lb.read_text())
    else:
        emit_json(summary_json(state, repo))
    return EXIT_OK


def cmd_campaign_run(args: argparse.Namespace) -> int:
    from bot.local_campaign import repo_of

    path = Path(args.recipe).resolve()
    if not path.exists():
        raise UsageError(f"{args.recipe}: no such recipe")
    repo = repo_of(path)
    return _run_campaign(repo, str(path.relative_to(repo)), budget=args.budget, policy=args.policy, forge=args.forge, as_json=args.json, seed=args.seed)


def cmd_demo(args: argparse.Namespace) -> int:
    from bot.local_campaign import REPO_ROOT, scratch_clone

    repo = scratch_clone()
    # the gate's calibration runs are cached in this checkout's .attune/, so a second demo reuses them
    return _run_campaign(repo, "recipes/llama3-tiny/cpu.yaml", budget=args.budget, policy=args.policy, forge="local", as_json=args.json,
                         cache_dir=REPO_ROOT / ".attune")


def cmd_campaign_show(args: argparse.Namespace) -> int:
    from bot import campaign as cm
    from bot.report import render_campaign_summary

    root = Path(args.repo) / ".attune" / "campaigns" / args.id / "state.json"
    if not root.exists():
        raise UsageError(f"{root}: no such campaign (campaigns live under .attune/campaigns/ of the repository)")
    state = cm.Campaign.model_validate_json(root.read_text())
    print(render_campaign_summary(state))
    return EXIT_OK


def cmd_leaderboard(args: argparse.Namespace) -> int:
    from bot.leaderboard import regenerate

    path, text = regenerate(Path(args.repo))
    print(text)
    return EXIT_OK


def cmd_lessons(args: argparse.Namespace) -> int:
    from bot.lessons import find_lesson, load_lessons, render_lesson, render_table

    lessons = load_lessons()
    if args.lessons_cmd == "list":
        print(render_table(lessons))
        return EXIT_OK
    lesson = find_lesson(lessons, args.id)
    if lesson is None:
        raise UsageError(f"no lesson {args.id!r}; `attune lessons list` shows them")
    print(render_lesson(lesson))
    return EXIT_OK


def register_campaign(sub: Any) -> None:
    from bot.agent.policy import POLICIES

    c = sub.add_parser("campaign", help="run or show a tuning campaign").add_subparsers(dest="campaign_cmd", required=True)
    r = c.add_parser("run", help="tune a recipe inside a device-hour budget")
    r.add_argument("recipe")
    r.add_argument("--budget", type=float, required=True, help="device-hours (devices x wall hours)")
    r.add_argument("--policy", choices=POLICIES, default="heuristic")
    r.add_argument("--forge", choices=("local", "none"), default="local")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--json", action="store_true")
    r.set_defaults(func=cmd_campaign_run)
    s = c.add_parser("show", help="the PR-like history of a campaign")
    s.add_argument("id")
    s.add_argument("--repo", default=".")
    s.set_defaults(func=cmd_campaign_show)

    d = sub.add_parser("demo", help="a real local campaign on the CPU recipe, in a scratch clone")
    d.add_argument("--budget", type=float, default=0.12, help="device-hours (default 0.12: about 7 minutes of runs)")
    d.add_argument("--policy", choices=POLICIES, default="heuristic")
    d.add_argument("--json", action="store_true")
    d.set_defaults(func=cmd_demo)

    lb = sub.add_parser("leaderboard", help="regenerate leaderboard.md from results/")
    lb.add_argument("--repo", default=".")
    lb.set_defaults(func=cmd_leaderboard)

    ls = sub.add_parser("lessons", help="the lessons catalog").add_subparsers(dest="lessons_cmd", required=True)
    ls.add_parser("list").set_defaults(func=cmd_lessons)
    sh = ls.add_parser("show")
    sh.add_argument("id")
    sh.set_defaults(func=cmd_lessons)


# ------------------------------------------------------------------ gate / bench / sim
def cmd_gate(args: argparse.Namespace) -> int:
    from gate.command import render_verdict, run_gate
    from gate.errors import GateInputError

    for p in (args.baseline, args.candidate, args.baseline_run, args.candidate_run):
        if p and not Path(p).exists():
            raise UsageError(f"{p}: no such file")
    if args.precision_tolerance is not None and not 0 < args.precision_tolerance < 1:
        raise UsageError(f"--precision-tolerance: expected a relative tolerance between 0 and 1 (e.g. 0.01); got {args.precision_tolerance}")
    if args.jobs < 1:
        raise UsageError(f"--jobs: expected at least 1; got {args.jobs}")
    try:
        verdict = run_gate(args.baseline, args.candidate, config_only=args.config_only, baseline_run=args.baseline_run,
                           candidate_run=args.candidate_run, steps=args.steps, precision_tolerance=args.precision_tolerance, jobs=args.jobs)
    except GateInputError as exc:  # the inputs cannot be gated (not a verdict on the candidate)
        raise UsageError(str(exc)) from None
    if args.json:
        print(render_verdict(verdict), file=__import__("sys").stderr)
        emit_json({"verdict": verdict.verdict, "stage": verdict.stage, "tier": verdict.tier, "reasons": verdict.reasons,
                   "requires_convergence": verdict.requires_convergence, "precision_change": verdict.precision_change})
    else:
        print(render_verdict(verdict))
    return EXIT_OK if verdict.ok else 1


def cmd_bench_gate(args: argparse.Namespace) -> int:
    from gate.bench import render_bench, run_bench

    if args.jobs < 1:
        raise UsageError(f"--jobs: expected at least 1; got {args.jobs}")
    report = run_bench(out_dir=Path(args.out), jobs=args.jobs)
    print(render_bench(report))
    if args.json:
        emit_json(report.summary())
    return EXIT_OK


def cmd_bench_tuners(args: argparse.Namespace) -> int:
    from bot.bench_tuners import bench, default_tasks, render

    recipes = [Path(r) for r in args.recipe] if args.recipe else default_tasks()
    for r in recipes:
        if not r.exists():
            raise UsageError(f"{r}: no such recipe")
    result = bench(recipes, seeds=args.seeds)
    print(render(result))
    if args.json:
        emit_json({k: v for k, v in result.items() if k != "oracle"} | {"oracle": {t: {k: v for k, v in o.items() if k != "oracle_levers"} for t, o in result["oracle"].items()}})
    return EXIT_OK


def cmd_sim_calibrate(args: argparse.Namespace) -> int:
    from bot.sim.calibration import calibrate, render_calibration

    report = calibrate()
    print(render_calibration(report))
    if args.json:
        emit_json({"simulated": True, **report.model_dump(exclude={"rows"}), "rows": len(report.rows),
                   "row_errors": [r.model_dump() for r in report.rows]})
    return EXIT_OK


def register_gate_bench_sim(sub: Any) -> None:
    g = sub.add_parser("gate", help="the correctness gate: is CANDIDATE still training what BASELINE trains?")
    g.add_argument("baseline")
    g.add_argument("candidate")
    g.add_argument("--config-only", action="store_true")
    g.add_argument("--baseline-run")
    g.add_argument("--candidate-run")
    g.add_argument("--steps", type=int, default=20)
    g.add_argument("--precision-tolerance", type=float, default=None,
                   help="accept a precision change whose loss stays within this relative tolerance (e.g. 0.01); default: reject")
    g.add_argument("--jobs", type=int, default=1, help="calibration runs at a time")
    g.add_argument("--json", action="store_true")
    g.set_defaults(func=cmd_gate)

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

    sim = sub.add_parser("sim", help="the cluster simulator").add_subparsers(dest="sim_cmd", required=True)
    sc = sim.add_parser("calibrate", help="the simulator against published measurements")
    sc.add_argument("--json", action="store_true")
    sc.set_defaults(func=cmd_sim_calibrate)


def register_github_lazy(sub: Any) -> None:
    from bot.events.cli import register_github

    register_github(sub)


REGISTRARS: list[Callable[[Any], None]] = [register_campaign, register_gate_bench_sim, register_github_lazy]
_ = EXIT_USAGE
