"""The layout jump (bot.agent.layout_jump): the cost model's best layout from the incumbent, reached one lever at a
time through legal layouts, proposed by the default policy as a chain of enablers with its last lever measured."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from campaign_fakes import MemoryRecords, new_state

import bot.agent.heuristic.jump_review as jump_review_module
from bot import campaign as cm
from bot.agent.costmodel import estimate_of
from bot.agent.heuristic import JUMP_LESSON, REVIEW_LESSON, HeuristicPolicy
from bot.agent.heuristic.jump import layout_jump as policy_jump
from bot.agent.heuristic.jump import reaimed_jump
from bot.agent.heuristic.jump_review import jump_review
from bot.agent.history import ENABLER
from bot.agent.layout_jump import COMPILE_SPEEDUP, MIN_SAVING, TIE, consistent, layout_jump, tie_broken
from bot.agent.lessons import load_lessons
from bot.agent.memory_screen import MeasuredPeak, PeakPrediction
from bot.agent.space import layout_problem, make_space
from bot.bench.tuners import BUDGET_RUNS, run_campaign
from bot.core import levers as catalog
from bot.core.diagnosis import Diagnosis
from bot.core.recipe import load_recipe, set_lever_text
from bot.core.records import Change, RunRecord
from bot.runner.sim import SimRunner

ROOT = Path(__file__).resolve().parents[2]
# torchtitan's llama3_70b config (TP 8, full recompute, CUDA graphs on) on 32 simulated B200: its rule-guided
# campaign settled at TP 4 / CP 2 / selective recompute, while the analytic model ranks pipelined layouts with no
# recompute far ahead -- reachable only with CUDA graphs off, through a local batch that keeps the global batch
RECIPE_PATH = ROOT / "bot" / "bench" / "tasks" / "llama3.1-70b" / "b200x32.yaml"
RECIPE = load_recipe(RECIPE_PATH)
SPACE = make_space(RECIPE)


def jump_from(levers: dict, stepped: list[dict] | None = None):
    return layout_jump(RECIPE, dict(RECIPE.levers), levers, SPACE.values, stepped or [dict(RECIPE.levers)], SPACE.model)


def test_the_jump_is_the_cost_models_layout_reached_through_legal_partial_layouts() -> None:
    start = dict(RECIPE.levers)
    jump = jump_from(start)
    assert jump is not None and len(jump.links) >= 3
    at = dict(start)
    for lever, value in jump.links:
        assert catalog.effective(at)[lever] != value and value in SPACE.values[lever]
        at[lever] = value
        assert layout_problem(RECIPE, at) is None, (
            lever,
            value,
        )  # every enabler's configuration is one torchtitan takes
    assert catalog.effective(at) == catalog.effective(jump.levers)
    # the prerequisite first (pipeline stages need CUDA graphs off), recompute off before a zero-bubble schedule
    names = [k for k, _ in jump.links]
    assert names[0] == "training.disable_cuda_graphs"
    if "activation_checkpoint" in names and "parallelism.pipeline_parallel_schedule" in names:
        assert names.index("activation_checkpoint") < names.index("parallelism.pipeline_parallel_schedule")
    # only the layout moves: a lever the cost model has no term for keeps the incumbent's value
    assert {k for k, _ in jump.links} <= {*catalog.effective(start)} and "compile.enable" not in names
    # predicted to fit and at least MIN_SAVING faster than the incumbent, by the model's own estimates
    assert estimate_of(RECIPE, jump.levers).fits
    assert jump.step_s <= (1 - MIN_SAVING) * estimate_of(RECIPE, start).step_s
    assert jump.saving == pytest.approx(1 - jump.step_s / jump.incumbent_step_s)


def test_a_stepped_layout_is_not_jumped_to_again_and_none_is_left_near_the_models_optimum() -> None:
    first = jump_from(dict(RECIPE.levers))
    assert first is not None
    second = jump_from(dict(RECIPE.levers), [dict(RECIPE.levers), first.levers])
    assert second is None or catalog.effective(second.levers) != catalog.effective(first.levers)
    # from the model's best layout itself nothing is predicted MIN_SAVING faster
    assert jump_from(first.levers) is None


def test_no_link_of_the_chain_is_a_configuration_already_stepped() -> None:
    """A campaign refuses a step to a configuration it measured: a chain whose first link is one would stop there."""
    start = dict(RECIPE.levers)
    first = jump_from(start)
    assert first is not None and len(first.links) >= 2
    (lever, value), *_ = first.links
    measured = {**start, lever: value}  # e.g. that lever alone ran out of memory earlier in the campaign
    again = jump_from(start, [start, measured])
    assert again is not None
    at, partials = dict(start), []
    for k, v in again.links:
        at[k] = v
        partials.append(catalog.effective(at))
    assert catalog.effective(measured) not in partials
    assert partials[-1] == catalog.effective(again.levers)


@pytest.mark.parametrize("path, jumps", [(RECIPE_PATH, True), (ROOT / "recipes" / "llama3-tiny" / "cpu.yaml", False)])
def test_the_policy_jumps_only_where_its_lesson_applies(path: Path, jumps: bool) -> None:
    # the lesson applies to GPU kinds: on the CPU the analytic model's roofline and links say nothing of a real run
    recipe = load_recipe(path)
    state = _with_a_kept_step(new_state(path.read_text(), policy="heuristic", budget=30.0))
    change = policy_jump(
        state, make_space(recipe), load_lessons(ROOT / "lessons"), Diagnosis(outcome="ok"), MemoryRecords()
    )
    assert (change is not None) is jumps
    if change is not None:
        assert change.lessons == [JUMP_LESSON] and change.enabler and ENABLER.match(change.why)


def _with_a_kept_step(state: cm.Campaign) -> cm.Campaign:
    """``state`` with one kept step (a lever the cost model has no term for, so its predicted speed-up is 1)."""
    kept = cm.Step(
        n=1,
        change=Change(lever="training.gc_freq", before=50, after=100, why="t"),
        state="merged",
        kept=True,
        levers={**state.incumbent_levers, "training.gc_freq": 100},
        gain=0.01,
    )
    return state.model_copy(
        update={"phase": "stepping", "steps": [kept], "incumbent_step": 1, "incumbent_levers": kept.levers}
    )


def test_no_jump_before_a_step_is_kept_there_is_no_measured_speedup_to_check_the_model_against() -> None:
    state = new_state(RECIPE_PATH.read_text(), policy="heuristic", budget=30.0).model_copy(update={"phase": "stepping"})
    lessons = load_lessons(ROOT / "lessons")
    assert policy_jump(state, SPACE, lessons, Diagnosis(outcome="ok"), MemoryRecords()) is None
    assert policy_jump(_with_a_kept_step(state), SPACE, lessons, Diagnosis(outcome="ok"), MemoryRecords()) is not None


def test_the_default_policy_proposes_the_jump_as_a_chain_of_enablers_and_measures_its_last_link(tmp_path: Path) -> None:
    campaign = run_campaign(RECIPE_PATH, "heuristic", 0, budget=30.0, work=tmp_path)
    chain = [s for s in campaign.steps if JUMP_LESSON in s.change.lessons]
    assert chain, [s.change.title() for s in campaign.steps]
    *links, last = chain
    assert links and all(s.change.enabler and not s.runs for s in links)  # gated, not run
    assert not last.change.enabler and last.runs  # the layout is measured once, on its last link
    assert [s.stacked_on for s in chain[1:]] == [s.n for s in chain[:-1]]  # each link on the one before
    for link, nxt in zip(links, chain[1:], strict=True):  # each enabler names the links still to come
        m = ENABLER.match(link.change.why)
        assert m and (m.group("lever"), str(m.group("value"))) == (nxt.change.lever, str(nxt.change.after))
    jumps = [s for s in chain if not s.change.enabler]
    assert len(jumps) == 1  # once per incumbent


def test_without_its_lesson_in_the_catalog_the_policy_makes_no_jump(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import bot.bench.tuners as tuners

    catalog_without = [lesson for lesson in load_lessons(ROOT / "lessons") if lesson.id != JUMP_LESSON]
    monkeypatch.setattr(tuners, "load_lessons", lambda _path: catalog_without)
    campaign = run_campaign(RECIPE_PATH, "heuristic", 0, budget=30.0, work=tmp_path)
    assert campaign.steps and not any(JUMP_LESSON in s.change.lessons for s in campaign.steps)


# where that campaign settled: measured at 144 GiB on 180 GiB devices, estimated by the formula at well over 180
SETTLED = {
    **RECIPE.levers,
    "parallelism.tensor_parallel_degree": 4,
    "parallelism.context_parallel_degree": 2,
    "activation_checkpoint": "selective",
}


def test_memory_is_judged_from_a_measured_peak_times_the_models_ratio_not_the_formulas_absolute_figure() -> None:
    assert not estimate_of(RECIPE, SETTLED).fits  # the formula alone says the incumbent cannot run
    assert jump_from(SETTLED) is None  # so, with nothing measured, its estimates say nothing here
    anchored = layout_jump(
        RECIPE,
        dict(RECIPE.levers),
        SETTLED,
        SPACE.values,
        [dict(RECIPE.levers), SETTLED],
        SPACE.model,
        measured=MeasuredPeak(SETTLED, 144.0, 180.0),
    )
    assert anchored is not None
    ratio = estimate_of(RECIPE, anchored.levers).memory_gib / estimate_of(RECIPE, SETTLED).memory_gib
    assert 144.0 * ratio <= 180.0  # predicted to fit by the anchored figure
    # the same incumbent measured at the device's limit: no layout that needs more memory than it is proposed
    tight = layout_jump(
        RECIPE,
        dict(RECIPE.levers),
        SETTLED,
        SPACE.values,
        [dict(RECIPE.levers), SETTLED],
        SPACE.model,
        measured=MeasuredPeak(SETTLED, 179.0, 180.0),
    )
    assert (
        tight is None
        or estimate_of(RECIPE, tight.levers).memory_gib <= estimate_of(RECIPE, SETTLED).memory_gib * 180.0 / 179.0
    )


@pytest.mark.parametrize(
    "predicted, measured, trusted",
    [
        (1.30, 1.30, True),
        (1.30, 1.40, True),
        (1.30, 1.20, True),
        (1.30, 1.50, False),
        (1.30, 1.10, False),
        (4.4, 1.0, False),
        (1.0, 0.0, False),
        (float("inf"), 1.0, False),
    ],
)
def test_the_model_is_trusted_only_where_it_reproduced_the_measured_speedup(
    predicted: float, measured: float, trusted: bool
) -> None:
    assert consistent(predicted, measured) is trusted


def test_no_jump_where_the_model_got_the_measured_speedup_to_the_incumbent_wrong() -> None:
    peak = MeasuredPeak(SETTLED, 144.0, 180.0)
    predicted = estimate_of(RECIPE, dict(RECIPE.levers)).step_s / estimate_of(RECIPE, SETTLED).step_s

    def jump(speedup: float):
        return layout_jump(
            RECIPE,
            dict(RECIPE.levers),
            SETTLED,
            SPACE.values,
            [dict(RECIPE.levers), SETTLED],
            SPACE.model,
            measured=peak,
            speedup=speedup,
        )

    assert jump(predicted) is not None and jump(predicted * 1.05) is not None
    assert jump(predicted * 1.5) is None and jump(predicted / 1.5) is None


def test_a_model_wrong_about_the_path_is_still_trusted_where_it_reproduced_the_latest_layout_step() -> None:
    """The path from the baseline is misjudged (half the measured speed-up), but the latest kept layout step -- from a
    layout in between to the incumbent -- is reproduced: the jump is made; wrong about both, it is not."""
    peak = MeasuredPeak(SETTLED, 144.0, 180.0)
    between = {**SETTLED, "activation_checkpoint": "full"}
    path = estimate_of(RECIPE, dict(RECIPE.levers)).step_s / estimate_of(RECIPE, SETTLED).step_s
    step = estimate_of(RECIPE, between).step_s / estimate_of(RECIPE, SETTLED).step_s
    assert step != pytest.approx(1.0)

    def jump(last_speedup: float):
        return layout_jump(
            RECIPE,
            dict(RECIPE.levers),
            SETTLED,
            SPACE.values,
            [dict(RECIPE.levers), between, SETTLED],
            SPACE.model,
            measured=peak,
            speedup=path * 2.0,
            last=(between, last_speedup),
        )

    assert jump(step) is not None and jump(step * 1.05) is not None
    assert jump(step * 1.5) is None and jump(step / 1.5) is None


def test_the_latest_kept_step_the_model_can_judge_skips_steps_it_has_no_term_for() -> None:
    """last_layout_step: the latest kept step that changed a modelled lever, with the levers before it; a later kept
    compile step is skipped (the model has no term for it); no kept layout step, no check."""
    from bot.agent.history import last_layout_step
    from bot.core.records import Change
    from bot.core.state import Campaign, Step

    base = dict(RECIPE.levers)
    ac = {**base, "activation_checkpoint": "selective"}
    compiled = {**ac, "compile.enable": True}
    steps = [
        Step(
            n=1,
            change=Change(lever="activation_checkpoint", before="full", after="selective"),
            levers=ac,
            kept=True,
            gain=0.2,
        ),
        Step(
            n=2,
            change=Change(lever="training.local_batch_size", before=1, after=2),
            levers={**ac, "training.local_batch_size": 2},
            gain=-0.1,
        ),
        Step(
            n=3, change=Change(lever="compile.enable", before=False, after=True), levers=compiled, kept=True, gain=0.1
        ),
    ]
    state = Campaign(
        id="c",
        recipe_path="r.yaml",
        recipe_id=RECIPE.id,
        budget=100.0,
        baseline_levers=base,
        incumbent_levers=compiled,
        steps=steps,
    )
    assert last_layout_step(state) == (base, pytest.approx(1.2))
    only_compile = Step(
        n=1,
        change=Change(lever="compile.enable", before=False, after=True),
        levers={**base, "compile.enable": True},
        kept=True,
        gain=0.1,
    )
    assert last_layout_step(state.model_copy(update={"steps": [only_compile]})) is None


# torchtitan's llama3_70b config on 64 simulated H100 (80 GiB): the campaign settles at TP 4 / CP 2 / selective
# recompute, measured at about 75 GiB; the formula puts it at 129 GiB and rejects every layout without recompute
H100 = load_recipe(ROOT / "bot" / "bench" / "tasks" / "llama3.1-70b" / "h100x64.yaml")
H100_SETTLED = {
    **H100.levers,
    "parallelism.tensor_parallel_degree": 4,
    "parallelism.context_parallel_degree": 2,
    "training.local_batch_size": 4,
    "activation_checkpoint": "selective",
    "compile.enable": True,
    "compile.enable_async_tensor_parallel": True,
}


def _stated(change: Change) -> Change:
    """``change`` as the policy returns it: what it enables and whether it is a probe stated, not left to its why."""
    return change.model_copy(update={"enables": change.enables or [], "probe": bool(change.probe)})


def _plain(change: Change) -> Change:
    """``change`` without the prediction the policy attaches (what it saw and expected)."""
    return change.model_copy(update={"prediction": None})


def _sim(recipe, levers: dict) -> RunRecord:
    from bot.runner.sim import SimRunner

    return SimRunner(seed=0).run(recipe.model_copy(update={"levers": levers}))


def test_with_a_measured_peak_the_jump_also_ranks_layouts_the_formula_alone_rejects() -> None:
    from bot.agent.costmodel_tuner import MEMORY_SLACK, ranking
    from bot.sim.hardware import get_hardware

    text = H100.model_dump_json()
    fitting, every = ranking(text), ranking(text, fitting_only=False)
    assert {items for _, items, _ in fitting} < {items for _, items, _ in every}  # a strict superset
    hbm = get_hardware(H100.cluster.hardware).hbm_gib
    over = [estimate_of(H100, dict(items)).memory_gib for _, items, _ in every[::50]]
    assert (
        max(over) > hbm and max(over) <= MEMORY_SLACK * hbm
    )  # those the formula puts over the device, within its slack
    space = make_space(H100)
    peak = _sim(H100, H100_SETTLED).summary
    assert not estimate_of(H100, H100_SETTLED).fits and peak.peak_memory_gib <= peak.memory_capacity_gib
    jump = layout_jump(
        H100,
        dict(H100.levers),
        H100_SETTLED,
        space.values,
        [dict(H100.levers), H100_SETTLED],
        space.model,
        measured=MeasuredPeak(H100_SETTLED, peak.peak_memory_gib, peak.memory_capacity_gib),
    )
    assert jump is not None and not estimate_of(H100, jump.levers).fits  # a layout the formula alone would have dropped
    assert catalog.effective(jump.levers)["activation_checkpoint"] == "none"


def _after_a_failed_jump(strip_peak: bool = False, jumps: int = 1):
    """The 70b/H100 campaign with its settled layout kept (step 1) and the jump from it run out of memory (steps 2..)."""
    space = make_space(H100)
    base, inc = _sim(H100, dict(H100.levers)), _sim(H100, H100_SETTLED)
    records = MemoryRecords({"b1": base, "t1": inc})
    state = new_state(
        ROOT.joinpath("bot/bench/tasks/llama3.1-70b/h100x64.yaml").read_text(), policy="heuristic", budget=400.0
    )
    kept = cm.Step(
        n=1,
        change=Change(lever="compile.enable", before=False, after=True, why="t"),
        state="merged",
        kept=True,
        levers=H100_SETTLED,
        gain=0.3,
        runs=[cm.RunRef.of(inc, kind="trial", n=1, ref="t1")],
    )
    steps, target = [kept], None
    for n in range(2, 2 + jumps):
        jump = layout_jump(
            H100,
            dict(H100.levers),
            H100_SETTLED,
            space.values,
            [dict(H100.levers), *(s.levers for s in steps)],
            space.model,
            measured=MeasuredPeak(H100_SETTLED, inc.summary.peak_memory_gib, inc.summary.memory_capacity_gib),
        )
        assert jump is not None
        target = catalog.with_prerequisites(jump.levers, space.model, set(space.values))
        oom = _sim(H100, target)
        assert oom.outcome == "oom" and oom.summary.peak_memory_gib  # the anchored figure was too low
        if strip_peak:  # a run that died without reporting its peak
            oom = oom.model_copy(update={"summary": oom.summary.model_copy(update={"peak_memory_gib": None})})
        records.records[f"t{n}"] = oom
        lever, value = jump.links[-1]
        steps.append(
            cm.Step(
                n=n,
                change=Change(lever=lever, before=H100_SETTLED.get(lever), after=value, why="t", lessons=[JUMP_LESSON]),
                state="closed",
                levers=target,
                runs=[cm.RunRef.of(oom, kind="trial", n=n, ref=f"t{n}")],
            )
        )
    state = state.model_copy(
        update={
            "phase": "stepping",
            "steps": steps,
            "incumbent_step": 1,
            "incumbent_levers": H100_SETTLED,
            "incumbent_tps": inc.summary.tps_median,
            "baseline": [cm.RunRef.of(base, kind="baseline", ref="b1")],
        }
    )
    return state, space, records, target


def test_a_jump_that_ran_out_of_memory_is_reaimed_once_on_the_peak_it_measured() -> None:
    state, space, records, failed = _after_a_failed_jump()
    lessons = load_lessons(ROOT / "lessons")
    change = reaimed_jump(state, space, lessons, Diagnosis(outcome="oom"), records)
    assert change is not None and change.lessons == [JUMP_LESSON] and change.stacked_on is None  # from the incumbent
    # the same layout the jump picks when its memory is anchored on the failed run: not the failed layout again
    oom = records.read("t2").summary
    again = layout_jump(
        H100,
        dict(H100.levers),
        H100_SETTLED,
        space.values,
        [dict(H100.levers), H100_SETTLED, failed],
        space.model,
        measured=MeasuredPeak(failed, oom.peak_memory_gib, oom.memory_capacity_gib),
    )
    assert again is not None and (change.lever, change.after) == again.links[0]
    assert (
        f"the measured {oom.peak_memory_gib:.0f} GiB x the memory model's" in change.why
    )  # the figure it was judged on
    assert catalog.effective(again.levers) != catalog.effective(failed)
    ratio = estimate_of(H100, again.levers).memory_gib / estimate_of(H100, failed).memory_gib
    assert oom.peak_memory_gib * ratio <= oom.memory_capacity_gib
    assert _sim(H100, catalog.with_prerequisites(again.levers, space.model, set(space.values))).outcome == "ok"
    # and the policy proposes it before the out-of-memory retry
    proposed = HeuristicPolicy().propose(state, Diagnosis(outcome="oom"), lessons, space, records)
    assert _plain(proposed) == _stated(change) and proposed.prediction.move == "reaimed-jump"


@pytest.mark.parametrize("strip_peak, jumps", [(True, 1), (False, 2)])
def test_no_reaimed_jump_without_a_new_peak_to_anchor_on_nor_a_third_jump(strip_peak: bool, jumps: int) -> None:
    state, space, records, _ = _after_a_failed_jump(strip_peak=strip_peak, jumps=jumps)
    lessons = load_lessons(ROOT / "lessons")
    assert reaimed_jump(state, space, lessons, Diagnosis(outcome="oom"), records) is None


# qwen3-30b-a3b on 16 simulated B200 from torchtitan's config: its jump lands on four pipeline stages, measured far
# short of the model's prediction, and two stages (one notch back) is faster still
QWEN_PATH = ROOT / "bot" / "bench" / "tasks" / "qwen3-30b-a3b" / "b200x16.yaml"


@pytest.fixture(scope="module")
def reviewed(tmp_path_factory: pytest.TempPathFactory):
    recipe = load_recipe(QWEN_PATH)
    run_cost = SimRunner(seed=0).run(recipe, out_dir=None).summary.device_hours
    return run_campaign(
        QWEN_PATH, "heuristic", 0, BUDGET_RUNS * run_cost, tmp_path_factory.mktemp("review")
    ), make_space(recipe)


def _jump_and_reviews(campaign: cm.Campaign):
    jump = next(s for s in campaign.steps if s.kept and JUMP_LESSON in s.change.lessons)
    chain = [campaign.step(n) for n in range(1, jump.n + 1) if JUMP_LESSON in campaign.step(n).change.lessons]
    reviews = [s for s in campaign.steps if REVIEW_LESSON in s.change.lessons and s.runs]
    return jump, chain, reviews


def test_each_degree_a_kept_jump_moved_is_measured_one_notch_back_until_one_measures_no_gain(reviewed) -> None:
    campaign, space = reviewed
    jump, chain, reviews = _jump_and_reviews(campaign)
    assert reviews, [s.change.title() for s in campaign.steps]
    moved = {
        s.change.lever: (s.change.before, s.change.after) for s in chain if s.change.lever in catalog.PARALLEL_DEGREES
    }
    for r in reviews:
        assert r.n > jump.n and r.change.lever in moved
        before, after = moved[r.change.lever]
        values = sorted(space.values[r.change.lever])
        assert r.change.before == after and abs(values.index(r.change.after) - values.index(after)) == 1
        assert (r.change.after - after) * (before - after) > 0  # towards where the jump came from
    # the jump to PP 4 measured far short of the model; PP 2 is kept on it
    assert any(
        r.kept and r.change.lever == "parallelism.pipeline_parallel_degree" and r.change.after == 2 for r in reviews
    )
    # no review after one that ran and measured no gain (an out-of-memory run does not count)
    misses = [r for r in reviews if not r.kept and all(run.outcome != "oom" for run in r.runs)]
    assert len(misses) <= 1 and (not misses or misses[0] is reviews[-1])


# minimax-m2 on 128 simulated H100 (16 nodes) from the shipped 64 x H200 recipe with four pipeline stages: its jump
# goes to PP 8 / CP 2 / TP 1, and sixteen stages (one notch further along the jump's own PP move) are faster still
def _minimax_on_h100(tmp_path: Path) -> Path:
    text = (ROOT / "bot" / "bench" / "tasks" / "minimax-m2" / "h200x64.yaml").read_text()
    text = set_lever_text(text, "parallelism.pipeline_parallel_degree", 4)
    text = re.sub(r"(\n  hardware:) \S+", r"\1 h100-sxm-80gb", re.sub(r"(\n  nodes:) \d+", r"\1 16", text))
    text = re.sub(
        r"(\n  training.global_batch_size:) \d+",
        r"\1 128",
        text.replace("id: minimax-m2/h200x64", "id: minimax-m2/h100x128"),
    )
    path = tmp_path / "minimax-m2-h100x128.yaml"
    path.write_text(text)
    return path


def test_a_degree_the_jump_moved_is_reviewed_one_notch_further_too(tmp_path: Path) -> None:
    """Coordinate descent tries each coordinate both ways: the jump may have stopped a notch short as well as gone a
    notch too far. Here the review moves PP 8 -> 16 (the jump's 4 -> 8, one notch further, the local batch filling the
    deeper pipeline) and it is kept; the reviews stop at the first that measured no gain."""
    path = _minimax_on_h100(tmp_path)
    recipe = load_recipe(path)
    assert recipe.levers["parallelism.pipeline_parallel_degree"] == 4 and recipe.cluster.hardware == "h100-sxm-80gb"
    run_cost = SimRunner(seed=0).run(recipe, out_dir=None).summary.device_hours
    campaign = run_campaign(path, "heuristic", 0, BUDGET_RUNS * run_cost, tmp_path / "work")
    jump = next(s for s in campaign.steps if s.kept and JUMP_LESSON in s.change.lessons)
    moved = {
        campaign.step(n).change.lever: campaign.step(n).change
        for n in range(1, jump.n + 1)
        if JUMP_LESSON in campaign.step(n).change.lessons
    }
    assert (
        moved["parallelism.pipeline_parallel_degree"].before,
        moved["parallelism.pipeline_parallel_degree"].after,
    ) == (4, 8)
    further = next(
        s
        for s in campaign.steps
        if REVIEW_LESSON in s.change.lessons and s.change.lever == "parallelism.pipeline_parallel_degree"
    )
    assert (further.change.before, further.change.after) == (8, 16) and "one notch further" in further.change.why
    measured = next(
        s for s in campaign.steps if s.n > further.n and s.runs
    )  # the change it enabled (the fill), or itself
    assert measured.kept and measured.levers["parallelism.pipeline_parallel_degree"] == 16, measured.change.title()
    reviews = [s for s in campaign.steps if REVIEW_LESSON in s.change.lessons and s.runs]
    misses = [r for r in reviews if not r.kept and all(run.outcome != "oom" for run in r.runs)]
    assert len(misses) <= 1 and (not misses or misses[0] is reviews[-1])


def _right_after_the_jump(campaign: cm.Campaign) -> cm.Campaign:
    jump, _, _ = _jump_and_reviews(campaign)
    return campaign.model_copy(
        update={"steps": campaign.steps[: jump.n], "incumbent_step": jump.n, "incumbent_levers": jump.levers}
    )


def test_right_after_a_kept_jump_the_review_is_proposed_before_the_lessons(reviewed) -> None:
    campaign, space = reviewed
    state = _right_after_the_jump(campaign)
    review = jump_review(state, space, MemoryRecords())
    assert review is not None and REVIEW_LESSON in review.lessons
    proposed = HeuristicPolicy().propose(
        state, Diagnosis(outcome="ok"), load_lessons(ROOT / "lessons"), space, MemoryRecords()
    )
    assert _plain(proposed) == _stated(review) and proposed.prediction.move == "jump-review"
    # nothing to review where the jump was not kept
    rejected = state.model_copy(
        update={
            "steps": [s.model_copy(update={"kept": False}) if s.n == state.incumbent_step else s for s in state.steps]
        }
    )
    assert jump_review(rejected, space, MemoryRecords()) is None


def test_a_review_predicted_not_to_fit_is_not_run(reviewed, monkeypatch: pytest.MonkeyPatch) -> None:
    """The jump's own fit test: the measured peak times the memory model's ratio, over the device -> not proposed."""
    campaign, space = reviewed
    state = _right_after_the_jump(campaign)
    over = PeakPrediction(predicted=200.0, capacity=179.0, measured=150.0, ratio=200 / 150)
    monkeypatch.setattr(jump_review_module, "predicted_peak", lambda *a, **k: over)
    assert jump_review(state, space, MemoryRecords()) is None
    fits = over._replace(predicted=170.0)
    monkeypatch.setattr(jump_review_module, "predicted_peak", lambda *a, **k: fits)
    assert jump_review(state, space, MemoryRecords()) is not None


def test_among_layouts_the_model_cannot_tell_apart_the_jump_changes_the_fewest_levers() -> None:
    three = {"a": 1, "b": 2, "c": 3}
    two = {"a": 1, "b": 2}
    cands = [(1.000, {}, three, "x"), (1.000 * (1 + TIE / 2), {}, two, "y"), (0.9, {}, {**three, "d": 4}, "z")]
    # 0.9 is clearly the fastest: first whatever it changes; the other two are not within TIE of it
    assert [c[3] for c in tie_broken(cands)] == ["z", "x", "y"]
    # without it, the two within TIE of each other: the one with fewer changed levers first
    assert [c[3] for c in tie_broken(cands[:2])] == ["y", "x"]
    # just outside the tie, speed decides again
    apart = [(1.0, {}, three, "x"), (1.0 * (1 + 2 * TIE), {}, two, "y")]
    assert [c[3] for c in tie_broken(apart)] == ["x", "y"]


def test_while_compile_is_untried_a_schedule_that_rules_it_out_is_ranked_without_the_gain_compile_would_bring() -> None:
    """qwen3-30b-a3b on 16 B200s after its expert-parallel line search, compile not yet tried: ranked as they run
    now, DualPipeV (which hides the all-to-all, but cannot be compiled: pytorch#161904) is the jump; ranked as each
    layout would run once the lessons turn compile on, a layout that compiles is, faster by the cited speed-up."""
    recipe = load_recipe(ROOT / "bot" / "bench" / "tasks" / "qwen3-30b-a3b" / "b200x16.yaml")
    space = make_space(recipe)
    incumbent = {**recipe.levers, "parallelism.expert_parallel_degree": 8, "training.disable_cuda_graphs": True}

    def jump(untried: bool):
        return layout_jump(
            recipe,
            dict(recipe.levers),
            incumbent,
            space.values,
            [dict(recipe.levers)],
            space.model,
            compile_untried=untried,
        )

    blind, aware = jump(False), jump(True)
    schedule = "parallelism.pipeline_parallel_schedule"
    assert blind is not None and aware is not None
    assert blind.levers[schedule] in catalog.V_SCHEDULES
    assert aware.levers[schedule] not in catalog.V_SCHEDULES
    assert layout_problem(recipe, {**aware.levers, "compile.enable": True}) is None
    assert "compile.enable" not in dict(aware.links)  # compared as compiled, but compile is still the lessons' step
    assert aware.step_s == pytest.approx(estimate_of(recipe, aware.levers).step_s / COMPILE_SPEEDUP)
    assert aware.incumbent_step_s == pytest.approx(estimate_of(recipe, incumbent).step_s / COMPILE_SPEEDUP)
    assert "once compiled" in aware.summary
    # from an incumbent that cannot be compiled itself (DualPipeV, measured), compile's cited gain, not yet measured
    # on any layout, does not pull the jump away from it: both rankings are the model's own
    on_v = {
        **incumbent,
        "parallelism.pipeline_parallel_degree": 2,
        "parallelism.pipeline_parallel_schedule": "DualPipeV",
        "training.local_batch_size": 4,
        "activation_checkpoint": "none",
    }
    assert layout_problem(recipe, on_v) is None and layout_problem(recipe, {**on_v, "compile.enable": True}) is not None
    from_v = [
        layout_jump(
            recipe, dict(recipe.levers), on_v, space.values, [dict(recipe.levers)], space.model, compile_untried=u
        )
        for u in (False, True)
    ]
    assert from_v[0] == from_v[1]


def test_compile_counts_as_untried_until_a_step_has_run_with_it() -> None:
    from bot.agent.history import compile_untried
    from bot.core.state import Campaign, RunRef, Step

    base = dict(RECIPE.levers)
    state = Campaign(
        id="c", recipe_path="r.yaml", recipe_id=RECIPE.id, budget=100.0, baseline_levers=base, incumbent_levers=base
    )
    assert compile_untried(state, SPACE)
    compiled = {**base, "compile.enable": True}
    chained = Step(n=1, change=Change(lever="compile.enable", before=False, after=True, enabler=True), levers=compiled)
    assert compile_untried(state.model_copy(update={"steps": [chained]}), SPACE)  # an enabler not run measures nothing
    ran = Step(
        n=1,
        change=Change(lever="compile.enable", before=False, after=True),
        levers=compiled,
        gain=-0.02,
        runs=[RunRef(kind="trial", n=1, outcome="ok", tps=1.0)],
    )
    assert not compile_untried(state.model_copy(update={"steps": [ran]}), SPACE)  # measured: no longer a prospect
    assert not compile_untried(state.model_copy(update={"incumbent_levers": compiled}), SPACE)  # already on
    no_compile = dataclasses.replace(SPACE, values={k: v for k, v in SPACE.values.items() if k != "compile.enable"})
    assert not compile_untried(state, no_compile)  # not a lever this space may turn on


@pytest.mark.parametrize(("gain", "traded"), [(0.02, True), (MIN_SAVING + 0.01, False), (None, False)])
def test_a_compile_gain_under_the_models_error_is_traded_for_a_schedule_that_rules_compile_out(
    gain: float | None, traded: bool
) -> None:
    """The same recipe with compile on and kept: a V-shaped schedule (DualPipeV, no compile: pytorch#161904) is
    weighed with compile off and the compile gain this campaign measured forgone -- only where that gain is under the
    model's own error (MIN_SAVING); a larger measured gain, or none measured, keeps compile and the schedules it allows."""
    recipe = load_recipe(ROOT / "bot" / "bench" / "tasks" / "qwen3-30b-a3b" / "b200x16.yaml")
    space = make_space(recipe)
    compiled = {
        **recipe.levers,
        "parallelism.expert_parallel_degree": 8,
        "training.disable_cuda_graphs": True,
        "compile.enable": True,
    }
    jump = layout_jump(
        recipe, dict(recipe.levers), compiled, space.values, [dict(recipe.levers)], space.model, compile_gain=gain
    )
    schedule = "parallelism.pipeline_parallel_schedule"
    assert jump is not None
    assert (jump.levers[schedule] in catalog.V_SCHEDULES) == traded
    assert (dict(jump.links).get("compile.enable") is False) == traded
    if traded:
        assert jump.step_s == pytest.approx(estimate_of(recipe, jump.levers).step_s * (1 + gain))
        assert "forgone" in jump.summary
    else:
        assert jump.levers["compile.enable"] is True and "forgone" not in jump.summary
