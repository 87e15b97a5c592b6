"""The screen check: a change the memory screen ruled out is measured once before a campaign with a gain stops."""

from __future__ import annotations

from pathlib import Path

from campaign_fakes import MemoryRecords, new_state, space_fn

from bot import campaign as cm
from bot.agent.heuristic import HeuristicPolicy
from bot.agent.heuristic.move import Context
from bot.agent.heuristic.screen_check import ScreenCheck
from bot.agent.memory_screen import SCREEN_CHECK_LESSON
from bot.core.diagnosis import diagnose
from bot.core.recipe import load_recipe
from bot.core.records import Change, Scalar
from bot.runner.sim import SimRunner

RECIPE = Path(__file__).resolve().parents[2] / "bot/bench/tasks/llama3.1-70b/h100x64.yaml"
AC = "activation_checkpoint"


def _screened(n: int, levers: dict[str, Scalar], value: Scalar) -> cm.Step:
    """Step ``n``: ``activation_checkpoint`` -> ``value`` from ``levers``, predicted to run out of memory, not run."""
    why = "predicted to run out of memory: 200 GiB (the measured 60 GiB x the memory model's 3.33) is over ..."
    return cm.Step(
        n=n,
        change=Change(lever=AC, before=levers.get(AC, "full"), after=value, predicted_oom=why),
        state="closed",
        levers={**levers, AC: value},
        runs=[cm.RunRef(kind="trial", n=n, outcome="oom", reason=f"not run: {why}")],
    )


def _campaign(*, kept: bool = True, budget_runs: float = 20.0, real_oom: bool = False):
    """A campaign with a kept compile step (or none), then recompute off ruled out by the screen from the incumbent."""
    recipe = load_recipe(RECIPE)
    base = SimRunner(seed=0).run(recipe)
    levers = dict(recipe.levers)
    records = {"b1": base}
    state = new_state(RECIPE.read_text(), budget=budget_runs * base.summary.device_hours).model_copy(
        update={
            "phase": "stepping",
            "incumbent_tps": base.summary.tps_median,
            "baseline": [cm.RunRef.of(base, kind="baseline", ref="b1")],
            "spent": base.summary.device_hours,
        }
    )
    steps = []
    if kept:
        levers = {**levers, "compile.enable": True}
        trial = SimRunner(seed=1).run(recipe.model_copy(update={"levers": levers}))
        records["t1"] = trial
        steps.append(
            cm.Step(
                n=1,
                change=Change(lever="compile.enable", before=False, after=True),
                state="merged",
                levers=levers,
                runs=[cm.RunRef.of(trial, kind="trial", n=1, ref="t1")],
                gain=0.08,
                kept=True,
            )
        )
    steps.append(_screened(len(steps) + 1, levers, "none"))
    if real_oom:
        oom = SimRunner(seed=2).run(recipe.model_copy(update={"levers": {**levers, AC: "none"}}))
        assert oom.outcome == "oom"
        records["t9"] = oom
        steps.append(
            cm.Step(
                n=len(steps) + 1,
                change=Change(lever=AC, before="full", after="none"),
                state="closed",
                levers={**levers, AC: "none"},
                runs=[cm.RunRef.of(oom, kind="trial", n=len(steps) + 1, ref="t9")],
            )
        )
    state = state.model_copy(
        update={
            "steps": steps,
            "incumbent_levers": levers,
            "incumbent_step": 1 if kept else 0,
            "incumbent_tps": (records["t1"] if kept else base).summary.tps_median,
        }
    )
    space = space_fn(recipe)
    rec = MemoryRecords(records)
    d = diagnose(records["t1"] if kept else base)
    return state, space, rec, Context(state, d, [], space, rec, d)


def test_the_screened_change_is_proposed_again_on_the_incumbent_with_the_prediction_it_tests() -> None:
    state, *_, ctx = _campaign()
    change = ScreenCheck().propose(ctx)
    assert change is not None and (change.lever, change.after) == (AC, "none")
    assert change.lessons == [SCREEN_CHECK_LESSON] and change.stacked_on is None
    assert "the memory screen rules this out, predicting" in change.why
    assert "of the budget is unspent" in change.why


def test_the_policy_runs_the_check_instead_of_screening_it_again() -> None:
    """Proposed by the policy (the only move left in this space), it carries no prediction of its own OOM."""
    state, space, records, ctx = _campaign()
    space.values = {AC: ["full", "none"]}  # no retry of the screened change is left
    decision = HeuristicPolicy().propose(state, ctx.diagnosis, [], space, records)
    assert isinstance(decision, Change) and decision.lever == AC and decision.after == "none"
    assert decision.prediction is not None and decision.prediction.move == "screen-check"
    assert decision.predicted_oom == ""


def test_no_check_without_a_gain_in_hand_once_done_after_a_real_oom_or_without_the_budget_for_it() -> None:
    assert ScreenCheck().propose(_campaign(kept=False)[-1]) is None  # the no-gain allowance governs there
    assert ScreenCheck().propose(_campaign(real_oom=True)[-1]) is None  # a run measured what the screen said
    assert ScreenCheck().propose(_campaign(budget_runs=3.0)[-1]) is None  # under three runs' device-hours left
    state, space, records, ctx = _campaign()
    done = ScreenCheck().propose(ctx)
    assert done is not None
    checked = cm.Step(
        n=len(state.steps) + 1,
        change=done,
        state="closed",
        levers={**state.incumbent_levers, AC: "full"},
    )
    again = state.model_copy(
        update={"steps": [*state.steps, checked, _screened(len(state.steps) + 2, state.incumbent_levers, "selective")]}
    )
    assert ScreenCheck().propose(Context(again, ctx.diagnosis, [], space, records, ctx.incumbent)) is None
