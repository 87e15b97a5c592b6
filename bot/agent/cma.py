"""The ``cmaes`` baseline: optuna's CMA-ES sampler (the ``cmaes`` package) over the shared search space.

Every lever is encoded as the index of its value in the space's ordered legal values; CMA-ES with margin, warm
started at the recipe (the measured baseline told first), POPSIZE per generation. Suggestions are repaired to the
nearest legal untried layout as for TPE/GP (:mod:`bot.agent.samplers`); out-of-memory, refused and gate-failed
trials are told as infeasible. Stateless: the study is rebuilt by replaying the campaign's steps through the seeded
sampler. Why these choices: docs/agent-evidence.md.
"""

from __future__ import annotations

import random
import warnings
from typing import Any

from bot.agent.lessons import Lesson
from bot.agent.policy import LeverSpace, validate_change
from bot.agent.samplers import _as_change, repair
from bot.core import levers as catalog
from bot.core.diagnosis import Diagnosis
from bot.core.records import MEASURED_OUTCOMES, Change, RecordReader, Scalar, Stop
from bot.core.state import Campaign, Step

POPSIZE = 4
INFEASIBLE = 0.0  # told for an OOM, a refused layout or a failed gate: no throughput at all
MAX_ASKS = 50  # suggestions per proposal before giving up (each unrepairable one is told as infeasible)


def step_value(campaign: Campaign, st: Step) -> float | None:
    """What a step tells the sampler: its measured tokens/s, INFEASIBLE when it did not train the same thing or
    did not run, None when it was never tried (closed before its trial for the budget)."""
    trial = next((r for r in st.runs if r.kind == "trial"), None)
    if st.config_verdict is not None and not st.config_verdict.ok:
        return INFEASIBLE
    if trial is None:
        return None
    if trial.outcome in MEASURED_OUTCOMES and trial.tps:
        if trial.outcome == "ok" and st.verdict is not None and st.verdict.stage == "convergence" and not st.verdict.ok:
            return INFEASIBLE
        return float(trial.tps)
    return INFEASIBLE


class CmaEsPolicy:
    name = "cmaes"

    def __init__(self, seed: int = 0, popsize: int = POPSIZE) -> None:
        self.seed, self.popsize = seed, popsize

    def _encode(self, levers: LeverSpace, config: dict[str, Scalar]) -> dict[str, int]:
        eff = catalog.effective(config)
        out = {}
        for k, values in levers.values.items():
            out[k] = values.index(eff[k]) if eff.get(k) in values else len(values) // 2
        return out

    def propose(
        self, campaign: Campaign, diagnosis: Diagnosis, lessons: list[Lesson], levers: LeverSpace, records: RecordReader
    ) -> Change | Stop:
        _study, change = self.replay(campaign, levers)
        return (
            change if change is not None else Stop(why="CMA-ES found no untried legal configuration", policy=self.name)
        )

    def replay(self, campaign: Campaign, levers: LeverSpace) -> tuple[Any, Change | None]:
        """The study rebuilt from the campaign (the k-th proposal recomputed exactly as it was made, then told what
        step k measured) and the next proposal (None when no untried legal configuration is found)."""
        import optuna
        from optuna.distributions import BaseDistribution, IntDistribution

        optuna.logging.set_verbosity(optuna.logging.ERROR)
        dists: dict[str, BaseDistribution] = {k: IntDistribution(0, len(v) - 1) for k, v in levers.values.items()}
        x0 = self._encode(levers, campaign.baseline_levers)
        with (
            warnings.catch_warnings()
        ):  # x0 is deprecated in optuna 4.9 (source_trials instead), with_margin experimental
            warnings.simplefilter("ignore")
            sampler = optuna.samplers.CmaEsSampler(
                x0=x0,
                seed=self.seed,
                popsize=self.popsize,
                with_margin=True,
                n_startup_trials=0,
                warn_independent_sampling=False,
            )
        study = optuna.create_study(direction="maximize", sampler=sampler)
        if campaign.baseline_tps:
            study.add_trial(
                optuna.trial.create_trial(params=x0, distributions=dists, value=float(campaign.baseline_tps))
            )
        seen = [dict(sorted(campaign.baseline_levers.items()))]
        for k in range(len(campaign.steps) + 1):
            change, trial = self._next(study, dists, campaign, levers, seen, k)
            if k == len(campaign.steps):
                return study, change
            st = campaign.steps[k]
            seen.append(dict(sorted(st.levers.items())))
            value = step_value(campaign, st)
            if trial is None:
                continue
            if value is None:
                study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            else:
                study.tell(trial, value)
        raise AssertionError("unreachable")

    def _next(
        self,
        study: Any,
        dists: dict[str, Any],
        campaign: Campaign,
        levers: LeverSpace,
        seen: list[dict[str, Scalar]],
        k: int,
    ) -> tuple[Change | None, Any]:
        """The k-th proposal and the optuna trial it came from (told the step's measurement later): ask, decode,
        repair; a suggestion with no legal, untried layout near it is told as infeasible and asked again."""
        import optuna

        rng = random.Random(f"{self.seed}:{k}:repair")
        replay = k < len(campaign.steps)
        tried = [catalog.effective(c) for c in seen]
        for _ in range(MAX_ASKS):
            t = study.ask(dists)
            asked = {**campaign.baseline_levers, **{name: levers.values[name][i] for name, i in t.params.items()}}
            config = repair(levers, asked, rng, seen)
            if config is None or catalog.effective(config) in tried:
                study.tell(t, INFEASIBLE)  # no legal, untried layout near it: an infeasible observation
                continue
            if replay:  # this suggestion became step k; what it measured is told next
                return None, t
            why = "optuna CMA-ES suggestion" + ("" if config == asked else " (repaired to the nearest legal layout)")
            change = _as_change(campaign, config, self.name, why)
            if (
                change
                and validate_change(campaign, change, levers, allow_multi=True, check_prerequisites=False) is None
            ):
                return change, t
            study.tell(t, state=optuna.trial.TrialState.PRUNED)
        return None, None
