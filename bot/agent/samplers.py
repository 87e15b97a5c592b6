"""Black-box baselines through the same loop and budget: random search and optuna (TPE, GP).

Each proposal is a whole configuration from the shared search space (:mod:`bot.agent.space`), the first differing
lever as ``lever`` and the rest ``extra``. Random search samples the legal configurations (rejection sampling); an
illegal TPE/GP suggestion is repaired to the nearest legal one, or told infeasible when none is within two levers.
Out-of-memory and invalid layouts are infeasible observations. Stateless: the study is rebuilt from the campaign's
history on every call.
"""

from __future__ import annotations

import itertools
import random

from bot.agent.lessons import Lesson
from bot.agent.policy import LeverSpace, validate_change
from bot.agent.space import layout_problem
from bot.core import levers as catalog
from bot.core.diagnosis import Diagnosis
from bot.core.records import MEASURED_OUTCOMES, Change, RecordReader, Scalar, Stop
from bot.core.state import Campaign


def _as_change(campaign: Campaign, config: dict[str, Scalar], policy: str, why: str) -> Change | None:
    current = catalog.effective(campaign.incumbent_levers)
    diff = {k: v for k, v in config.items() if current.get(k) != v}
    if not diff:
        return None
    (lever, value), *rest = diff.items()
    return Change(lever=lever, before=current.get(lever), after=value, extra=dict(rest), why=why, policy=policy)


def _tried_configs(campaign: Campaign) -> list[dict[str, Scalar]]:
    return [campaign.baseline_levers] + [s.levers for s in campaign.steps]


def repair(
    levers: LeverSpace,
    config: dict[str, Scalar],
    rng: random.Random,
    seen: list[dict[str, Scalar]],
    max_changes: int = 2,
) -> dict[str, Scalar] | None:
    """``config`` if legal, else the nearest legal, untried configuration (fewest levers changed), or None."""
    recipe = levers.recipe
    if layout_problem(recipe, config) is None and dict(sorted(config.items())) not in seen:
        return config
    names = list(levers.values)
    for n in range(1, max_changes + 1):
        combos = list(itertools.combinations(names, n))
        rng.shuffle(combos)
        for combo in combos:
            options = list(itertools.product(*(levers.values[k] for k in combo)))
            rng.shuffle(options)
            for vals in options:
                cand = {**config, **dict(zip(combo, vals, strict=True))}
                if cand == config or dict(sorted(cand.items())) in seen:
                    continue
                if layout_problem(recipe, cand) is None:
                    return cand
    return None


class RandomPolicy:
    name = "random"

    def __init__(self, seed: int = 0, max_draws: int = 20000) -> None:
        self.seed, self.max_draws = seed, max_draws

    def propose(
        self, campaign: Campaign, diagnosis: Diagnosis, lessons: list[Lesson], levers: LeverSpace, records: RecordReader
    ) -> Change | Stop:
        rng = random.Random(f"{self.seed}:{len(campaign.steps)}")
        seen = [dict(sorted(c.items())) for c in _tried_configs(campaign)]
        for _ in range(self.max_draws):
            config = {**campaign.baseline_levers, **{k: rng.choice(v) for k, v in levers.values.items()}}
            if dict(sorted(config.items())) in seen or layout_problem(levers.recipe, config) is not None:
                continue
            change = _as_change(campaign, config, self.name, "random search: a uniformly drawn legal configuration")
            if (
                change
                and validate_change(campaign, change, levers, allow_multi=True, check_prerequisites=False) is None
            ):
                return change
        return Stop(why="random search found no untried configuration", policy=self.name)


class OptunaPolicy:
    """Bayesian optimisation with optuna: TPE or a Gaussian process, constraint-aware."""

    def __init__(self, sampler: str = "tpe", seed: int = 0, n_startup: int = 4) -> None:
        self.sampler_name, self.seed, self.n_startup = sampler, seed, n_startup
        self.name = sampler

    def _sampler(self):
        import optuna

        kw = {}
        if int(optuna.__version__.split(".")[0]) < 5:
            # optuna < 5 reads the stored constraints only when a constraints_func is set (5 reads them always
            # and deprecates the argument); the values themselves are stored with each trial (system_attrs)
            kw["constraints_func"] = lambda t: [t.user_attrs.get("infeasible", 0.0)]
        if self.sampler_name == "gp":
            return optuna.samplers.GPSampler(seed=self.seed, n_startup_trials=self.n_startup, **kw)
        return optuna.samplers.TPESampler(seed=self.seed, n_startup_trials=self.n_startup, **kw)

    def study(self, campaign: Campaign, levers: LeverSpace):
        """The study rebuilt from the campaign's history: (study, distributions)."""
        import optuna
        from optuna.distributions import BaseDistribution, CategoricalDistribution

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        dists = {k: CategoricalDistribution(list(v)) for k, v in levers.values.items()}
        base_dists: dict[str, BaseDistribution] = dict(dists)  # what create_trial takes (its dict is invariant)
        study = optuna.create_study(direction="maximize", sampler=self._sampler())
        history = [(campaign.baseline_levers, campaign.baseline_tps, "ok")]
        for st in campaign.steps:
            trial = next((r for r in st.runs if r.kind == "trial"), None)
            outcome = (
                trial.outcome if trial else ("invalid" if st.config_verdict and not st.config_verdict.ok else None)
            )
            if outcome == "ok" and st.verdict is not None and st.verdict.stage == "convergence" and not st.verdict.ok:
                outcome = "rejected"  # it trains something else: as infeasible as an OOM
            if outcome is None:
                continue
            history.append((st.levers, trial.tps if trial else None, outcome))
        for config, tps, outcome in history:
            params = {k: config.get(k, catalog.effective(config)[k]) for k in dists}
            if any(params[k] not in dists[k].choices for k in dists):
                continue
            feasible = outcome in MEASURED_OUTCOMES and tps  # stopped early: measured slower, a real observation
            infeasible = 0.0 if feasible else 1.0
            study.add_trial(
                optuna.trial.create_trial(
                    params=params,
                    distributions=base_dists,
                    value=float(tps) if feasible and tps is not None else 0.0,
                    user_attrs={"infeasible": infeasible, "outcome": outcome},
                    system_attrs={"constraints": [infeasible]},  # what the constrained samplers read (> 0 = violated)
                )
            )
        return study, dists

    def propose(
        self, campaign: Campaign, diagnosis: Diagnosis, lessons: list[Lesson], levers: LeverSpace, records: RecordReader
    ) -> Change | Stop:
        import optuna

        study, dists = self.study(campaign, levers)
        seen = [dict(sorted(c.items())) for c in _tried_configs(campaign)]
        rng = random.Random(f"{self.seed}:{len(campaign.steps)}:repair")
        for _ in range(50):
            t = study.ask(dists)
            asked = {**campaign.baseline_levers, **t.params}
            config = repair(levers, asked, rng, seen)
            if config is None:
                # no legal configuration within two levers of the suggestion: an infeasible observation
                study._storage.set_trial_system_attr(t._trial_id, "constraints", (1.0,))
                t.set_user_attr("infeasible", 1.0)
                study.tell(t, 0.0)
                continue
            why = f"optuna {self.sampler_name.upper()} suggestion" + (
                "" if config == asked else " (repaired to the nearest legal layout)"
            )
            change = _as_change(campaign, config, self.name, why)
            if (
                change
                and validate_change(campaign, change, levers, allow_multi=True, check_prerequisites=False) is None
            ):
                return change
            study.tell(t, state=optuna.trial.TrialState.PRUNED)
        return Stop(why=f"{self.sampler_name} found no untried configuration", policy=self.name)
