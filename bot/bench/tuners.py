"""``attune bench tuners``: every policy through the same campaign loop and budget, in the simulator.

Per task (a ``launcher: sim`` recipe of ``TASKS_DIR``, or one given) and policy (the default policy ``heuristic``, the agent; the baselines ``random``,
``tpe``, ``gp``, ``cmaes``, ``greedy``, ``costmodel``; ``claude`` when a key is set; and the exhaustive ``oracle``),
over N seeds: mean
and best gain over the baseline recipe, device-hours used, payback hours (the mean campaign's), fraction of the oracle
optimum reached, and false gains (a kept gain that a fresh re-measure does not confirm). Tasks are reported in two groups (``DEV_TASKS``:
traces read while the agent's rules were written; the rest: report-only), with a summary of the agent against
the best alternative per task and an optional step-by-step trace of one task. All numbers are SIMULATED.

Each recipe file is loaded once per run (:func:`load_tasks`); the report is :mod:`bot.bench.tuners_report`.
"""

from __future__ import annotations

import importlib.metadata
import itertools
import os
import statistics
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
import yaml

from bot import campaign as cm
from bot.agent import get_policy
from bot.agent.lessons import load_lessons
from bot.agent.space import make_space
from bot.bench.tuners_report import (
    FLAT_GAIN,
    GROUP_LABEL,
    payback_hours,
    render,
    render_targets,
    render_trace,
    targets,
)
from bot.campaign.gate_calls import config_gate, convergence_gate, make_calibrator
from bot.campaign.measurement_settings import measurement_options
from bot.core import levers as catalog
from bot.core.recipe import Recipe, load_recipe
from bot.core.repo import find_repo
from bot.drive.executor import Executor
from bot.drive.local_ports import FileRecordStore, FileStateStore, LocalRunPort
from bot.forge.memory import MemoryForge
from bot.runner.sim import SimRunner
from bot.sim.models import model_for, model_label

if TYPE_CHECKING:
    from bot.sim.simulate import SimResult

__all__ = [
    "BUDGET_RUNS",
    "DEFAULT_POLICIES",
    "DEV_TASKS",
    "TASKS_DIR",
    "FLAT_GAIN",
    "GROUP_LABEL",
    "aggregate",
    "bench",
    "default_policies",
    "default_task_recipes",
    "default_tasks",
    "load_tasks",
    "oracle",
    "payback_hours",
    "render",
    "render_targets",
    "render_trace",
    "run_campaign",
    "select_tasks",
    "settle_oracle",
    "targets",
    "task_group",
    "trace_rows",
    "true_tps",
    "unknown_tasks",
]

SEEDED = ("random", "tpe", "gp", "cmaes")  # the policies that draw from a seeded RNG
DEFAULT_POLICIES = ["heuristic", "random", "tpe", "gp", "cmaes", "greedy", "costmodel"]
TASKS_DIR = Path(__file__).with_name("tasks")  # the task recipes (``<model>/<cluster>.yaml``, package data)
# the tasks whose traces were read while the rules were developed (data: task_groups.yaml); the rest are report-only
DEV_TASKS: tuple[str, ...] = tuple(yaml.safe_load((Path(__file__).with_name("task_groups.yaml")).read_text())["dev"])
BUDGET_RUNS = 14  # the common budget: this many baseline-sized runs' device-hours


# the packages the search baselines draw their points through: tpe, gp and cmaes (optuna, its cmaes and scipy backends,
# numpy underneath) -- another version of one may draw other points from the same seed, so the report names them
SAMPLER_PACKAGES = ("optuna", "cmaes", "scipy", "numpy")


def sampler_versions() -> dict[str, str]:
    """The installed version of each of SAMPLER_PACKAGES ("not installed" where one is missing)."""
    out = {}
    for name in SAMPLER_PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def load_tasks(paths: Iterable[Path]) -> dict[Path, Recipe]:
    """Each recipe file loaded once, by path, in the order given."""
    return {p: load_recipe(p) for p in paths}


def default_task_recipes() -> dict[Path, Recipe]:
    """The benchmark's simulated task recipes (``TASKS_DIR``, shipped with the package: a user's ``recipes/`` holds
    their own recipes, not these), each loaded once."""
    return {p: r for p, r in load_tasks(sorted(TASKS_DIR.glob("*/*.yaml"))).items() if r.cluster.launcher == "sim"}


def default_tasks() -> list[Path]:
    """The benchmark's simulated task recipes (``TASKS_DIR``)."""
    return list(default_task_recipes())


def _noiseless(recipe: Recipe, levers: dict[str, Any]) -> SimResult:
    """One noiseless simulated trial of ``recipe`` with ``levers`` (seed 0)."""
    from bot.sim.simulate import simulate

    c = recipe.cluster
    return simulate(model_for(recipe.workload), c.hardware, c.nodes, c.devices_per_node, levers, dict(recipe.pinned), 0)


def true_tps(recipe: Recipe, levers: dict[str, Any]) -> float:
    """The simulator's noiseless tokens/s per device for a lever set (0 when it does not run)."""
    res = _noiseless(recipe, levers)
    return res.tokens_per_s_per_device if res.outcome == "ok" else 0.0


def baseline_problem(recipe: Recipe) -> str | None:
    """Why the recipe as written does not run in the simulator (its outcome and reason: ``oom: peak memory ...``),
    or None where it runs. A task's gains are measured over its recipe, and the campaigns stop at a baseline that
    fails (the recipe must work before it is tuned), so such a task has no gain to measure: scored, it would read as
    a flat task every policy met."""
    res = _noiseless(recipe, dict(recipe.levers))
    if res.outcome == "ok" and res.tokens_per_s_per_device > 0:
        return None
    return f"{res.outcome}: {res.reason}" if res.reason else str(res.outcome)


STRUCTURAL = catalog.PARALLEL_DEGREES
CORE = ("training.local_batch_size", "activation_checkpoint")


def with_prerequisites(levers: dict[str, Any], model: Any, space: set[str]) -> dict[str, Any]:
    """``levers`` with every missing prerequisite set (:func:`bot.core.levers.with_prerequisites`): the point a policy
    reaches through its prerequisite step, so the oracle's grid does not count such points as illegal."""
    return catalog.with_prerequisites(levers, model, space)


def oracle(
    recipe: Recipe, run_cost: float, top_k: int = 24, seen: dict[tuple, float] | None = None
) -> tuple[float, dict[str, Any], float, int]:
    """The noiseless optimum of the shared legal search space: (best tps, its levers, device-hours, points).

    The full cartesian grid is far too large to enumerate (10^8-10^10 points), so the search is structured:
    (1) every combination of the parallel degrees (TP, PP, CP, EP; the FSDP degree is the leftover) crossed
    with every local batch and recompute mode, other levers at the recipe's values; (2) from the ``top_k``
    best distinct points, coordinate descent over every lever of the space (one lever at a time, all its
    values, repeated until no move improves), also re-trying each pair of (local batch, recompute,
    PP microbatch, schedule) moves. A point that misses a prerequisite is evaluated with it set
    (:func:`with_prerequisites`). It is a search over the same space the policies use, not a proof of the
    global optimum; the benchmark also takes any better point a policy reaches as the oracle. device-hours
    is what running every evaluated legal point for real would cost.
    """
    from bot.sim.simulate import simulate

    full_space = make_space(recipe)
    space = full_space.values
    c = recipe.cluster
    cache: dict[tuple, float] = {} if seen is None else seen
    legal = 0

    def tps(levers: dict[str, Any]) -> float:
        nonlocal legal
        key = tuple(sorted((k, repr(v)) for k, v in levers.items()))
        if key not in cache:
            res = simulate(
                model_for(recipe.workload), c.hardware, c.nodes, c.devices_per_node, levers, dict(recipe.pinned), 0
            )
            legal += res.outcome != "invalid"
            cache[key] = res.tokens_per_s_per_device if res.outcome == "ok" else (0.0 if res.outcome == "oom" else -1.0)
        return cache[key]

    def fix(levers: dict[str, Any]) -> dict[str, Any]:
        return with_prerequisites(levers, full_space.model, set(space))

    base = dict(recipe.levers)
    struct = [k for k in STRUCTURAL if k in space]
    core = [k for k in CORE if k in space]
    seeds: list[tuple[float, dict[str, Any]]] = [(tps(base), base)]
    for combo in itertools.product(*(space[k] for k in struct)):
        shape = {**base, **dict(zip(struct, combo, strict=True))}
        if "parallelism.data_parallel_shard_degree" in space:
            shape["parallelism.data_parallel_shard_degree"] = -1
        for cv in itertools.product(*(space[k] for k in core)):
            lv = fix({**shape, **dict(zip(core, cv, strict=True))})
            v = tps(lv)
            if v > 0:
                seeds.append((v, lv))
    seeds.sort(key=lambda x: -x[0])
    starts: list[dict[str, Any]] = []
    seen_struct: set[tuple[Any, ...]] = set()
    for _v, lv in seeds:
        sk = tuple(lv.get(k) for k in struct)
        if sk in seen_struct and len(starts) >= top_k // 2:
            continue
        seen_struct.add(sk)
        starts.append(lv)
        if len(starts) >= top_k:
            break
    pair_levers = [
        k
        for k in (*CORE, "parallelism.pipeline_parallel_microbatch_size", "parallelism.pipeline_parallel_schedule")
        if k in space
    ]
    best, best_levers = max(seeds, key=lambda x: x[0]) if seeds else (0.0, base)
    for lv in starts:
        cur, cur_v = dict(lv), tps(lv)
        improved = True
        while improved:
            improved = False
            for k, values in space.items():
                for val in values:
                    cand = fix({**cur, k: val})
                    v = tps(cand)
                    if v > cur_v * (1 + 1e-9):
                        cur, cur_v, improved = cand, v, True
            if not improved:
                for a, b in itertools.combinations(pair_levers, 2):
                    for va, vb in itertools.product(space[a], space[b]):
                        cand = fix({**cur, a: va, b: vb})
                        v = tps(cand)
                        if v > cur_v * (1 + 1e-9):
                            cur, cur_v, improved = cand, v, True
        if cur_v > best:
            best, best_levers = cur_v, cur
    return best, best_levers, legal * run_cost, len(cache)


def run_campaign(
    recipe_path: Path,
    policy: str,
    seed: int,
    budget: float,
    work: Path,
    recipe: Recipe | None = None,
    text: str | None = None,
) -> cm.Campaign:
    """One simulated campaign of ``policy`` on the recipe at ``recipe_path`` (``recipe``/``text``: that file already
    loaded and read, so a benchmark reads each recipe once)."""
    recipe = recipe if recipe is not None else load_recipe(recipe_path)
    rel = recipe_path.name
    options = {"seed": seed} if policy in SEEDED else {}
    records = FileRecordStore(work)
    executor = Executor(
        forge=MemoryForge({rel: text if text is not None else recipe_path.read_text()}),
        states=FileStateStore(work),
        records=records,
        runs=LocalRunPort(SimRunner(seed=seed), records, calibrate=make_calibrator(work)),
        policy=get_policy(policy, **options),
        lessons=load_lessons(find_repo().lessons),
        space_fn=make_space,  # the catalog of the checkout running the bench
        gate_config=config_gate,
        gate_convergence=convergence_gate,
    )
    state = cm.Campaign(
        id=f"{recipe.name.replace('/', '-')}-{policy}-{seed}",
        recipe_path=rel,
        recipe_id=recipe.name,
        policy=policy,
        devices=recipe.devices,
        usd_per_device_hour=recipe.cluster.usd_per_device_hour,
        budget=budget,
        baseline_levers=dict(recipe.levers),
        incumbent_levers=dict(recipe.levers),
        band_k=2.0,
        band_floor=0.02,
        **measurement_options(recipe.cluster.launcher),
    )
    return executor.start(state)


def fresh_gain(recipe: Recipe, levers: dict[str, Any], seed: int) -> float:
    """A fresh re-measure (3 new simulated runs each) of the final recipe against the baseline."""
    runner = SimRunner(seed=10_000 + seed)

    def med(lv: dict[str, Any]) -> float:
        vals = [
            runner.run(recipe.model_copy(update={"levers": lv}), out_dir=None).summary.tps_median or 0.0
            for _ in range(3)
        ]
        return statistics.median(vals)

    base = med(dict(recipe.levers))
    return med(levers) / base - 1.0 if base else 0.0


def task_group(recipe_id: str) -> str:
    """``dev`` for the tasks whose campaign traces were read while the agent's rules were written, ``report`` for
    the tasks run only to report (committed before any rule change of issue 15, in 4394aba; never traced)."""
    return "dev" if recipe_id in DEV_TASKS else "report"


def _named(recipe: Recipe, name: str) -> bool:
    return name in (recipe.name, recipe.workload.model or "")


def select_tasks(paths: list[Path], names: list[str], loaded: Mapping[Path, Recipe] | None = None) -> list[Path]:
    """The recipes whose id (``model/cluster``) or model id is one of ``names`` (all when ``names`` is empty);
    ``loaded``: the recipes already loaded (:func:`load_tasks`)."""
    if not names:
        return paths
    recipes = loaded if loaded is not None else load_tasks(paths)
    return [p for p in paths if any(_named(recipes[p], n) for n in names)]


def unknown_tasks(loaded: Mapping[Path, Recipe], names: list[str]) -> list[str]:
    """The names that are neither the recipe id nor the model id of any recipe of ``loaded``."""
    return [n for n in names if not any(_named(r, n) for r in loaded.values())]


def trace_rows(state: cm.Campaign) -> list[dict[str, Any]]:
    """Each step of a campaign: its change, why, what it measured, and what the campaign decided."""
    rows = []
    for s in state.steps:
        trial = next((r for r in s.runs if r.kind == "trial"), None)
        change = s.change.title() + ("".join(f", {k}={v}" for k, v in s.change.extra.items()))
        decision = "kept" if s.kept else (s.close_reason or s.state)
        rows.append(
            {
                "n": s.n,
                "change": change + (f" (on step {s.stacked_on})" if s.stacked_on else ""),
                "why": s.change.why,
                "move": s.change.prediction.move if s.change.prediction else None,
                "predicted_gain": s.change.prediction.gain if s.change.prediction else None,
                "outcome": trial.outcome if trial else ("enabler" if s.change.enabler else "not run"),
                "measured_gain": s.gain,
                "decision": decision,
            }
        )
    rows.append(
        {
            "n": "-",
            "change": "stop",
            "why": state.finish_reason,
            "outcome": "",
            "measured_gain": None,
            "decision": f"final measured gain {state.gain:+.1%}",
        }
    )
    return rows


def default_policies() -> list[str]:
    """The policies compared when none are named: heuristic (the agent) and every baseline (and claude when its key is set)."""
    return DEFAULT_POLICIES + (["claude"] if os.environ.get("ANTHROPIC_API_KEY") else [])


def settle_oracle(task: str, entry: dict[str, Any], rows: list[dict[str, Any]], search_tps: float) -> dict[str, Any]:
    """Set the task's reference optimum and return the oracle's own row.

    The reference is the structured search's optimum (``search_tps``), or a better point a policy reached (``rows``:
    the task's campaigns, each with its ``final_tps``, which becomes its ``oracle_fraction`` of the reference).
    ``entry`` (the task's oracle record: baseline_tps, devices, budget, oracle_device_hours, grid) gains
    ``oracle_tps``/``oracle_gain`` (the reference), ``search_tps``/``search_gain`` (what the search itself found),
    ``oracle_from_policy`` and ``oracle_policy``. The oracle row is the search's: its gain and its fraction of the
    reference."""
    base = entry["baseline_tps"]

    def gain(tps: float) -> float:
        return tps / base - 1.0 if base else 0.0

    top = max(rows, key=lambda r: r["final_tps"], default=None)
    from_policy = top is not None and top["final_tps"] > search_tps
    best = top["final_tps"] if from_policy and top is not None else search_tps
    entry.update(
        oracle_tps=best,
        oracle_gain=gain(best),
        search_tps=search_tps,
        search_gain=gain(search_tps),
        oracle_from_policy=from_policy,
        oracle_policy=top["policy"] if from_policy and top is not None else None,
    )
    for r in rows:
        r["oracle_fraction"] = r.pop("final_tps") / best if best else 0.0
    cost, budget = entry["oracle_device_hours"], entry["budget"]
    return {
        "task": task,
        "policy": "oracle",
        "seed": 0,
        "gain": gain(search_tps),
        "claimed_gain": gain(search_tps),
        "device_hours": cost,
        "oracle_fraction": search_tps / best if best else 0.0,
        "false_gains": 0,
        "steps": entry["grid"],
        "budget_share": cost / budget if budget else 0.0,
    }


def aggregate(rows: list[dict[str, Any]], devices: Mapping[str, int]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per task and policy, over its seeds: mean and best gain, mean device-hours, the mean campaign's payback
    (:func:`payback_hours`: mean device-hours over mean gain), how many seeds gained, and the rest of the table's figures."""
    df = pd.DataFrame(rows)
    df["gained"] = df["gain"] > 0
    agg = (
        df.groupby(["task", "policy"], sort=False)
        .agg(
            mean_gain=("gain", "mean"),
            best_gain=("gain", "max"),
            claimed_gain=("claimed_gain", "mean"),
            device_hours=("device_hours", "mean"),
            oracle_fraction=("oracle_fraction", "mean"),
            false_gains=("false_gains", "sum"),
            budget_share=("budget_share", "mean"),
            max_budget_share=("budget_share", "max"),
            max_claimed=("claimed_gain", "max"),
            seeds=("gain", "size"),
            seeds_gained=("gained", "sum"),
        )
        .reset_index()
    )
    tasks: dict[str, dict[str, dict[str, Any]]] = {}
    for r in agg.to_dict("records"):
        m: dict[str, Any] = {
            k: (None if pd.isna(v) else float(v))
            for k, v in r.items()
            if k not in ("task", "policy", "seeds", "seeds_gained")
        }
        m.update(
            seeds=int(r["seeds"]),
            seeds_gained=int(r["seeds_gained"]),
            payback_hours=payback_hours(m["device_hours"], m["mean_gain"], devices.get(r["task"], 0)),
        )
        tasks.setdefault(r["task"], {})[r["policy"]] = m
    return tasks


def _bench_task(
    path: Path, recipe: Recipe, policies: list[str], seeds: int, work: Path, trace: str | None, progress: Any
) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, list[dict[str, Any]]]]:
    """One task: its oracle search and every policy's campaigns. (rows, oracle record, traces by policy)."""
    task = recipe.name
    text = path.read_text()
    base_true = true_tps(recipe, dict(recipe.levers))
    run_cost = SimRunner(seed=0).run(recipe, out_dir=None).summary.device_hours
    budget = BUDGET_RUNS * run_cost
    best, best_levers, ocost, grid = oracle(recipe, run_cost)
    entry = {
        "oracle_tps": best,
        "oracle_gain": best / base_true - 1.0 if base_true else 0.0,
        "oracle_device_hours": ocost,
        "grid": grid,
        "budget": budget,
        "baseline_tps": base_true,
        "oracle_levers": best_levers,
        "group": task_group(task),
        "model": model_label(recipe.workload),
        "devices": recipe.devices,
        "hardware": recipe.cluster.hardware,
    }
    rows: list[dict[str, Any]] = []
    traces: dict[str, list[dict[str, Any]]] = {}
    for policy in policies:
        for seed in range(seeds):
            state = run_campaign(path, policy, seed, budget, work, recipe=recipe, text=text)
            if trace and seed == 0 and _named(recipe, trace):
                traces[policy] = trace_rows(state)
            final = dict(state.incumbent_levers)
            final_true = true_tps(recipe, final)
            false_gain = int(state.incumbent_step != 0 and fresh_gain(recipe, final, seed) <= 0.0)
            rows.append(
                {
                    "task": task,
                    "policy": policy,
                    "seed": seed,
                    "gain": final_true / base_true - 1.0 if base_true else 0.0,
                    "claimed_gain": state.gain,
                    "device_hours": state.spent,
                    "final_tps": final_true,
                    "false_gains": false_gain,
                    "steps": len(state.steps),
                    "budget_share": state.spent / budget if budget else 0.0,
                }
            )
            if progress:
                progress(rows[-1])
    rows.append(settle_oracle(task, entry, rows, best))
    return rows, entry, traces


def bench(
    recipes: list[Path],
    seeds: int = 3,
    policies: list[str] | None = None,
    progress=None,
    trace: str | None = None,
    loaded: Mapping[Path, Recipe] | None = None,
) -> dict[str, Any]:
    """Every policy on every task over ``seeds`` seeds (SIMULATED). ``trace``: a task (recipe id or model id) whose
    seed-0 campaigns are kept step by step (``result["traces"][task][policy]``). ``loaded``: the recipes already
    loaded (:func:`load_tasks`); each of the others is loaded here, once."""
    t0 = time.monotonic()
    policies = policies or default_policies()
    known = dict(loaded or {})
    tasks_loaded = {p: known[p] if p in known else load_recipe(p) for p in recipes}
    failing = {r.name: problem for r in tasks_loaded.values() if (problem := baseline_problem(r)) is not None}
    if failing:
        raise ValueError(
            "a task's recipe does not run in the simulator, so it has no gain to measure: "
            + "; ".join(f"{task} ({problem})" for task, problem in failing.items())
        )
    ids = [r.name for r in tasks_loaded.values()]
    if len(set(ids)) < len(ids):
        raise ValueError(f"two recipes are the same task: {', '.join(sorted({i for i in ids if ids.count(i) > 1}))}")
    rows: list[dict[str, Any]] = []
    oracles: dict[str, dict[str, Any]] = {}
    traces: dict[str, dict[str, list[dict[str, Any]]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for path, recipe in tasks_loaded.items():
            task_rows, oracles[recipe.name], task_traces = _bench_task(
                path, recipe, policies, seeds, Path(tmp), trace, progress
            )
            rows += task_rows
            if task_traces:
                traces[recipe.name] = task_traces
    tasks = aggregate(rows, {t: o["devices"] for t, o in oracles.items()})
    result = {
        "simulated": True,
        "seeds": seeds,
        "budget_runs": BUDGET_RUNS,
        "versions": sampler_versions(),
        "tasks": tasks,
        "oracle": oracles,
        "groups": {task: o["group"] for task, o in oracles.items()},
        "traces": traces,
    }
    return {**result, "targets": targets(result), "wall_s": time.monotonic() - t0}
