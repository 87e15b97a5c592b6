"""``attune bench tuners``: every policy through the same campaign loop and budget, in the simulator.

Per task (a ``launcher: sim`` recipe) and policy (the heuristic agent ``attune``, ``random``,
``tpe``, ``gp``, ``claude`` when a key is set, and the exhaustive ``oracle``), over N seeds: mean
and best gain over the baseline recipe, device-hours used, payback hours, fraction of the oracle
optimum reached, and false gains (a kept gain that a fresh re-measure does not confirm). All
numbers are SIMULATED.
"""

from __future__ import annotations

import itertools
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import pandas as pd
from tabulate import tabulate

from bot import campaign as cm
from bot.agent.policy import get_policy
from bot.drive import Driver
from bot.forge.memory import MemoryForge
from bot.gating import config_gate, convergence_gate, make_calibrator
from bot.lessons import load_lessons
from bot.local_campaign import make_space
from bot.recipe import Recipe, load_recipe
from bot.runner.sim import SimRunner

REPO_ROOT = Path(__file__).resolve().parents[1]
BUDGET_RUNS = 14  # the common budget: this many baseline-sized runs' device-hours


def default_tasks() -> list[Path]:
    return sorted(p for p in (REPO_ROOT / "recipes").glob("*/*.yaml") if load_recipe(p).cluster.launcher == "sim")


def true_tps(recipe: Recipe, levers: dict[str, Any]) -> float:
    """The simulator's noiseless tokens/s per device for a lever set (0 when it does not run)."""
    from bot.sim.simulate import simulate

    c = recipe.cluster
    res = simulate(recipe.workload.model or "", c.hardware, c.nodes, c.devices_per_node, levers, dict(recipe.pinned), 0)
    return res.tokens_per_s_per_device if res.outcome == "ok" else 0.0


def oracle(recipe: Recipe, run_cost: float) -> tuple[float, dict[str, Any], float, int]:
    """Exhaustive search of the legal lever grid: (best tps, its levers, device-hours it would cost, grid size)."""
    from bot.sim.simulate import simulate

    space = make_space(recipe).values
    names = list(space)
    best, best_levers, cost, n = 0.0, dict(recipe.levers), 0.0, 0
    c = recipe.cluster
    for combo in itertools.product(*(space[k] for k in names)):
        levers = {**recipe.levers, **dict(zip(names, combo, strict=True))}
        res = simulate(recipe.workload.model or "", c.hardware, c.nodes, c.devices_per_node, levers, dict(recipe.pinned), 0)
        n += 1
        if res.outcome == "invalid":
            continue
        cost += run_cost
        if res.outcome == "ok" and res.tokens_per_s_per_device > best:
            best, best_levers = res.tokens_per_s_per_device, levers
    return best, best_levers, cost, n


def run_campaign(recipe_path: Path, policy: str, seed: int, budget: float, work: Path) -> cm.Campaign:
    recipe = load_recipe(recipe_path)
    rel = recipe_path.name
    options = {"seed": seed} if policy in ("random", "tpe", "gp") else {}
    driver = Driver(
        forge=MemoryForge({rel: recipe_path.read_text()}), runner=SimRunner(seed=seed), policy=get_policy(policy, **options),
        lessons=load_lessons(), recipe_path=rel, work_dir=work, space_fn=make_space,
        gate_config=config_gate, gate_convergence=convergence_gate, calibrate=make_calibrator(work),
    )
    driver.forge.refs["main"][rel] = recipe_path.read_text()
    state = cm.Campaign(id=f"{recipe.name.replace('/', '-')}-{policy}-{seed}", recipe_path=rel, recipe_id=recipe.name, policy=policy,
                        devices=recipe.devices, usd_per_device_hour=recipe.cluster.usd_per_device_hour, budget=budget,
                        baseline_levers=dict(recipe.levers), incumbent_levers=dict(recipe.levers), band_k=2.0, band_floor=0.02)
    return driver.start(state)


def fresh_gain(recipe: Recipe, levers: dict[str, Any], seed: int) -> float:
    """A fresh re-measure (3 new simulated runs each) of the final recipe against the baseline."""
    runner = SimRunner(seed=10_000 + seed)
    def med(lv: dict[str, Any]) -> float:
        vals = [runner.run(recipe.model_copy(update={"levers": lv}), out_dir=None).summary.tps_median or 0.0 for _ in range(3)]
        return statistics.median(vals)
    base = med(dict(recipe.levers))
    return med(levers) / base - 1.0 if base else 0.0


def bench(recipes: list[Path], seeds: int = 3, policies: list[str] | None = None, progress=None) -> dict[str, Any]:
    t0 = time.monotonic()
    policies = policies or ["attune", "random", "tpe", "gp"] + (["claude"] if os.environ.get("ANTHROPIC_API_KEY") else [])
    rows: list[dict[str, Any]] = []
    oracles: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for path in recipes:
            recipe = load_recipe(path)
            task = recipe.workload.model or recipe.name
            base_true = true_tps(recipe, dict(recipe.levers))
            probe = SimRunner(seed=0).run(recipe, out_dir=None)
            run_cost = probe.summary.device_hours
            budget = BUDGET_RUNS * run_cost
            best, best_levers, ocost, grid = oracle(recipe, run_cost)
            oracles[task] = {"oracle_tps": best, "oracle_gain": best / base_true - 1.0 if base_true else 0.0, "oracle_device_hours": ocost,
                             "grid": grid, "budget": budget, "baseline_tps": base_true, "oracle_levers": best_levers}
            for policy in policies:
                for seed in range(seeds):
                    state = run_campaign(path, "heuristic" if policy == "attune" else policy, seed, budget, Path(tmp))
                    final = dict(state.incumbent_levers)
                    final_true = true_tps(recipe, final)
                    gain = final_true / base_true - 1.0 if base_true else 0.0
                    claimed = state.gain
                    false_gain = int(state.incumbent_step != 0 and fresh_gain(recipe, final, seed) <= 0.0)
                    rows.append({"task": task, "policy": policy, "seed": seed, "gain": gain, "claimed_gain": claimed,
                                 "device_hours": state.spent, "payback_hours": state.spent / (gain * recipe.devices) if gain > 0 else None,
                                 "oracle_fraction": final_true / best if best else 0.0, "false_gains": false_gain, "steps": len(state.steps)})
                    if progress:
                        progress(rows[-1])
            rows.append({"task": task, "policy": "oracle", "seed": 0, "gain": oracles[task]["oracle_gain"], "claimed_gain": oracles[task]["oracle_gain"],
                         "device_hours": ocost, "payback_hours": ocost / (oracles[task]["oracle_gain"] * recipe.devices) if oracles[task]["oracle_gain"] > 0 else None,
                         "oracle_fraction": 1.0, "false_gains": 0, "steps": grid})
    df = pd.DataFrame(rows)
    agg = df.groupby(["task", "policy"], sort=False).agg(
        mean_gain=("gain", "mean"), best_gain=("gain", "max"), device_hours=("device_hours", "mean"),
        payback_hours=("payback_hours", "mean"), oracle_fraction=("oracle_fraction", "mean"), false_gains=("false_gains", "sum"),
    ).reset_index()
    tasks: dict[str, dict[str, Any]] = {}
    for r in agg.to_dict("records"):
        tasks.setdefault(r["task"], {})[r["policy"]] = {k: (None if pd.isna(v) else float(v)) for k, v in r.items() if k not in ("task", "policy")}
    return {"simulated": True, "seeds": seeds, "budget_runs": BUDGET_RUNS, "tasks": tasks, "oracle": oracles, "wall_s": time.monotonic() - t0}


def render(result: dict[str, Any]) -> str:
    lines = [f"# Tuner benchmark — SIMULATED ({result['seeds']} seeds, budget = {result['budget_runs']} baseline-run equivalents per task)\n"]
    for task, pols in result["tasks"].items():
        o = result["oracle"][task]
        lines.append(f"## {task} — SIMULATED (budget {o['budget']:.1f} device-hours; oracle grid {o['grid']} layouts)\n")
        table = [[p, f"{m['mean_gain']:+.1%}", f"{m['best_gain']:+.1%}", f"{m['device_hours']:.1f}",
                  "—" if m["payback_hours"] is None else f"{m['payback_hours']:.2f}", f"{m['oracle_fraction']:.1%}", int(m["false_gains"])]
                 for p, m in pols.items()]
        lines.append(tabulate(table, headers=["policy", "mean gain", "best gain", "device-hours", "payback h", "of oracle", "false gains"], tablefmt="github"))
        lines.append("")
    return "\n".join(lines)
