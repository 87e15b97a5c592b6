"""How a campaign is set up: its id, its first state, and how it measures on each kind of machine."""

from __future__ import annotations

import time
from typing import Any

from bot.core.recipe import Recipe
from bot.core.state import Campaign


def new_campaign_id(recipe: Recipe) -> str:
    return f"{recipe.name.replace('/', '-')}-{time.strftime('%Y%m%d-%H%M%S')}"


SIM_MEASURE_STEPS = 4  # the simulator's measurement window (steps after the warm-up; see measurement_options)
# the simulated machine's run-to-run noise: the sd of one run's log tokens/s (the median of its 4-step window) over
# 20,000 simulated runs, 1.40 % (a 15-step median: 1.25 %), counted as 8 repeat runs' worth of evidence
SIM_RUN_SD = 0.014
SIM_RUN_SD_DF = 8


def measurement_options(launcher: str) -> dict[str, Any]:
    """How a campaign measures on this kind of machine (``Campaign`` fields; the protocol is :mod:`.measure`).

    The minimum worthwhile gain is set near the noise a machine kind shows, so a gain that clears it is worth a
    merge and the pairs it takes stay few: ``sim`` (simulated GPU cluster, 1-3 % run-to-run, perfmodel.md §5) 0.5 %:
    the smallest round value at which the sequential rule's false-gain rate in A-vs-A comparisons stays within 5 %
    (``attune bench measure``'s simulated part, 4,000 comparisons each on seeds 1, 2 and 3, with the noise prior
    below: 0.75 % -> 2.3 %; 0.5 % -> 4.3, 4.2, 4.7 %; 0.4 % -> 4.8 %; true +3 % gains detected 86 % -> 90 %, +2 %
    51 % -> 61 %). Before the prior the same rule gave 0.75 % (0.5 % -> 6.4 %). At 1 % the +4 % steps of GLM-4.5's
    optimum (pipeline schedule, microbatch) took up to 4 pairs and were lost to the budget in some seeds: 97.3 % of
    the oracle over 8 seeds, 98.0 % at 0.75 %. With the prior, 0.75 % -> 0.5 % took the tuner benchmark's dev tasks
    (attune, 5 seeds) deepseek-v3 87.1 -> 90.1 % of the oracle, glm-4.5 778 -> 750 device-hours, minimax-m2 204 ->
    195, and 14 scratch tasks +0.5 points of the oracle on average (qwen3-235b on 128 B200 -4.0, deepseek-v3 on 128
    B200 +6.6), no false gain;
    ``slurm`` (GPU clusters, same 1-3 %) 2 %; ``local`` (this kind of shared CPU box: 5-20 % run-to-run, per-step
    tokens/s ranging 5x inside one run) 5 %. Confidence 90 % (two-sided: a one-sided 95 % bound decides) on all.

    **The measurement window** (``measure_steps``): every run's tokens/s is the median of that many steps after the
    warm-up, and a run that is only measured (a pair's runs, a repeat baseline run) stops there; the runs the gate
    reads (the first baseline run, trials) still run the recipe's ``bench.steps``. On the simulator (a run draws one
    offset of 1.2 %, perfmodel.md §5, and each step 1 % jitter with rare slow steps) a run's noise is mostly the
    offset, so more steps buy little and cost every step. ``attune bench measure --sim-only --sim-trials 8000
    --sim-seed 1 --sim-windows 1,2,3,4,5,15`` (steps per +3 % decision counting the trial's 20 and each later run's
    warm-up and window) gave all 15 steps: false gains 4.5 %, +3 % detected 92.4 %, 121 steps; 5: 5.3 %, 89.8 %, 73;
    **4: 4.9 %, 88.5 %, 68.5**; 3: 5.1 %, 86.9 %, 65; 1-2: 6.4-6.8 %, 77 % (a median of one or two steps keeps a
    slow step).
    4 is the shortest window within the 5 % false-gain target; on the tuner benchmark (attune, 8 seeds, before the
    memory screen) the 3- and 5-step windows took GLM-4.5 from 1,056 device-hours to 799 and 928, at 98.7 % of the
    oracle (98.0 % before). ``local`` keeps every step: there the
    per-step spread inside one run (5x) is what a run's median averages away. ``slurm`` and GitHub runners keep
    every step too (no evidence yet on those machines).

    **The noise prior** (``noise_prior_sd``, ``noise_prior_df``; :func:`bot.campaign.measure.pooled_run_sd`): where a
    machine kind's run-to-run noise is known, it enters the pooled variance as that many degrees of freedom, so the
    first steps are not decided on a noise estimate of one or two degrees of freedom (a campaign's first steps had
    df 1-2 and estimates from 0.2 % to 1.7 % for the same 1.4 % noise). ``sim`` only: its noise is modelled, and
    measured (1.40 %, ``SIM_RUN_SD``); 8 degrees of freedom, so a campaign's own repeats outweigh it after about as
    many runs. On ``attune bench measure --sim-only --sim-trials 4000 --sim-seed 1`` false gains went 4 -> 2 %,
    +3 % detected 83 -> 86 %, runs per +10 % decision 3.0 -> 2.0; on the tuner benchmark (attune, 5
    seeds) it cut llama3.1-405b 521 -> 430 device-hours, minimax-m2 263 -> 204, mixtral-8x22b 98 -> 86, and cost
    glm-4.5 687 -> 778 (its +2.5 % steps now need the pairs a 1.4 % noise asks; with df 1 some seeds had decided
    them on one pair on a lucky 0.2 % noise estimate). No prior elsewhere: this CPU box's noise ranges 5-20 % by
    load, and no measurements of Slurm or GitHub machines are in yet.

    **One baseline run where the noise is known** (``baseline_runs_wanted``; ``sim``): a second baseline run exists
    to estimate the noise, and with a prior it adds one degree of freedom to its 8 and moves the screen band not at all
    (two runs at 1.4 % differ by 1.6 % on average, twice that is under the 5 % floor); the one run is the first
    trial's pair-1 incumbent side as before. It cost every campaign a run of the 14 a task's budget holds: a recipe
    already at its optimum spent its set-up (2 runs, 14 %) and its no-gain allowance (22 %), up to 34 % of the budget
    (13 tasks set to their oracle optimum, 3 seeds: 19-34 %, two over the 30 % issue 15 allows); with one, 15-28 %
    (at most 29 %: one run and the allowance).
    ``attune bench measure --sim-only --sim-trials 4000 --sim-seed 1``: false gains 4 % either way, +3 % detected 90
    -> 89 %, +10 % 100 %. Elsewhere two or more: no prior.

    ``sim`` and ``local`` run everything on one machine, so the trial is pair 1's candidate run (the incumbent runs
    right after it) and a clearly slower trial stops early. ``local`` starts with one warm-up run (the first run after
    an idle spell is slow: clocks, caches) and three measured baseline runs, so the first pair already has a noise
    estimate with two degrees of freedom, and a gain there is decided on two pairs at least (one in each order: on
    this box a single pair kept a neutral change at +9.4 % that re-measured at -2.7 %). ``slurm``: a second job may land on other nodes, so both sides of every pair
    are fresh runs.
    """
    if launcher == "sim":
        return {"min_gain": 0.005, "max_pairs": 6, "pair_with_trial": True, "early_stop": True, "measure_steps": SIM_MEASURE_STEPS,
                "noise_prior_sd": SIM_RUN_SD, "noise_prior_df": SIM_RUN_SD_DF, "baseline_runs_wanted": 1}
    if launcher == "local":
        return {"min_gain": 0.05, "max_pairs": 4, "pair_with_trial": True, "baseline_warmup_runs": 1, "baseline_runs_wanted": 3,
                "min_pairs_for_gain": 2}
    if launcher == "slurm":
        return {"min_gain": 0.02, "max_pairs": 4}
    return {}


def github_measurement_options() -> dict[str, Any]:
    """How a campaign measures on self-hosted GitHub runners: a label names a pool of machines, so every pair runs
    both sides in one job on one machine (trial.yml's ``pair`` kind), never the trial against a later run elsewhere;
    a trial below the incumbent by twice the screen band stops early (twice: a runner from the pool may be slower
    than the one that measured the incumbent)."""
    return {"early_stop": True, "early_stop_k": 2.0, "pair_with_trial": False, "min_gain": 0.02, "max_pairs": 4}


def sim_run_cost(recipe: Recipe, *, seed: int = 0) -> float:
    """Device-hours the first run of a simulated recipe costs, from the simulator (a campaign's first run is the same
    draw: run 0 of ``seed``); 0 for a real recipe (no estimate before its first run)."""
    if recipe.cluster.launcher != "sim":
        return 0.0
    from bot.runner.sim import SimRunner

    return SimRunner(seed=seed).run(recipe, run_index=0).summary.device_hours


def new_state(recipe: Recipe, recipe_rel: str, *, budget: float, policy: str, campaign_id: str | None = None, **kw: Any) -> Campaign:
    """A campaign's first state. A simulated recipe's calibration makes no runs (its band is modelled): planned 0."""
    if recipe.cluster.launcher == "sim":
        kw.setdefault("calibration_runs_planned", 0)
    return Campaign(
        id=campaign_id or new_campaign_id(recipe), recipe_path=recipe_rel, recipe_id=recipe.name, policy=policy,
        devices=recipe.devices, usd_per_device_hour=recipe.cluster.usd_per_device_hour, budget=budget,
        baseline_levers=dict(recipe.levers), incumbent_levers=dict(recipe.levers), **kw,
    )
