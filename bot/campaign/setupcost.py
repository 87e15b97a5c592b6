"""What a campaign's set-up costs (its baseline and gate-calibration runs), and how it is fitted to the budget.

Pure: :func:`fit_setup` reads a ``Campaign`` and answers what to change; the state machine applies it before the
set-up starts (with a run-cost estimate: the simulator's, :func:`sim_run_cost`) and after every baseline run (the runs so far are the
estimate: :meth:`Campaign.expected_run_cost`), and ``attune campaign run`` calls it before anything is written.

The set-up must leave room for one trial: a budget spent on measuring the baseline tries nothing. Where the runs
left of it and one trial do not fit what is left, the set-up is scaled, in this order, only as far as the statistics
still hold: the warm-up run is left out (before it ran); the measured baseline runs go down to the fewest a noise
estimate needs (two; one where the machine kind's run noise is known); then the gate's calibration is left out (no
loss band: tier-R/N steps fail closed, as after a failed calibration). A set-up that does not fit even so is refused,
naming the smallest budget that holds it and one trial.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from bot.core.recipe import Recipe
from bot.core.state import Campaign

CALIBRATION_RUNS_MAX = 4  # the gate's calibration runs at most: a repeat, an init perturbation, a GA split, loss chunks


class SetupFit(NamedTuple):
    """What :func:`fit_setup` answers: the ``Campaign`` fields to set (empty: as planned), what was scaled (one line,
    "" when nothing), and when the set-up does not fit even scaled, why (one line) and the smallest budget that holds
    it and one trial."""

    updates: dict[str, Any]
    note: str = ""
    refusal: str = ""
    smallest_budget: float = 0.0


def calibration_runs_left(s: Campaign) -> int:
    """Fresh runs the gate's calibration will still make: none once calibrated or for a simulated recipe (modelled);
    the planned count; else (a state stored before the plan) the most it makes."""
    if s.calibrated:
        return 0
    if s.calibration_runs_planned is not None:
        return s.calibration_runs_planned
    return 0 if s.baseline and s.baseline[0].simulated else CALIBRATION_RUNS_MAX


def baseline_runs_left(s: Campaign) -> int:
    """Baseline runs still to make (warm-up runs included)."""
    if s.band is not None:
        return 0
    return max(0, s.baseline_warmup_runs + s.baseline_runs_wanted - len(s.baseline))


def setup_runs_left(s: Campaign) -> int:
    return baseline_runs_left(s) + calibration_runs_left(s)


def _fits(s: Campaign, cost: float) -> bool:
    return s.spent + (setup_runs_left(s) + 1) * cost <= s.budget + 1e-9  # float sums: a named smallest budget fits


def _ceil4(x: float) -> float:
    """``x`` rounded up at four significant digits (a budget named as the smallest must hold the set-up)."""
    if x <= 0:
        return 0.0
    scale: float = 10 ** (3 - math.floor(math.log10(x)))
    return math.ceil(x * scale - 1e-9) / scale


def _runs(n: int, what: str) -> str:
    return f"{n} {what} run{'' if n == 1 else 's'}"


def fit_setup(s: Campaign) -> SetupFit:
    """Whether the set-up left and one trial fit what is left of the budget, scaled where needed (module docstring).
    With no run-cost estimate yet (a real recipe before its first run) nothing is known: as planned."""
    # the runs so far (their largest plus 10 %), or before any the estimate plus the same 10 %: the trial after the
    # set-up is then checked against the same margin (Campaign.next_run_fits)
    cost = s.expected_run_cost() * (1.0 if s.baseline else 1.1)
    if cost <= 0 or setup_runs_left(s) == 0 or _fits(s, cost):
        return SetupFit(updates={})
    before = (baseline_runs_left(s), calibration_runs_left(s))
    t = s.model_copy()
    notes: list[str] = []
    if t.baseline_warmup_runs > len(t.baseline):
        t.baseline_warmup_runs = len(t.baseline)
        notes.append("no warm-up run")
    fewest = max(1 if t.known_run_sd is not None else 2, len(t.baseline) - t.baseline_warmup_runs)
    wanted = t.baseline_runs_wanted
    while not _fits(t, cost) and t.band is None and t.baseline_runs_wanted > fewest:
        t.baseline_runs_wanted -= 1
    if t.baseline_runs_wanted < wanted:
        notes.append(f"{t.baseline_runs_wanted} measured baseline runs, not {wanted}")
    cal = calibration_runs_left(t)
    if not _fits(t, cost) and cal > 0:
        t.calibration_runs_planned, t.calibrated = 0, True
        t.calibration_note = (
            f"no loss band: the budget does not hold the gate's {_runs(cal, 'calibration')} "
            f"(~{cal * cost:.4g} device-hours); tier-R/N steps fail closed"
        )
        notes.append(f"no gate calibration ({_runs(cal, 'calibration')} left out: tier-R/N steps fail closed)")
    if not _fits(t, cost):
        runs = setup_runs_left(t) + 1
        smallest = _ceil4(s.spent + runs * cost)
        what = ", ".join(
            x
            for x in (
                _runs(before[0], "baseline") if before[0] else "",
                _runs(before[1], "calibration") if before[1] else "",
            )
            if x
        )
        refusal = (
            f"budget: the set-up left ({what}) and one trial, ~{cost:.4g} device-hours a run, do not fit the "
            f"{s.budget - s.spent:.4g} device-hours left, even scaled down to {_runs(runs - 1, 'set-up')}; the "
            f"smallest budget that holds them is {smallest:g} device-hours"
        )
        return SetupFit(updates={}, refusal=refusal, smallest_budget=smallest)
    note = "set-up scaled to fit the budget: " + "; ".join(notes)
    fields = (
        "baseline_warmup_runs",
        "baseline_runs_wanted",
        "calibration_runs_planned",
        "calibrated",
        "calibration_note",
    )
    updates = {f: getattr(t, f) for f in fields if getattr(t, f) != getattr(s, f)}
    updates["setup_note"] = f"{s.setup_note}; {note}" if s.setup_note else note
    return SetupFit(updates=updates, note=note)


def sim_run_cost(recipe: Recipe, *, seed: int = 0) -> float:
    """Device-hours the first run of a simulated recipe costs, from the simulator (a campaign's first run is the same
    draw: run 0 of ``seed``); 0 for a real recipe (no estimate before its first run)."""
    if recipe.cluster.launcher != "sim":
        return 0.0
    from bot.runner.sim import SimRunner

    return SimRunner(seed=seed).run(recipe, run_index=0).summary.device_hours
