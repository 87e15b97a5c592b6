"""bot/agent/samplers.py: random search and optuna (TPE, GP) over the shared space, infeasible trials told as such."""

from __future__ import annotations

import pytest
from campaign_fakes import new_state, play, recipe_text, scripted, space_fn, table_rule

from bot.agent.policy import validate_change
from bot.agent.samplers import OptunaPolicy, RandomPolicy
from bot.core import levers as catalog
from bot.core.diagnosis import Diagnosis
from bot.core.recipe import parse_recipe_text
from bot.core.records import Change, FileRecords

RECORDS = FileRecords()  # the records these policies read: files on disk

OK = Diagnosis(outcome="ok", tps=1000.0)
HISTORY = [
    {"lever": "activation_checkpoint", "to": "none"},  # a gain, merged
    {"lever": "training.local_batch_size", "to": 8},  # out of memory
    {"lever": "loss.num_chunks", "to": 2},  # config gate rejects it
    {"lever": "training.gc_freq", "to": 10},  # no gain
    {"lever": "optimizer.implementation", "to": "foreach"},  # the loss curve diverges: convergence gate rejects it
]
RULE = table_rule(
    {(("training.local_batch_size", 8),): "oom", (("activation_checkpoint", "none"),): [1300.0, 1290.0]},
    [1000.0, 1010.0],
)


@pytest.fixture(scope="module")
def history():
    text = recipe_text()
    state = play(
        new_state(text, policy="tpe"),
        scripted(HISTORY),
        RULE,
        config_ok=lambda levers: levers.get("loss.num_chunks") != 2,
        convergence_ok=lambda levers: levers.get("optimizer.implementation") != "foreach",
    )
    assert [s.state for s in state.steps] == ["merged", "closed", "closed", "closed", "closed"]
    return state.model_copy(update={"phase": "stepping", "finish_reason": ""}), space_fn(parse_recipe_text(text))


def configs(state) -> list[dict]:
    return [catalog.effective(c) for c in [state.baseline_levers, *(s.levers for s in state.steps)]]


def check_proposal(state, space, change) -> dict:
    assert isinstance(change, Change), change
    config = catalog.effective({**state.incumbent_levers, **change.extra, change.lever: change.after})
    assert config not in configs(state)  # an untried configuration
    for lever, values in space.values.items():
        assert config[lever] in values  # from the shared space
    assert validate_change(state, change, space, allow_multi=True, check_prerequisites=False) is None
    return config


@pytest.mark.parametrize(
    "policy",
    [RandomPolicy(seed=3), OptunaPolicy("tpe", seed=3), OptunaPolicy("gp", seed=3)],
    ids=["random", "tpe", "gp"],
)
def test_samplers_propose_untried_configurations_from_the_space(policy, history) -> None:
    state, space = history
    change = policy.propose(state, OK, [], space, RECORDS)
    check_proposal(state, space, change)
    assert change.policy == policy.name
    # stateless: the same history gives the same proposal (a resumed campaign proposes the same thing)
    assert policy.propose(state, OK, [], space, RECORDS) == change


def test_random_search_keeps_proposing_new_configurations() -> None:
    text = recipe_text()
    policy = RandomPolicy(seed=1)
    state = play(
        new_state(text, policy="random", max_steps=12),
        lambda s: policy.propose(s, OK, [], space_fn(parse_recipe_text(text)), RECORDS),
        table_rule({}, [1000.0, 1010.0]),
    )
    assert len(state.steps) == 12
    seen = configs(state)
    assert len({repr(sorted(c.items())) for c in seen}) == len(seen)


@pytest.mark.parametrize("sampler", ["tpe", "gp"])
def test_oom_and_rejected_trials_are_told_as_infeasible(sampler: str, history) -> None:
    state, space = history
    study, dists = OptunaPolicy(sampler, seed=0).study(state, space)
    trials = study.trials
    assert len(trials) == 1 + len(state.steps)  # the baseline and every step that reached a verdict

    def trial_of(n: int):
        levers = catalog.effective(state.step(n).levers)
        return next(t for t in trials if all(t.params[k] == levers[k] for k in dists))

    for n, outcome in ((2, "oom"), (3, "invalid"), (5, "rejected")):
        t = trial_of(n)
        assert t.user_attrs == {"infeasible": 1.0, "outcome": outcome}
        assert t.system_attrs["constraints"] == [1.0]  # what the constrained samplers actually read
        assert t.value == 0.0
    for n in (1, 4):
        t = trial_of(n)
        assert t.user_attrs["infeasible"] == 0.0 and t.system_attrs["constraints"] == [0.0]
        assert t.value == state.step(n).runs[0].tps
    baseline = trials[0]
    assert baseline.user_attrs["infeasible"] == 0.0 and baseline.value == state.baseline_tps


def test_optuna_reads_the_infeasibility(history) -> None:
    optuna = pytest.importorskip("optuna")
    from optuna.samplers._tpe.sampler import _get_infeasible_trial_score

    state, space = history
    study, _ = OptunaPolicy("tpe", seed=0).study(state, space)
    scores = [_get_infeasible_trial_score(t) for t in study.trials]
    assert sorted(scores) == [0.0, 0.0, 0.0, 1.0, 1.0, 1.0]
    assert optuna.__version__
