"""``attune bench measure``: a benchmark of the campaign's decisions themselves (is B faster than A?).

Every comparison is decided by the campaign's own protocol (:mod:`bot.campaign.measure`), fed with real runs of
torchtitan on this machine (idle and under a bounded background load: A-vs-A and known real changes, and which
per-run statistic spreads least) and with thousands of simulated comparisons (true gains 0, 2, 3 and 10 %, the
simulator's seeded noise; labelled SIMULATED). What each part measures: docs/agent-evidence.md.
"""

from __future__ import annotations

import math
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bot.campaign import measure as ms
from bot.campaign.measurement_settings import measurement_options
from bot.core.recipe import Recipe
from bot.core.records import Change, RunRecord
from bot.core.state import Campaign, RunRef, Step

REAL_CHANGES: dict[str, dict[str, Any]] = {
    "A vs A (same recipe)": {},
    "activation_checkpoint full -> none": {"activation_checkpoint": "none"},
    "local batch 1 -> 2": {"training.local_batch_size": 2},
    "local batch 1 -> 8": {"training.local_batch_size": 8},
}
SIM_GAINS = (0.0, 0.02, 0.03, 0.10)


# ----------------------------------------------------------------------------- per-run estimators
def _trimmed(values: list[float], cut: float = 0.2) -> float:
    v = sorted(values)
    k = int(len(v) * cut)
    return statistics.fmean(v[k : len(v) - k] or v)


ESTIMATORS: dict[str, Callable[[list[float]], float]] = {
    "median": statistics.median,
    "mean": statistics.fmean,
    "trimmed mean 20%": _trimmed,
    "75th percentile": lambda v: float(np.percentile(v, 75)),
    "90th percentile": lambda v: float(np.percentile(v, 90)),
    "max": max,
}


def step_tps(record: RunRecord, warmup: int) -> list[float]:
    return [s.tps for s in record.steps if s.tps and s.step > warmup]


def estimator_spread(records: list[RunRecord], warmup: int) -> dict[str, float]:
    """Run-to-run spread (sd of log) of each statistic over runs of one recipe: the smaller, the better."""
    out = {}
    for name, fn in ESTIMATORS.items():
        vals = [math.log(fn(v)) for v in (step_tps(r, warmup) for r in records) if v]
        out[name] = statistics.stdev(vals) if len(vals) > 1 else float("nan")
    return out


# ----------------------------------------------------------------------------- one comparison, by the protocol
def _ref(kind: str, tps: float | None, ok: bool, key: str, *, n: int = 1, attempt: int = 1, **kw: Any) -> RunRef:
    return RunRef(kind=kind, n=n, attempt=attempt, outcome="ok" if ok and tps else "crash", tps=tps, record=key, **kw)


def decide(
    settings: dict[str, Any], baseline: list[float], measure_run: Callable[[str], float | None], n: int = 1
) -> dict[str, Any]:
    """One comparison by the campaign's protocol: the trial, then pairs in ABBA order until the rule decides.
    ``measure_run("A"|"B")`` makes one run and answers its tokens/s (None: it failed)."""
    state = Campaign(id="bench", recipe_path="r", recipe_id="r", budget=1e9, **settings)
    state.baseline = [_ref("baseline", t, True, f"b{i}", n=0, attempt=i + 1) for i, t in enumerate(baseline)]
    state.baseline_warmup_runs = 0
    state.incumbent_tps = statistics.median(baseline)
    step = Step(n=n, change=Change(lever="x", after=1))
    state.steps.append(step)
    runs = 1
    trial = measure_run("B")
    step.runs.append(_ref("trial", trial, trial is not None, "t", n=n))
    cut = ms.cut(state, step)
    if cut is not None:
        return {
            "decision": "no_gain",
            "estimate": cut.estimate,
            "lo": cut.lo,
            "hi": cut.hi,
            "pairs": 0,
            "runs": runs,
            "cut": True,
        }
    m = None
    for k in range(1, state.max_pairs + 1):
        order = ms.pair_order(k, with_trial=state.pair_with_trial)
        tps: dict[str, float | None] = {}
        for side in order:
            if k == 1 and state.pair_with_trial and side == "B":
                tps["B"] = trial
                continue
            tps[side] = measure_run(side)
            runs += 1
        step.runs.append(
            _ref(
                "pair",
                tps["B"],
                tps["A"] is not None and tps["B"] is not None,
                "t" if (k == 1 and state.pair_with_trial) else f"p{k}b",
                n=n,
                attempt=k,
                reference_tps=tps["A"],
                reference_record=f"p{k}a",
                order=order,
            )
        )
        m = ms.measure(state, step)
        if m.decision != "measuring":
            break
    assert m is not None
    return {
        "decision": m.decision,
        "estimate": m.estimate,
        "lo": m.lo,
        "hi": m.hi,
        "pairs": m.pairs,
        "runs": runs,
        "cut": False,
    }


# ----------------------------------------------------------------------------- real runs on this machine
class BusyLoad:
    """A busy loop on one core for at most ``seconds``, started and stopped by the benchmark (a context manager)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> BusyLoad:
        code = f"import time\nend = time.time() + {self.seconds!r}\nwhile time.time() < end:\n    pass\n"
        self.proc = subprocess.Popen([sys.executable, "-c", code])
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
        if self.proc is not None:
            self.proc.wait()


def real_condition(
    recipe: Recipe, out: Path, *, repeats: int, steps: int, warmup: int, progress: Callable[[str], None]
) -> dict[str, Any]:
    """Warm-up, three baseline runs, then ``repeats`` comparisons per change, interleaved change by change."""
    from bot.runner import get_runner

    runner = get_runner("local")
    bench = recipe.bench.model_copy(update={"steps": steps, "warmup_steps": warmup})
    records: dict[str, list[RunRecord]] = {"A": []}
    counter = [0]

    def run(levers: dict[str, Any], side: str) -> float | None:
        counter[0] += 1
        r = recipe.model_copy(update={"levers": {**recipe.levers, **levers}, "bench": bench})
        rec = runner.run(r, steps=steps, out_dir=out / f"run-{counter[0]:03d}", recipe_text=None)
        if not levers:
            records["A"].append(rec)
        progress(f"run {counter[0]} ({side}): {rec.outcome} {rec.summary.tps_median or 0:,.0f} tok/s")
        return rec.summary.tps_median if rec.outcome == "ok" else None

    settings = measurement_options("local")
    run({}, "warm-up")
    records["A"].clear()  # the warm-up run is not a measurement
    baseline = [t for t in (run({}, "baseline") for _ in range(settings.get("baseline_runs_wanted", 3))) if t]
    t0 = time.time()
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in REAL_CHANGES}
    for _ in range(repeats):
        for name, delta in REAL_CHANGES.items():
            start = counter[0]
            began = time.time()

            def run_side(side: str, d: dict[str, Any] = delta) -> float | None:
                return run(d if side == "B" else {}, side)

            res = decide({k: v for k, v in settings.items() if k not in ("baseline_warmup_runs",)}, baseline, run_side)
            res["wall_s"] = time.time() - began
            res["runs"] = counter[0] - start
            results[name].append(res)
    return {
        "baseline": baseline,
        "comparisons": results,
        "wall_s": time.time() - t0,
        "estimators": estimator_spread(records["A"], warmup),
        "base_runs": [step_tps(r, warmup) for r in records["A"]],
        "base_tps": [r.summary.tps_median for r in records["A"] if r.summary.tps_median],
    }


def resampled_false_gains(tps: list[float], settings: dict[str, Any], trials: int, seed: int = 0) -> dict[str, Any]:
    """The protocol replayed on A-vs-A comparisons drawn (with replacement) from real runs of one recipe."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(trials):
        base = [float(x) for x in rng.choice(tps, 3)]
        out.append(decide(settings, base, lambda side: float(rng.choice(tps))))
    return summarise(out)


def remeasure(
    state: Campaign,
    recipe: Recipe,
    out: Path,
    *,
    steps: int,
    warmup: int,
    progress: Callable[[str], None] = lambda s: None,
    baseline_runs: int = 3,
) -> list[dict[str, Any]]:
    """Every kept step of a finished campaign measured again, its incumbent against it, by the same protocol with fresh
    runs (``baseline_runs`` of the incumbent first, as a campaign starts): no false gain means every interval lies
    above zero."""
    from bot.runner import get_runner

    runner = get_runner(recipe.cluster.launcher)
    bench = recipe.bench.model_copy(update={"steps": steps, "warmup_steps": warmup})
    settings = {
        k: v
        for k, v in measurement_options(recipe.cluster.launcher).items()
        if k not in ("baseline_warmup_runs", "baseline_runs_wanted")
    }
    counter = [0]
    results = []
    incumbent = dict(state.baseline_levers)
    for st in state.steps:
        if not st.kept:
            continue

        def run(levers: dict[str, Any], side: str, n: int = st.n) -> float | None:
            counter[0] += 1
            rec = runner.run(
                recipe.model_copy(update={"levers": levers, "bench": bench}),
                steps=steps,
                out_dir=out / f"run-{counter[0]:03d}",
            )
            progress(f"step {n} {side}: {rec.outcome} {rec.summary.tps_median or 0:,.0f} tok/s")
            return rec.summary.tps_median if rec.outcome == "ok" else None

        before, after = dict(incumbent), dict(st.levers)
        base = [t for t in (run(before, "baseline") for _ in range(baseline_runs)) if t]
        began = time.time()

        def run_side(side: str, b: dict[str, Any] = before, a: dict[str, Any] = after) -> float | None:
            return run(a if side == "B" else b, side)

        res = decide(settings, base, run_side, n=st.n)
        results.append(
            {
                "step": st.n,
                "change": st.change.title(),
                "campaign_estimate": st.gain,
                "wall_s": time.time() - began,
                **res,
                "above_zero": res["lo"] is not None and res["lo"] > 0,
            }
        )
        incumbent = after
    return results


# ----------------------------------------------------------------------------- simulated
SIM_STEPS, SIM_WARMUP = 20, 5  # the simulator tasks' bench: 20 steps, 5 of them warm-up


def simulated(trials: int, seed: int = 0, **overrides: Any) -> dict[str, Any]:
    """Comparisons of true gains with the simulator's noise model and campaign settings (SIMULATED). Every run's
    estimate is the median of its ``measure_steps`` after the warm-up (all 15 when unset); ``steps`` counts the
    steps the runs of a decision made: the trial all 20, every later run the warm-up and the window."""
    from bot.sim.noise import measured_throughput

    settings = {**measurement_options("sim"), **overrides}
    settings = {k: v for k, v in settings.items() if k not in ("early_stop",)}
    window = settings.get("measure_steps") or SIM_STEPS - SIM_WARMUP
    out: dict[str, Any] = {}
    counter = [0]
    for gain in SIM_GAINS:
        res = []
        for t in range(trials):

            def run(side: str, g: float = gain, t: int = t) -> float:
                counter[0] += 1
                return measured_throughput(
                    1000.0 * (1.0 + g if side == "B" else 1.0),
                    seed,
                    f"bench-{t}-{counter[0]}",
                    steps=SIM_WARMUP + window,
                    warmup=SIM_WARMUP,
                )

            base = [run("A") for _ in range(settings.get("baseline_runs_wanted", 2))]
            r = decide(settings, base, run)
            res.append({**r, "steps": SIM_STEPS + (r["runs"] - 1) * min(SIM_STEPS, SIM_WARMUP + window)})
        out[f"{gain:+.0%}"] = summarise(res)
    return {"settings": settings, "by_gain": out, "trials": trials}


def summarise(results: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(results)
    if not n:
        return {"n": 0}
    count = {d: sum(r["decision"] == d for r in results) for d in ("gain", "no_gain", "undecided")}
    widths = [r["hi"] - r["lo"] for r in results if r.get("lo") is not None]
    return {
        "n": n,
        **{f"{d}_share": c / n for d, c in count.items()},
        "runs_mean": statistics.fmean(r["runs"] for r in results),
        "runs_max": max(r["runs"] for r in results),
        **({"steps_mean": statistics.fmean(r["steps"] for r in results)} if all("steps" in r for r in results) else {}),
        "width_median": statistics.median(widths) if widths else None,
        "estimate_median": statistics.median(r["estimate"] for r in results if r["estimate"] is not None)
        if any(r["estimate"] is not None for r in results)
        else None,
    }


# ----------------------------------------------------------------------------- the benchmark
def window_study(trials: int, seed: int, windows: list[int]) -> list[dict[str, Any]]:
    """The simulated comparisons once per measurement window (``measure_steps``): the evidence for the simulator's
    window (:func:`bot.campaign.measurement_settings.measurement_options`). SIMULATED."""
    rows = []
    for w in windows:
        by = simulated(trials, seed, measure_steps=w)["by_gain"]
        rows.append(
            {
                "window": w,
                "false_gain": by["+0%"]["gain_share"],
                "detected_3pct": by["+3%"]["gain_share"],
                "runs_3pct": by["+3%"]["runs_mean"],
                "steps_3pct": by["+3%"]["steps_mean"],
                "steps_0pct": by["+0%"]["steps_mean"],
            }
        )
    return rows


def run_bench(
    recipe: Recipe,
    out: Path,
    *,
    repeats: int = 2,
    steps: int = 12,
    warmup: int = 3,
    load_s: float = 1800.0,
    sim_trials: int = 2000,
    real: bool = True,
    progress: Callable[[str], None] = lambda s: None,
    sim_seed: int = 0,
    sim_windows: list[int] | None = None,
) -> dict[str, Any]:
    report: dict[str, Any] = {
        "recipe": recipe.name,
        "steps": steps,
        "warmup": warmup,
        "repeats": repeats,
        "settings": measurement_options("local"),
        "real": {},
    }
    if real:
        report["real"]["idle"] = real_condition(
            recipe, out / "idle", repeats=repeats, steps=steps, warmup=warmup, progress=progress
        )
        with BusyLoad(load_s):
            report["real"]["load"] = real_condition(
                recipe, out / "load", repeats=repeats, steps=steps, warmup=warmup, progress=progress
            )
        pooled = [t for cond in report["real"].values() for t in cond["base_tps"]]
        for cond in report["real"].values():
            cond["summary"] = {k: summarise(v) for k, v in cond["comparisons"].items()}
            settings = {k: v for k, v in measurement_options("local").items() if k != "baseline_warmup_runs"}
            cond["resampled_a_vs_a"] = resampled_false_gains(cond["base_tps"], settings, 2000)
        report["real_runs_of_the_recipe"] = len(pooled)
    report["simulated"] = simulated(sim_trials, sim_seed)
    if sim_windows:
        report["simulated_windows"] = window_study(sim_trials, sim_seed, sim_windows)
    return report


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x:.0%}"


def render(report: dict[str, Any]) -> str:
    from tabulate import tabulate

    lines = [
        f"# Measurement benchmark — {report['recipe']} ({report['steps']} steps, {report['warmup']} warm-up; protocol settings "
        f"{report['settings']})\n"
    ]
    for name, cond in report.get("real", {}).items():
        lines.append(
            f"## Real runs, {name}{' (a busy loop on one core)' if name == 'load' else ''}: baseline "
            f"{', '.join(f'{t:,.0f}' for t in cond['baseline'])} tok/s; {cond['wall_s']:.0f} s\n"
        )
        rows = [
            [
                k,
                s["n"],
                _pct(s["gain_share"]),
                _pct(s["no_gain_share"]),
                _pct(s["undecided_share"]),
                "—" if s["estimate_median"] is None else f"{s['estimate_median']:+.1%}",
                "—" if s["width_median"] is None else f"{s['width_median']:.1%}",
                f"{s['runs_mean']:.1f} (max {s['runs_max']})",
            ]
            for k, s in cond["summary"].items()
        ]
        lines.append(
            tabulate(
                rows,
                headers=[
                    "comparison",
                    "n",
                    "gain",
                    "no gain",
                    "undecided",
                    "median estimate",
                    "median CI width",
                    "runs",
                ],
                tablefmt="github",
            )
        )
        per = [
            [
                k,
                ", ".join(
                    f"{r['decision']} {r['estimate']:+.1%}"
                    + (f" [{r['lo']:+.1%}, {r['hi']:+.1%}]" if r["lo"] is not None else "")
                    + f" {r['runs']} runs {r['wall_s']:.0f} s"
                    for r in v
                    if r["estimate"] is not None
                ),
            ]
            for k, v in cond["comparisons"].items()
        ]
        lines.append("\n" + tabulate(per, headers=["comparison", "each decision"], tablefmt="github"))
        rs = cond["resampled_a_vs_a"]
        lines.append(
            f"\nA vs A resampled from this condition's {len(cond['base_tps'])} real runs of the recipe ({rs['n']} comparisons): "
            f"false gains {_pct(rs['gain_share'])}, no gain {_pct(rs['no_gain_share'])}, undecided {_pct(rs['undecided_share'])}, "
            f"runs {rs['runs_mean']:.1f} on average\n"
        )
        est = sorted(cond["estimators"].items(), key=lambda kv: kv[1])
        lines.append(
            "Per-run estimator, run-to-run spread (sd of log over the recipe's runs): "
            + ", ".join(f"{k} {v:.2%}" for k, v in est)
            + "\n"
        )
    sim = report["simulated"]
    lines.append(
        f"## SIMULATED (the simulator's seeded noise; settings {sim['settings']}; {sim['trials']} comparisons per gain)\n"
    )
    rows = [
        [
            g,
            _pct(s["gain_share"]),
            _pct(s["no_gain_share"]),
            _pct(s["undecided_share"]),
            f"{s['runs_mean']:.1f} (max {s['runs_max']})",
            f"{s.get('steps_mean', 0):.0f}",
            "—" if s["width_median"] is None else f"{s['width_median']:.1%}",
        ]
        for g, s in sim["by_gain"].items()
    ]
    lines.append(
        tabulate(
            rows,
            headers=[
                "true gain",
                "decided gain",
                "no gain",
                "undecided",
                "runs per decision",
                "steps per decision",
                "median CI width",
            ],
            tablefmt="github",
        )
    )
    if report.get("simulated_windows"):
        lines.append(
            f"\n### SIMULATED: measurement windows (steps after the warm-up each run's median uses; {sim['trials']} comparisons per "
            f"gain; steps per decision: the trial's {SIM_STEPS}, each later run's {SIM_WARMUP} warm-up and its window)\n"
        )
        rows = [
            [
                r["window"],
                f"{r['false_gain']:.1%}",
                f"{r['detected_3pct']:.1%}",
                f"{r['runs_3pct']:.1f}",
                f"{r['steps_3pct']:.1f}",
                f"{r['steps_0pct']:.1f}",
            ]
            for r in report["simulated_windows"]
        ]
        lines.append(
            tabulate(
                rows,
                headers=[
                    "window",
                    "false gains (A vs A)",
                    "+3% detected",
                    "runs per +3% decision",
                    "steps per +3% decision",
                    "steps per A-vs-A decision",
                ],
                tablefmt="github",
            )
        )
    return "\n".join(lines) + "\n"
