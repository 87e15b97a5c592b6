"""How a campaign measures on each kind of machine: the ``Campaign`` measurement settings per launcher and for
self-hosted GitHub runners (a new campaign's id and first state: :mod:`.new_campaign`)."""

from __future__ import annotations

from typing import Any

SIM_MEASURE_STEPS = 4  # the simulator's measurement window (steps after the warm-up; see measurement_options)
# the simulated machine's run-to-run noise (the sd of one run's log tokens/s over its window), counted as 8 repeat
# runs' worth of evidence (docs/agent-evidence.md)
SIM_RUN_SD = 0.014
SIM_RUN_SD_DF = 8


def measurement_options(launcher: str) -> dict[str, Any]:
    """How a campaign measures on this kind of machine (``Campaign`` fields; the protocol is :mod:`.measure`).

    The minimum worthwhile gain sits near the machine kind's noise: ``sim`` 0.5 %, ``slurm`` 2 %, ``local`` 5 %, at
    90 % confidence. ``sim`` measures a window of SIM_MEASURE_STEPS steps, counts its modelled noise as a prior of
    SIM_RUN_SD_DF degrees of freedom and makes one baseline run; ``local`` warms up once and makes three baseline
    runs and decides a gain on two pairs at least. ``sim`` and ``local`` pair the trial with the incumbent's next run;
    ``slurm`` runs both sides of every pair fresh. Why each setting, and its measurements: docs/agent-evidence.md."""
    if launcher == "sim":
        return {
            "min_gain": 0.005,
            "max_pairs": 6,
            "pair_with_trial": True,
            "early_stop": True,
            "measure_steps": SIM_MEASURE_STEPS,
            "noise_prior_sd": SIM_RUN_SD,
            "noise_prior_df": SIM_RUN_SD_DF,
            "baseline_runs_wanted": 1,
        }
    if launcher == "local":
        return {
            "min_gain": 0.05,
            "max_pairs": 4,
            "pair_with_trial": True,
            "baseline_warmup_runs": 1,
            "baseline_runs_wanted": 3,
            "min_pairs_for_gain": 2,
        }
    if launcher == "slurm":
        return {"min_gain": 0.02, "max_pairs": 4}
    return {}


def github_measurement_options() -> dict[str, Any]:
    """How a campaign measures on self-hosted GitHub runners: a label names a pool of machines, so every pair runs
    both sides in one job on one machine (trial.yml's ``pair`` kind), never the trial against a later run elsewhere;
    a trial below the incumbent by twice the throughput band stops early (twice: a runner from the pool may be slower
    than the one that measured the incumbent)."""
    return {"early_stop": True, "early_stop_k": 2.0, "pair_with_trial": False, "min_gain": 0.02, "max_pairs": 4}
