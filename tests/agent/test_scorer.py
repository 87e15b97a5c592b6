"""The one score: the cost model's saving weighted by how it reproduced the kept steps, the diagnosis prior the rest."""

from __future__ import annotations

from pathlib import Path

from campaign_fakes import new_state, space_fn

from bot.agent.heuristic.explain import prediction, saw
from bot.agent.heuristic.scorer import (
    BLIND_PRIOR,
    PRIOR_CREDIBILITY,
    credibility,
    model_saving,
    prior_saving,
    score,
)
from bot.agent.lessons import load_lessons
from bot.campaign.report import expectation
from bot.core import levers as catalog
from bot.core.diagnosis import Diagnosis
from bot.core.recipe import load_recipe
from bot.core.records import Change
from bot.core.state import Step

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "bot/bench/tasks/llama3.1-70b/h100x64.yaml"
LBS = "training.local_batch_size"
AC = "activation_checkpoint"


def _campaign_with_kept(gain: float, lever: str = LBS, value: object = 4):
    recipe = load_recipe(RECIPE)
    state = new_state(RECIPE.read_text())
    levers = {**recipe.levers, lever: value}
    step = Step(
        n=1,
        change=Change(lever=lever, **{"from": recipe.levers[lever], "to": value}),
        levers=levers,
        state="merged",
        gain=gain,
        kept=True,
    )
    return state.model_copy(update={"steps": [step], "incumbent_levers": levers, "incumbent_step": 1}), recipe


def test_the_cost_model_answers_on_a_gpu_and_not_on_a_cpu_host() -> None:
    recipe = load_recipe(RECIPE)
    inc = catalog.effective(recipe.levers)
    m = model_saving(space_fn(recipe), inc, {**inc, LBS: 4})
    assert m is not None and -1.0 < m < 1.0
    cpu = load_recipe(ROOT / "recipes/llama3-tiny/cpu.yaml")
    here = catalog.effective(cpu.levers)
    assert model_saving(space_fn(cpu), here, {**here, AC: "none"}) is None


def test_credibility_follows_how_well_the_model_reproduced_the_kept_steps() -> None:
    recipe = load_recipe(RECIPE)
    space = space_fn(recipe)
    assert credibility(new_state(RECIPE.read_text()), space) == PRIOR_CREDIBILITY  # nothing kept yet
    predicted = model_saving(space, catalog.effective(recipe.levers), catalog.effective({**recipe.levers, LBS: 4}))
    assert predicted is not None
    exact_gain = 1.0 / (1.0 - predicted) - 1.0
    right, _ = _campaign_with_kept(exact_gain)
    wrong, _ = _campaign_with_kept(exact_gain + 0.5)
    assert credibility(right, space) > 0.99
    assert credibility(wrong, space) < 0.5


def test_a_kept_step_the_model_has_no_term_for_leaves_credibility_at_its_prior() -> None:
    space = space_fn(load_recipe(RECIPE))
    compiled, _ = _campaign_with_kept(0.15, "compile.enable", True)  # the model predicts compile saves nothing
    assert credibility(compiled, space) == PRIOR_CREDIBILITY


def test_the_prior_is_half_the_measured_cost_a_change_is_aimed_at() -> None:
    diag = Diagnosis(outcome="ok", breakdown={"compute": 0.6, "recompute": 0.3, "exposed_comm": 0.1})
    assert prior_saving(Change(lever=AC, **{"from": "full", "to": "selective"}), diag) == (
        0.15,
        "recompute",
        "diagnosis",
    )
    assert prior_saving(Change(lever="training.gc_freq", **{"from": 50, "to": 100}), diag) == (BLIND_PRIOR, "", "blind")


def test_a_lessons_measured_gain_and_a_line_searchs_last_notch_are_priors_too() -> None:
    lessons = {x.id: x for x in load_lessons()}
    compile_on = Change(
        lever="compile.enable", **{"from": False, "to": True}, lessons=["cpu-compile-large-microbatches"]
    )
    prior, _, basis = prior_saving(compile_on, Diagnosis(outcome="ok"), lessons)
    assert basis == "lesson" and abs(prior - (1 - 1 / 1.12)) < 1e-9
    state, _ = _campaign_with_kept(0.25)  # local batch 8 -> 4 kept at +25 %
    further = Change(lever=LBS, **{"from": 4, "to": 2})
    back = Change(lever=LBS, **{"from": 4, "to": 8})
    prior, _, basis = prior_saving(further, None, None, state)
    assert basis == "momentum" and abs(prior - 0.5 * 0.2) < 1e-9
    assert prior_saving(back, None, None, state)[2] == "blind"


def test_a_larger_predicted_saving_ranks_higher_and_the_blend_follows_credibility() -> None:
    state, recipe = _campaign_with_kept(0.05)
    space = space_fn(recipe)
    diag = Diagnosis(outcome="ok", breakdown={"compute": 0.7, "recompute": 0.3})
    less = Change(lever=AC, **{"from": recipe.levers[AC], "to": "none"})
    s_trusted = score(state, space, diag, less, trust=1.0)
    s_doubted = score(state, space, diag, less, trust=0.0)
    assert s_trusted.model_saving is not None and s_trusted.saving == s_trusted.model_saving
    assert s_doubted.saving == s_doubted.prior_saving
    blind = Change(lever="training.gc_freq", **{"from": 50, "to": 100})
    assert score(state, space, diag, blind, trust=0.0).value < s_doubted.value


def test_the_report_sentence_says_what_was_seen_the_move_and_prediction_beside_the_result() -> None:
    diag = Diagnosis(
        outcome="ok", breakdown={"compute": 0.55, "recompute": 0.31, "exposed_comm": 0.14}, mem_headroom_frac=0.4
    )
    assert saw(diag) == "recompute is 31% of the step, exposed communication 14% and memory has 40% headroom"
    state, recipe = _campaign_with_kept(0.05)
    change = Change(lever=AC, **{"from": recipe.levers[AC], "to": "none"})
    p = prediction("less-recompute", diag, score(state, space_fn(recipe), diag, change, trust=0.0))
    text = expectation(p, 0.131)
    assert text.startswith("The diagnosis saw recompute is 31% of the step")
    assert "`less-recompute` move acted on it: predicted +" in text and "measured +13.1%" in text
