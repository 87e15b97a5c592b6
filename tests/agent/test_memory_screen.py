"""The memory screen: a measured peak scaled by the analytic memory model predicts an out-of-memory before a run."""

from __future__ import annotations

from pathlib import Path

import pytest
from campaign_fakes import MemoryRecords, new_state, space_fn

from bot import campaign as cm
from bot.agent.heuristic import HeuristicPolicy
from bot.agent.heuristic.follow_up import fix_for
from bot.agent.memory_screen import MARGIN, predicted_oom
from bot.core.diagnosis import diagnose
from bot.core.recipe import load_recipe
from bot.core.records import Change
from bot.runner.sim import SimRunner
from bot.sim.simulate import evaluate

RECIPE = Path(__file__).resolve().parents[2] / "bot/bench/tasks/llama3.1-70b/h100x64.yaml"


def _campaign(strip_peak: bool = False):
    recipe = load_recipe(RECIPE)
    record = SimRunner(seed=0).run(recipe)
    if strip_peak:  # a machine that reports no memory (a CPU run)
        record = record.model_copy(update={"summary": record.summary.model_copy(update={"peak_memory_gib": None})})
    state = new_state(RECIPE.read_text()).model_copy(
        update={
            "phase": "stepping",
            "incumbent_tps": record.summary.tps_median,
            "baseline": [cm.RunRef.of(record, kind="baseline", ref="b1")],
        }
    )
    return recipe, state, MemoryRecords({"b1": record}), record


def _sim_peak(recipe, levers: dict) -> float:
    c = recipe.cluster
    res = evaluate(
        recipe.workload.model,
        c.hardware,
        c.nodes,
        c.devices_per_node,
        levers,
        dict(recipe.pinned),
        0,
        check_memory=False,
    )
    return res.peak_memory_gib


def test_a_layout_far_over_the_device_is_predicted_to_run_out_and_one_that_fits_is_not() -> None:
    recipe, state, records, record = _campaign()
    space = space_fn(recipe)
    capacity = record.summary.memory_capacity_gib
    far = {**state.incumbent_levers, "activation_checkpoint": "none"}  # full recompute off on a 70B model
    why = predicted_oom(state, far, None, space, records)
    assert why is not None and why.startswith("predicted to run out of memory")
    assert _sim_peak(recipe, far) > capacity * (1 + MARGIN)  # and the simulator agrees it cannot fit
    fits = {**state.incumbent_levers, "compile.enable": True}
    assert predicted_oom(state, fits, None, space, records) is None
    assert _sim_peak(recipe, fits) <= capacity


def test_nothing_is_screened_without_a_measured_peak_or_a_model_the_cost_model_knows() -> None:
    recipe, state, records, _ = _campaign(strip_peak=True)
    far = {**state.incumbent_levers, "activation_checkpoint": "none"}
    assert predicted_oom(state, far, None, space_fn(recipe), records) is None
    unknown = load_recipe(Path(__file__).resolve().parents[2] / "recipes/llama3-tiny/cpu.yaml")
    _, state2, records2, _ = _campaign()
    assert (
        predicted_oom(
            state2,
            far,
            None,
            space_fn(
                unknown.model_copy(update={"workload": unknown.workload.model_copy(update={"model": "no-such-model"})})
            ),
            records2,
        )
        is None
    )


def test_a_retry_is_anchored_on_the_peak_of_the_run_it_retries() -> None:
    """Stacked on a failed trial, the prediction scales that trial's measured peak, not the incumbent's."""
    recipe, state, records, record = _campaign()
    space = space_fn(recipe)
    oom_levers = {**state.incumbent_levers, "activation_checkpoint": "none"}
    oom = SimRunner(seed=1).run(recipe.model_copy(update={"levers": oom_levers}))
    assert oom.outcome == "oom" and oom.summary.peak_memory_gib
    step = cm.Step(
        n=1,
        change=Change(lever="activation_checkpoint", before="full", after="none"),
        state="closed",
        levers=oom_levers,
        runs=[cm.RunRef.of(oom, kind="trial", n=1, ref="t1")],
    )
    state = state.model_copy(update={"steps": [step]})
    records.records["t1"] = oom
    again = predicted_oom(state, oom_levers, 1, space, records)  # the failed layout itself: its own peak, x 1.00
    assert (
        again is not None and f"the measured {oom.summary.peak_memory_gib:.0f} GiB x the memory model's 1.00" in again
    )
    on_incumbent = predicted_oom(state, oom_levers, None, space, records)
    assert on_incumbent is not None and f"the measured {record.summary.peak_memory_gib:.0f} GiB" in on_incumbent


def test_the_policy_proposes_a_screened_change_with_its_prediction_and_then_retries_from_it() -> None:
    recipe, state, records, record = _campaign()
    space = space_fn(recipe)
    space.values = {k: space.values[k] for k in ("activation_checkpoint", "parallelism.context_parallel_degree")}
    first = HeuristicPolicy().propose(state, diagnose(record), [], space, records)
    assert isinstance(first, Change) and first.lever == "activation_checkpoint"
    assert first.predicted_oom.startswith("predicted to run out of memory")
    step = cm.Step(
        n=1,
        change=first,
        state="closed",
        levers={**state.incumbent_levers, first.lever: first.after},
        runs=[cm.RunRef(kind="trial", n=1, outcome="oom", reason=f"not run: {first.predicted_oom}")],
    )
    retry = HeuristicPolicy().propose(state.model_copy(update={"steps": [step]}), diagnose(record), [], space, records)
    assert isinstance(retry, Change) and retry.stacked_on == 1  # the out-of-memory retry, as after a failed start


@pytest.mark.parametrize("lever, value", [("compile.enable", True)])
def test_a_change_the_screen_lets_through_carries_no_prediction(lever: str, value: object) -> None:
    recipe, state, records, record = _campaign()
    space = space_fn(recipe)
    space.values = {lever: [False, True]}
    change = HeuristicPolicy().propose(state, diagnose(record), [], space, records)
    assert isinstance(change, Change) and change.lever == lever and change.predicted_oom == ""


QWEN = Path(__file__).resolve().parents[2] / "bot/bench/tasks/qwen3-30b-a3b/b200x16.yaml"
# a pipelined layout of that recipe whose largest removable cost is selective recompute (19 % of the step, 30 % headroom)
PIPELINED = {
    "parallelism.pipeline_parallel_degree": 2,
    "parallelism.pipeline_parallel_schedule": "ZBVZeroBubble",
    "activation_checkpoint": "selective",
    "training.disable_cuda_graphs": True,
}


def _pipelined(peak_scale: float = 1.0, levers: dict | None = None):
    from bot.core.recipe import parse_recipe_text, set_lever_text

    text = QWEN.read_text()
    for k, v in (levers or PIPELINED).items():
        text = set_lever_text(text, k, v)
    recipe = parse_recipe_text(text, "bot/bench/tasks/qwen3-30b-a3b/b200x16.yaml")
    record = SimRunner(seed=0).run(recipe)
    if peak_scale != 1.0:  # the same run, as if its measured peak had been higher
        record = record.model_copy(
            update={
                "summary": record.summary.model_copy(
                    update={"peak_memory_gib": record.summary.peak_memory_gib * peak_scale}
                )
            }
        )
    state = new_state(text).model_copy(
        update={
            "phase": "stepping",
            "incumbent_tps": record.summary.tps_median,
            "baseline": [cm.RunRef.of(record, kind="baseline", ref="b1")],
        }
    )
    return recipe, state, MemoryRecords({"b1": record}), record


def test_less_recompute_comes_first_when_recompute_is_the_largest_cost_and_less_of_it_is_predicted_to_fit() -> None:
    recipe, state, records, record = _pipelined()
    d = diagnose(record)
    assert d.breakdown["recompute"] > max(d.breakdown["exposed_comm"], d.breakdown["bubble"])
    assert d.mem_headroom_frac < 0.35  # below what the headroom lesson asks for: only the prediction lets it through
    change = HeuristicPolicy().propose(state, d, [], space_fn(recipe), records)
    assert isinstance(change, Change) and (change.lever, change.after) == ("activation_checkpoint", "none")
    assert change.lessons == ["ac-less-recompute-when-predicted-to-fit"] and "predicted to fit" in change.why
    none = {**state.incumbent_levers, "activation_checkpoint": "none"}
    assert _sim_peak(recipe, none) <= record.summary.memory_capacity_gib  # and the simulator agrees it fits


def test_less_recompute_is_not_proposed_by_the_prediction_when_it_would_not_fit_or_nothing_can_tell() -> None:
    for scale, strip in ((1.4, False), (1.0, True)):  # a peak that leaves no room for the activations; no peak at all
        recipe, state, records, record = _pipelined(scale)
        if strip:
            record = record.model_copy(update={"summary": record.summary.model_copy(update={"peak_memory_gib": None})})
            records = MemoryRecords({"b1": record})
        change = HeuristicPolicy().propose(state, diagnose(record), [], space_fn(recipe), records)
        assert not (isinstance(change, Change) and "ac-less-recompute-when-predicted-to-fit" in change.lessons)


def test_a_lesson_held_back_only_by_its_headroom_threshold_is_proposed_when_its_change_is_predicted_to_fit() -> None:
    """local-batch-up-pinned-global asks for 30 % headroom; on the pipelined layout without recompute (19 % left) the
    memory screen predicts the doubled local batch fits, so the lesson is tried -- and the simulator agrees it fits.
    With a measured peak that leaves no room the prediction says no, and the lesson stays held back."""
    from bot.agent.lessons import load_lessons

    lesson = [x for x in load_lessons() if x.id == "local-batch-up-pinned-global"]
    no_recompute = {**PIPELINED, "activation_checkpoint": "none"}
    for scale, expected in ((1.0, True), (1.3, False)):
        recipe, state, records, record = _pipelined(scale, no_recompute)
        d = diagnose(record)
        space = space_fn(recipe)
        space.values = {k: v for k, v in space.values.items() if k == "training.local_batch_size"}
        change = HeuristicPolicy().propose(state, d, lesson, space, records)
        proposed = isinstance(change, Change) and change.lessons == ["local-batch-up-pinned-global"]
        assert proposed == expected, (scale, change)
        if expected:
            assert d.mem_headroom_frac < 0.3 and (change.lever, change.after) == ("training.local_batch_size", 4)
            assert "below the lesson's memory headroom, but predicted to fit" in change.why
            assert (
                _sim_peak(recipe, {**state.incumbent_levers, "training.local_batch_size": 4})
                <= record.summary.memory_capacity_gib
            )


@pytest.mark.parametrize(("behind", "follows"), [(-0.02, True), (-0.30, False), (None, True)])
def test_less_recompute_follows_a_coupled_step_only_where_removing_all_recompute_could_put_it_ahead(
    behind, follows
) -> None:
    """A step measured 30 % behind the incumbent with 19 % of its step recomputing cannot get ahead by dropping the
    recompute (1 / (1 - 0.19) = +23 % at most); 2 % behind it can."""
    from bot.core.diagnosis import Diagnosis

    recipe, state, records, _ = _pipelined()
    d = Diagnosis(
        outcome="ok",
        breakdown={"compute": 0.75, "recompute": 0.19, "bubble": 0.01, "exposed_comm": 0.05},
        mem_headroom_frac=0.3,
    )
    change = fix_for(
        state, space_fn(recipe), d, dict(state.incumbent_levers), stacked_on=None, why_prefix="t", behind=behind
    )
    assert (isinstance(change, Change) and (change.lever, change.after) == ("activation_checkpoint", "none")) == follows


def _four_node_h200(peak_scale: float):
    """llama3.1-70b's recipe on 4 nodes of H200 at a global batch of 32, at TP 8 x CP 2 with selective recompute and
    compile: DP 2, local batch 8, two accumulation steps; TP 4 at local batch 8 (DP 4, one accumulation step) needs
    twice the activations per rank and does not fit, at local batch 4 it does."""
    from bot.core.recipe import parse_recipe_text, set_lever_text

    text = RECIPE.read_text().replace("hardware: h100-sxm-80gb", "hardware: h200").replace("nodes: 8", "nodes: 4")
    text = text.replace("training.global_batch_size: 64", "training.global_batch_size: 32")
    for k, v in {
        "parallelism.context_parallel_degree": 2,
        "activation_checkpoint": "selective",
        "compile.enable": True,
        "compile.enable_async_tensor_parallel": True,
    }.items():
        text = set_lever_text(text, k, v)
    recipe = parse_recipe_text(text, "bot/bench/tasks/llama3.1-70b/h200x32.yaml")
    record = SimRunner(seed=0).run(recipe)
    record = record.model_copy(
        update={
            "summary": record.summary.model_copy(
                update={"peak_memory_gib": record.summary.peak_memory_gib * peak_scale}
            )
        }
    )
    state = new_state(text).model_copy(
        update={
            "phase": "stepping",
            "incumbent_tps": record.summary.tps_median,
            "baseline": [cm.RunRef.of(record, kind="baseline", ref="b1")],
        }
    )
    return recipe, state, MemoryRecords({"b1": record}), record


@pytest.mark.parametrize(("peak_scale", "enabled"), [(1.0, True), (1.35, False)])
def test_a_smaller_tp_that_would_not_fit_is_enabled_by_the_local_batch_its_larger_dp_degree_leaves_each_rank(
    peak_scale, enabled
) -> None:
    """drop-tp-when-fsdp-fits asks for 30 % headroom; at TP 8 x CP 2 on 4 H200 nodes 12 % is left and TP 4 at the same
    local batch is predicted (and simulated) to run out of memory. TP 4 doubles the DP degree, so each rank's share of
    the pinned global batch halves: local batch 4 with it keeps the per-rank activations, is predicted to fit, and is
    proposed as the enabler of the TP change (the simulator agrees). With a measured peak that leaves no room for it
    either (the device full), nothing of the kind is proposed."""
    from bot.agent.lessons import load_lessons

    lessons = [x for x in load_lessons() if x.id == "drop-tp-when-fsdp-fits"]
    recipe, state, records, record = _four_node_h200(peak_scale)
    d = diagnose(record)
    assert d.outcome == "ok" and d.mem_headroom_frac < 0.3
    space = space_fn(recipe)
    space.values = {
        k: v
        for k, v in space.values.items()
        if k in ("parallelism.tensor_parallel_degree", "training.local_batch_size")
    }
    change = HeuristicPolicy().propose(state, d, lessons, space, records)
    tp4 = {**state.incumbent_levers, "parallelism.tensor_parallel_degree": 4}
    capacity = record.summary.memory_capacity_gib
    assert _sim_peak(recipe, tp4) > capacity  # at the incumbent's local batch TP 4 cannot fit
    shared = isinstance(change, Change) and "dp-degree-batch-share" in change.lessons
    assert shared == enabled, change
    if enabled:
        assert change.enabler and (change.lever, change.before, change.after) == ("training.local_batch_size", 8, 4)
        assert (
            change.why.startswith("enabler of parallelism.tensor_parallel_degree=4:")
            and "predicted to fit" in change.why
        )
        assert _sim_peak(recipe, {**tp4, "training.local_batch_size": 4}) <= capacity
