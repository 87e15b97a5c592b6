"""Is the candidate faster than the incumbent? The paired, sequential measurement every campaign decides with.

After a step's trial passes the gate, incumbent and candidate run in pairs, ABBA across pairs; the estimate is the
mean paired log-ratio, its interval Student's t with the variance pooled over the campaign's repeat runs (and the
machine kind's noise prior). After every pair: *gain*, *no gain*, another pair, or *undecided* at the cap --
earlier where the cap is out of reach or would take over half the budget left (*futile*). A clearly slower trial
is closed without pairs (*cut*). The protocol in full, and the measurements behind it: docs/agent-evidence.md.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable

from scipy import stats

from bot.core.recipe import Recipe
from bot.core.records import MEASURED_OUTCOMES
from bot.core.state import Campaign, Measurement, RunRef, Step


def pair_order(k: int, *, with_trial: bool) -> str:
    """The order of pair ``k`` (1-based), ABBA across pairs. With the trial as pair 1's candidate run: BA, AB, BA..."""
    first = "BA" if with_trial else "AB"
    return first if k % 2 == 1 else ("AB" if first == "BA" else "BA")


def pair_with_the_run_before(state: Campaign, st: Step) -> RunRef | None:
    """Pair 1 of step ``st`` made from runs already made, or None: where the trial is pair 1's candidate (one machine,
    runs back to back) and the campaign's run right before the trial was the incumbent's -- the last baseline run
    (no calibration run in between), the incumbent side of a closed step's last pair (``BA``), or the candidate side
    of the kept step's last pair (``AB``, now the incumbent) -- those two runs are a pair in ``AB`` order, as if the
    incumbent had been run for it, and that run is not made again. Steps that made no run (config rejects, enablers)
    or only failed starts (out of memory, a crash: seconds, nothing measured) do not stand between two runs; a
    rejected candidate's trial does (it ran a whole run), and so does a fresh calibration."""
    trial = next((r for r in st.runs if r.kind == "trial" and r.outcome == "ok" and r.tps), None)
    if trial is None or any(r.kind == "pair" for r in st.runs):
        return None
    before = [p for p in state.steps if p.n < st.n and any(r.outcome in MEASURED_OUTCOMES for r in p.runs)]
    if before:
        prev = before[-1]
        last = prev.runs[-1]
        if last.kind != "pair" or last.outcome != "ok":
            return None  # a trial (a rejected candidate) or a failed run ran last
        if last.order == "BA" and not prev.kept and state.incumbent_step < prev.n:
            tps, record = last.reference_tps, last.reference_record
        elif last.order == "AB" and prev.kept and state.incumbent_step == prev.n:
            tps, record = last.tps, last.record
        else:
            return None
    else:
        runs = state.measured_baseline()
        if state.calibration_runs or state.incumbent_step != 0 or not runs or runs[-1].outcome != "ok":
            return None
        tps, record = runs[-1].tps, runs[-1].record
    if not tps:
        return None
    return RunRef(
        kind="pair",
        n=st.n,
        attempt=1,
        order="AB",
        outcome="ok",
        tps=trial.tps,
        reference_tps=tps,
        record=trial.record,
        reference_record=record,
        device_hours=0.0,
        simulated=trial.simulated,
        reused=True,
    )


def measure_window(state: Campaign, recipe: Recipe) -> tuple[int, int] | None:
    """The steps every run's tokens/s is the median of, ``(after, upto)``: the ``measure_steps`` after the recipe's
    warm-up (None: all the steps after it, the record's own median)."""
    if state.measure_steps is None:
        return None
    warm = max(recipe.bench.warmup_steps, 1)
    return warm, warm + state.measure_steps


def measured_only_steps(state: Campaign, recipe: Recipe, kind: str, attempt: int) -> int | None:
    """How many steps a run that is only measured makes (a pair's run, a baseline run after the first): the warm-up
    and the measurement window; None (the recipe's ``bench.steps``) for the runs the gate reads -- the first
    baseline run (the loss-curve reference) and trials -- and when the campaign measures every step."""
    window = measure_window(state, recipe)
    if window is None or not (kind.startswith("pair-") or (kind == "baseline" and attempt > 1)):
        return None
    return min(window[1], recipe.bench.steps)


def log_ratio(run: RunRef) -> float | None:
    """A pair's ``log(candidate / incumbent)``, or None when either side did not measure."""
    if run.kind != "pair" or run.outcome != "ok" or not run.tps or not run.reference_tps:
        return None
    return math.log(run.tps / run.reference_tps)


def run_groups(state: Campaign, exclude: frozenset[str] = frozenset()) -> dict[tuple[int, str], list[float]]:
    """``log tps`` of every measured run of the campaign, grouped by (step, configuration): the baseline's runs, and
    per step its incumbent runs and its candidate runs. Runs of one group ran close together in time, so their spread
    is the machine's run-to-run noise, not its drift over the campaign (which the pairs cancel)."""
    groups: dict[tuple[int, str], list[float]] = defaultdict(list)
    seen: set[str] = set(exclude)  # a run is counted once (pair 1's candidate run may be the trial); outliers never

    def add(key: tuple[int, str], tps: float | None, record: str) -> None:
        if tps and (not record or record not in seen):
            seen.add(record)
            groups[key].append(math.log(tps))

    for r in state.measured_baseline():
        if r.outcome == "ok":
            add((0, "baseline"), r.tps, r.record)
    for st in state.steps:
        for r in st.runs:
            if r.outcome == "ok" and r.kind in ("trial", "pair"):
                add((st.n, "candidate"), r.tps, r.record)
            if r.outcome == "ok" and r.kind == "pair":
                add((st.n, "incumbent"), r.reference_tps, r.reference_record)
    return groups


def pooled_run_sd(
    groups: Iterable[list[float]], prior_sd: float | None = None, prior_df: int = 0
) -> tuple[float | None, int]:
    """(sd of one run's ``log tps``, its degrees of freedom) pooled within configurations, with the machine kind's
    prior ``prior_sd`` counted as ``prior_df`` degrees of freedom; (None, 0) with neither."""
    ss, df = (prior_sd**2 * prior_df, prior_df) if prior_sd and prior_df else (0.0, 0)
    for values in groups:
        if len(values) > 1:
            mean = sum(values) / len(values)
            ss += sum((v - mean) ** 2 for v in values)
            df += len(values) - 1
    return (math.sqrt(ss / df), df) if df else (None, 0)


def interval(ds: list[float], sd_pair: float, df: int, confidence: float) -> tuple[float, float, float]:
    """(estimate, lo, hi) as relative gains: the mean log-ratio ``ds`` with Student's t at ``confidence``."""
    mean = sum(ds) / len(ds)
    half = float(stats.t.ppf(0.5 + confidence / 2.0, df)) * sd_pair / math.sqrt(len(ds))
    return math.exp(mean) - 1.0, math.exp(mean - half) - 1.0, math.exp(mean + half) - 1.0


def share(x: float) -> str:
    """A setting as a percentage with no more digits than it has (0.0075 -> 0.75%, 0.05 -> 5%)."""
    return f"{x * 100:.2f}".rstrip("0").rstrip(".") + "%"


def rule_text(state: Campaign) -> str:
    window = f"each run's median of {state.measure_steps} steps after the warm-up; " if state.measure_steps else ""
    sd = state.known_run_sd  # the prior's sd where it counts
    prior = (
        f" and a known {share(sd)} run noise weighted as {state.noise_prior_df} repeat runs" if sd is not None else ""
    )
    return (
        f"{window}paired log-ratio, {state.confidence:.0%} t-interval (variance pooled over the campaign's repeat runs{prior}); "
        f"gain when its lower end > {share(state.min_gain)}, no gain when its upper end < {share(state.min_gain)}, "
        f"else another pair (at most {state.max_pairs}; undecided then, not kept; undecided sooner when below it and "
        f"out of reach of the cap, above it and out of reach of {FAR_OUT_OF_REACH} caps, or out of reach of the cap with "
        f"the pairs to it costing more than half the budget left)"
    )


# a run farther than this (relative), and than twice the throughput band, from its side's median is an outlier: on this CPU
# run-to-run noise is 2-4% (the baseline runs' spread in the demos), so 10% is 3+ sd of a pair's difference; a small-df
# estimate of the noise is not used for it (three runs that happen to agree would make every fourth run an outlier)
OUTLIER_FLOOR = 0.10


def outliers(state: Campaign, st: Step) -> dict[int, str]:
    """Pairs with a run hit by a transient slowdown (or speed-up), by pair number, with why: a side's run far from the
    median of everything measured of that side in this step (the incumbent: its last estimate and this step's
    incumbent runs; the candidate: its trial and pair runs). A machine that drifts moves every later run with it, so
    the median follows and no pair is excluded; one run hit by another process stands alone (the case that
    motivated it: docs/agent-evidence.md)."""
    pairs = [r for r in st.runs if log_ratio(r) is not None]
    if not pairs:
        return {}
    tol = max(2.0 * (state.band.band if state.band is not None else 0.0), OUTLIER_FLOOR)
    inc = [math.log(state.incumbent_tps)] if state.incumbent_tps else []
    inc += [math.log(r.reference_tps) for r in pairs]  # type: ignore[arg-type]
    cand = {r.record: math.log(r.tps) for r in st.runs if r.kind in ("trial", "pair") and r.outcome == "ok" and r.tps}
    out: dict[int, str] = {}
    for r in pairs:
        a, b = math.log(r.reference_tps), math.log(r.tps)  # type: ignore[arg-type]
        if len(inc) > 1 and abs(a - _median(inc)) > tol:
            out[r.attempt] = (
                f"pair {r.attempt}'s incumbent run ({r.reference_tps:,.0f} tok/s) is {math.exp(a - _median(inc)) - 1:+.0%} off the incumbent's other measurements"
            )
        elif len(cand) > 2 and abs(b - _median(list(cand.values()))) > tol:
            out[r.attempt] = (
                f"pair {r.attempt}'s candidate run ({r.tps:,.0f} tok/s) is {math.exp(b - _median(list(cand.values()))) - 1:+.0%} off the candidate's other runs"
            )
    return out


def _median(values: list[float]) -> float:
    v = sorted(values)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2.0


def measure(state: Campaign, st: Step) -> Measurement:
    """The step's measurement after its latest pair, with the decision the sequential rule takes. A pair with an
    outlier run (:func:`outliers`) is left out of the estimate and of the noise, and another pair is measured."""
    bad = outliers(state, st)
    kept = [r for r in st.runs if log_ratio(r) is not None and r.attempt not in bad]
    ds = [d for d in (log_ratio(r) for r in kept) if d is not None]
    exclude = frozenset(
        x
        for r in st.runs
        if r.kind == "pair" and r.attempt in bad
        for x in (r.reference_record, r.record if r.record != _trial_record(st) else "")
    )
    sd_run, df = pooled_run_sd(run_groups(state, exclude - {""}).values(), state.noise_prior_sd, state.noise_prior_df)
    note = "; ".join(f"left out: {why}" for why in bad.values())
    m = Measurement(
        confidence=state.confidence, min_gain=state.min_gain, pairs=len(ds), log_ratios=ds, df=df, rule=rule_text(state)
    )
    m = _decide(state, st, m, ds, sd_run, df)
    return m.model_copy(update={"why": f"{m.why}; {note}"}) if note else m


def _trial_record(st: Step) -> str:
    return next((r.record for r in st.runs if r.kind == "trial"), "")


def _decide(state: Campaign, st: Step, m: Measurement, ds: list[float], sd_run: float | None, df: int) -> Measurement:
    if not ds:
        return m.model_copy(
            update={"decision": "undecided" if _at_cap(state, st) else "measuring", "why": "no pair measured yet"}
        )
    if sd_run is None:
        est = math.exp(sum(ds) / len(ds)) - 1.0
        capped = _at_cap(state, st)
        return m.model_copy(
            update={
                "estimate": est,
                "decision": "undecided" if capped else "measuring",
                "why": "no repeat run yet: the noise is unknown"
                + (f"; {st_pairs(st)} pairs is the cap" if capped else ""),
            }
        )
    sd_pair = math.sqrt(2.0) * sd_run
    est, lo, hi = interval(ds, sd_pair, df, state.confidence)
    m = m.model_copy(update={"estimate": est, "lo": lo, "hi": hi, "sigma": sd_pair})
    n = len(ds)
    if lo > state.min_gain and n >= state.min_pairs_for_gain:
        return m.model_copy(
            update={
                "decision": "gain",
                "why": f"after {n} pair{'s' * (n > 1)} the lower end {lo:+.1%} clears the minimum gain {share(state.min_gain)}",
            }
        )
    if lo > state.min_gain and not _at_cap(state, st):
        return m.model_copy(
            update={
                "decision": "measuring",
                "why": f"the lower end {lo:+.1%} clears the minimum gain {share(state.min_gain)}, but a gain "
                f"is decided on {state.min_pairs_for_gain} pairs at least (both orders)",
            }
        )
    if hi < state.min_gain:
        return m.model_copy(
            update={
                "decision": "no_gain",
                "why": f"after {n} pair{'s' * (n > 1)} the upper end {hi:+.1%} is below the minimum gain {share(state.min_gain)}",
            }
        )
    if _at_cap(state, st):
        return m.model_copy(
            update={
                "decision": "undecided",
                "why": f"{n} pairs (the cap) and the interval [{lo:+.1%}, {hi:+.1%}] still straddles the minimum gain {share(state.min_gain)}",
            }
        )
    need = pairs_to_decide(ds, sd_pair, df, state.confidence, state.min_gain) if n >= FUTILITY_AFTER else 0.0
    reach = 1 if est < state.min_gain else FAR_OUT_OF_REACH
    more, cost, left = state.max_pairs - n, pair_cost(state, st), state.budget - state.spent
    if need > state.max_pairs and more * cost > BUDGET_SHARE * left:
        return m.model_copy(
            update={
                "decision": "undecided",
                "why": f"futile: the interval [{lo:+.1%}, {hi:+.1%}] straddles the minimum gain "
                f"{share(state.min_gain)}, at its estimate deciding would take about {need:.0f} pairs, "
                f"more than the cap of {state.max_pairs}, and the {more} pairs to the cap would cost "
                f"{more * cost:.3g} device-hours, more than half the {left:.3g} left in the budget",
            }
        )
    if need > state.max_pairs * reach:
        return m.model_copy(
            update={
                "decision": "undecided",
                "why": f"futile: the interval [{lo:+.1%}, {hi:+.1%}] straddles the minimum gain "
                f"{share(state.min_gain)} and at its estimate deciding would take about {need:.0f} pairs, "
                f"more than {f'{reach} x ' if reach > 1 else ''}the cap of {state.max_pairs}",
            }
        )
    return m.model_copy(
        update={
            "decision": "measuring",
            "why": f"the interval [{lo:+.1%}, {hi:+.1%}] straddles the minimum gain {share(state.min_gain)}",
        }
    )


FUTILITY_AFTER = 2  # pairs: one pair's estimate is too rough to project from
BUDGET_SHARE = 0.5  # of what is left: the most a step projected not to decide by the cap may still take
FAR_OUT_OF_REACH = 10  # x the cap: a step trending above the minimum gain is cut only this far from deciding


def pairs_to_decide(ds: list[float], sd_pair: float, df: int, confidence: float, min_gain: float) -> float:
    """How many pairs the interval would need, were the true mean log-ratio the estimate so far, to clear the minimum
    gain on either side: the n at which t x sd / sqrt(n) equals the estimate's distance from it (conditional power
    under the current trend, the usual futility projection of a sequential test)."""
    gap = abs(sum(ds) / len(ds) - math.log1p(min_gain))
    t = float(stats.t.ppf(0.5 + confidence / 2.0, df))
    return math.inf if gap == 0 else (t * sd_pair / gap) ** 2


def pair_cost(state: Campaign, st: Step) -> float:
    """Device-hours one more pair of step ``st`` is expected to cost: its last pair of two fresh runs, else its
    candidate's and the incumbent's runs as measured (:meth:`Campaign.pair_runs_cost`)."""
    made = [r.device_hours for r in st.runs if r.kind == "pair" and not r.reused and state.per_run(r) != r.device_hours]
    return made[-1] if made else state.pair_runs_cost(st, 2)


def st_pairs(st: Step) -> int:
    return sum(1 for r in st.runs if r.kind == "pair")


def _at_cap(state: Campaign, st: Step) -> bool:
    return st_pairs(st) >= state.max_pairs


def cut(state: Campaign, st: Step) -> Measurement | None:
    """The trial cut: *no gain* decided on the unpaired trial alone, or None (measure pairs). The trial is compared with the
    incumbent's last estimate; the difference of two single runs has the pair's sd, and only a clear *no* is taken."""
    trial = next((r for r in st.runs if r.kind == "trial" and r.outcome == "ok" and r.tps), None)
    if trial is None or trial.tps is None or not state.incumbent_tps:
        return None
    sd_run, df = pooled_run_sd(run_groups(state).values(), state.noise_prior_sd, state.noise_prior_df)
    if sd_run is None:
        return None
    est, lo, hi = interval([math.log(trial.tps / state.incumbent_tps)], math.sqrt(2.0) * sd_run, df, state.confidence)
    band = state.band.band if state.band is not None else 0.0
    if hi >= state.min_gain or est > -band:  # and clearly slower: one trial hit by a transient slowdown decides nothing
        return None
    return Measurement(
        estimate=est,
        lo=lo,
        hi=hi,
        confidence=state.confidence,
        min_gain=state.min_gain,
        pairs=0,
        sigma=math.sqrt(2.0) * sd_run,
        df=df,
        decision="no_gain",
        cut=True,
        rule=rule_text(state),
        why=f"cut on the trial (unpaired, against the incumbent's {state.incumbent_tps:,.0f} tok/s): upper end {hi:+.1%} "
        f"is below the minimum gain {share(state.min_gain)}",
    )
