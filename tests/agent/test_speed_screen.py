"""The speed screen: the analytic cost model skips an extrapolated move it predicts slower than the incumbent."""

from __future__ import annotations

from pathlib import Path

from campaign_fakes import MemoryRecords, new_state, space_fn

from bot import campaign as cm
from bot.agent.heuristic import HeuristicPolicy
from bot.agent.layout_jump import MIN_SAVING
from bot.agent.speed_screen import predicted_slower, predicted_tps
from bot.agent.stopping import patience_stop
from bot.core.diagnosis import diagnose
from bot.core.recipe import load_recipe
from bot.core.records import Change
from bot.runner.sim import SimRunner

RECIPE = Path(__file__).resolve().parents[2] / "bot/bench/tasks/llama3.1-70b/h100x64.yaml"
CP = "parallelism.context_parallel_degree"
LBS = "training.local_batch_size"


def test_a_layout_predicted_far_slower_is_screened_and_one_within_the_models_error_is_not() -> None:
    recipe = load_recipe(RECIPE)
    space, inc = space_fn(recipe), dict(recipe.levers)
    here = predicted_tps(space, inc)
    slow = {**inc, CP: 8}  # the 8192-token sequence over 8 ranks under TP 8: a third slower by the model
    there = predicted_tps(space, slow)
    assert here is not None and there is not None and 1.0 - there[0] / here[0] > MIN_SAVING
    why = predicted_slower(space, inc, slow)
    assert why is not None and f"{there[1]:.2f} s a step" in why and f"{here[1]:.2f} s" in why
    close = {**inc, LBS: 4}  # one accumulation split more: within the model's error
    assert predicted_tps(space, close) is not None and predicted_slower(space, inc, close) is None
    assert predicted_slower(space, inc, inc) is None


def test_nothing_is_screened_where_the_model_cannot_tell() -> None:
    recipe = load_recipe(RECIPE)
    # neither torchtitan (no such config) nor the zoo (no such model) knows it
    unknown = recipe.model_copy(
        update={"workload": recipe.workload.model_copy(update={"model": "no-such-model", "config": "no_such_config"})}
    )
    space = space_fn(recipe)
    space.recipe = unknown
    assert predicted_tps(space, dict(recipe.levers)) is None
    assert predicted_slower(space, dict(recipe.levers), {**recipe.levers, CP: 8}) is None


def test_nothing_is_screened_on_a_cpu_host() -> None:
    """The model's efficiencies are GPU figures: on the CPU recipe a retry the model puts 14 % slower still runs."""
    recipe = load_recipe(RECIPE.parents[4] / "recipes" / "llama3-tiny" / "cpu.yaml")
    space = space_fn(recipe)
    inc = {**recipe.levers, "activation_checkpoint": "none"}
    retry = {**inc, LBS: 2, "activation_checkpoint": "selective"}
    here, there = predicted_tps(space, inc), predicted_tps(space, retry)
    assert here is not None and there is not None and 1.0 - there[0] / here[0] > MIN_SAVING  # the model would screen it
    assert predicted_slower(space, inc, retry) is None


def _after_an_oom_of(levers_change: dict) -> tuple:
    recipe = load_recipe(RECIPE)
    record = SimRunner(seed=0).run(recipe)
    state = new_state(RECIPE.read_text()).model_copy(
        update={
            "phase": "stepping",
            "incumbent_tps": record.summary.tps_median,
            "baseline": [cm.RunRef.of(record, kind="baseline", ref="b1")],
        }
    )
    ((lever, value),) = levers_change.items()
    change = Change(
        lever=lever, before=state.incumbent_levers.get(lever), after=value, why="a probe", policy="heuristic"
    )
    step = cm.Step(
        n=1,
        change=change,
        state="closed",
        levers={**state.incumbent_levers, lever: value},
        runs=[cm.RunRef(kind="trial", n=1, outcome="oom", reason="out of memory", device_hours=1.0)],
    )
    return recipe, state.model_copy(update={"steps": [step]}), MemoryRecords({"b1": record}), record


def test_an_oom_retry_predicted_slower_is_proposed_with_its_prediction_and_not_proposed_again() -> None:
    recipe, state, records, record = _after_an_oom_of({CP: 8})
    space = space_fn(recipe)
    retry = HeuristicPolicy().propose(state, diagnose(record), [], space, records)
    # under full recompute a degree change that ran out of memory is retried with half the local batch first
    assert isinstance(retry, Change) and retry.stacked_on == 1 and retry.lever == LBS
    assert retry.predicted_slower.startswith("predicted slower") and retry.predicted_oom == ""
    screened = cm.Step(
        n=2,
        change=retry,
        state="closed",
        stacked_on=1,
        close_reason=f"no gain (predicted, not run): {retry.predicted_slower}",
        levers={**state.step(1).levers, retry.lever: retry.after},
    )
    after = state.model_copy(update={"steps": [*state.steps, screened]})
    nxt = HeuristicPolicy().propose(after, diagnose(record), [], space, records)
    assert not (isinstance(nxt, Change) and nxt.stacked_on == 2)  # nothing retries from a step that did not run
    assert not (isinstance(nxt, Change) and nxt.lever == LBS and nxt.after == retry.after and nxt.stacked_on == 1)


def test_patience_counts_a_screened_step_like_the_run_it_stands_in_for() -> None:
    recipe, state, records, record = _after_an_oom_of({CP: 8})
    kept = cm.Step(
        n=1,
        change=Change(lever=LBS, before=8, after=4, why="kept", policy="heuristic"),
        state="closed",
        kept=True,
        levers={**state.incumbent_levers, LBS: 4},
        runs=[cm.RunRef(kind="trial", n=1, outcome="ok", device_hours=0.01)],
    )

    def screened(n: int) -> cm.Step:
        ch = Change(
            lever=CP,
            before=1,
            after=2 * n,
            why="a notch further",
            policy="heuristic",
            predicted_slower="predicted slower: ...",
        )
        return cm.Step(n=n, change=ch, state="closed", levers={**kept.levers, CP: 2 * n})

    base = state.model_copy(update={"incumbent_step": 1, "incumbent_levers": kept.levers, "steps": [kept, screened(2)]})
    assert patience_stop(base) is None  # one step found nothing
    two = base.model_copy(update={"steps": [kept, screened(2), screened(3)]})
    stop = patience_stop(two)
    assert stop is not None and "the last 2 measured steps gained nothing" in stop
