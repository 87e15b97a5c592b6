"""``attune campaign run|show`` and ``attune demo``: campaigns on this machine (the local ports of the one executor)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from bot.cli.common import EXIT_OK, UsageError, console, emit_json

DEMO_RECIPE = "llama3-tiny/cpu.yaml"


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
    from bot.campaign.report import render_campaign_summary, summary_json
    from bot.campaign.setup import measurement_options, new_state
    from bot.core.recipe import load_recipe
    from bot.drive.local import build_executor

    recipe = load_recipe(repo / recipe_rel)
    if budget <= 0:
        raise UsageError(f"--budget: expected a positive number of device-hours; got {budget}")
    out = console()
    if not as_json:
        out.print(f"[bold]attune campaign[/] {recipe_rel} in {repo} — policy {policy}, budget {budget} device-hours")
    executor = build_executor(repo, recipe_rel, policy=policy, forge=forge, on_event=None if as_json else _progress(out), seed=seed,
                              cache_dir=cache_dir)
    options = measurement_options(recipe.cluster.launcher)  # e.g. a warm-up run first on this machine
    state = executor.start(new_state(recipe, recipe_rel, budget=budget, policy=policy, **options))
    if not as_json:  # markdown as it is: never re-wrapped, and its [links] are not rich markup
        print(render_campaign_summary(state))
        lb = repo / "leaderboard.md"
        if forge == "local" and lb.exists():
            print(lb.read_text())
    else:
        emit_json(summary_json(state, repo))
    return EXIT_OK


def cmd_campaign_run(args: argparse.Namespace) -> int:
    from bot.core.repo import repo_of_recipe

    path = Path(args.recipe).resolve()
    if not path.exists():
        raise UsageError(f"{args.recipe}: no such recipe")
    repo = repo_of_recipe(path).root
    return _run_campaign(repo, str(path.relative_to(repo)), budget=args.budget, policy=args.policy, forge=args.forge, as_json=args.json, seed=args.seed)


def cmd_demo(args: argparse.Namespace) -> int:
    from bot.core.repo import find_repo
    from bot.drive.local import scratch_clone

    home = find_repo()  # the working directory's repository: the demo tunes a scratch clone of it
    if not (home.recipes / DEMO_RECIPE).is_file():
        raise UsageError(f"{home.recipes / DEMO_RECIPE}: no such recipe (run the demo from a checkout of ATTUNE)")
    repo = scratch_clone(home.root)
    # the gate's calibration runs are cached in this checkout's .attune/, so a second demo reuses them
    return _run_campaign(repo, f"recipes/{DEMO_RECIPE}", budget=args.budget, policy=args.policy, forge="local", as_json=args.json,
                         cache_dir=home.work)


def cmd_campaign_show(args: argparse.Namespace) -> int:
    from bot import campaign as cm
    from bot.campaign.report import render_campaign_summary

    root = Path(args.repo) / ".attune" / "campaigns" / args.id / "state.json"
    if not root.exists():
        raise UsageError(f"{root}: no such campaign (campaigns live under .attune/campaigns/ of the repository)")
    state = cm.Campaign.model_validate_json(root.read_text())
    print(render_campaign_summary(state))
    return EXIT_OK


def register(sub: Any) -> None:
    from bot.agent import POLICIES
    from bot.drive.local import FORGES

    c = sub.add_parser("campaign", help="run or show a tuning campaign").add_subparsers(dest="campaign_cmd", required=True)
    r = c.add_parser("run", help="tune a recipe inside a device-hour budget")
    r.add_argument("recipe")
    r.add_argument("--budget", type=float, required=True, help="device-hours (devices x wall hours)")
    r.add_argument("--policy", choices=POLICIES, default="heuristic")
    r.add_argument("--forge", choices=FORGES, default="local")
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
