"""bot/agent/heuristic.py: OOM -> recompute on the failed layout, lessons, legal untried values, prerequisites."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from campaign_fakes import (
    CPU_RECIPE,
    RECIPE_REL,
    FakeRunner,
    make_driver,
    make_repo,
    new_state,
    play,
    recipe_text,
    space_fn,
    table_rule,
)

from bot import campaign as cm
from bot.agent.heuristic import HeuristicPolicy
from bot.agent.heuristic.checked import checked
from bot.agent.heuristic.constants import DEGREE_PARTNER_LESSON, OOM_LESSON
from bot.agent.heuristic.diagnosis_driven import fewer_dp_ranks
from bot.agent.heuristic.enablers import fill_first
from bot.agent.heuristic.follow_up import fix_for
from bot.agent.heuristic.from_lessons import from_lessons
from bot.agent.heuristic.keep_going import keep_going
from bot.agent.heuristic.oom_retry import oom_retry
from bot.agent.heuristic.restore_schedule import restore_schedule
from bot.agent.heuristic.second_pass import second_pass
from bot.agent.lessons import Lesson, load_lessons
from bot.agent.policy import validate_change
from bot.core import levers as catalog
from bot.core.diagnosis import Diagnosis
from bot.core.recipe import parse_recipe_text
from bot.core.records import Change, FileRecords, Stop, Verdict
from bot.forge.local import LocalForge
from bot.forge.memory import MemoryForge

RECORDS = FileRecords()  # the records these policies read: files on disk

OK = Diagnosis(outcome="ok", tps=1000.0)
LESSONS = load_lessons()


def oom_rule(oom_modes: tuple[str, ...]):
    """OOM for a micro-batch above 1 under the given recompute modes; fine otherwise."""

    def rule(eff, nth):
        if eff["training.local_batch_size"] >= 2 and eff["activation_checkpoint"] in oom_modes:
            return "oom", None
        return "ok", [1000.0, 1010.0][min(nth, 1)]

    return rule


def run_oom_campaign(tmp_path: Path, oom_modes: tuple[str, ...], max_steps: int):
    text = recipe_text(activation_checkpoint="none")
    repo = make_repo(tmp_path / "repo", text)
    forge = LocalForge(repo)
    driver = make_driver(forge, FakeRunner(oom_rule(oom_modes)), HeuristicPolicy(), repo / ".attune", lessons=LESSONS)
    state = driver.start(new_state(text, max_steps=max_steps, policy="heuristic"))
    return state, forge, repo


def numstat(repo: Path, branch: str) -> list[str]:
    out = subprocess.run(
        ["git", "diff", "--numstat", "main", branch, "--", RECIPE_REL],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.split()[:2]


def test_after_an_oom_the_next_step_retries_that_layout_with_recompute(tmp_path: Path) -> None:
    state, forge, repo = run_oom_campaign(tmp_path, ("none",), max_steps=2)
    first, retry = state.steps
    # the CPU lessons take the micro-batch to one a step (8, the pinned global batch): that layout runs out of memory
    assert (first.change.lever, first.change.after) == ("training.local_batch_size", 8)
    assert first.runs[0].outcome == "oom" and first.state == "closed"
    assert retry.change.lever == "activation_checkpoint" and retry.change.after == "selective"
    assert retry.change.stacked_on == 1 == retry.stacked_on and "oom-enable-recompute" in retry.change.lessons
    # the retry's recipe, read from its branch, carries both changes: the layout that failed, plus recompute
    recipe = parse_recipe_text(forge.read_file(RECIPE_REL, retry.branch), RECIPE_REL)
    assert recipe.levers["training.local_batch_size"] == 8 and recipe.levers["activation_checkpoint"] == "selective"
    assert numstat(repo, retry.branch) == ["2", "2"]  # two recipe lines differ from the base: both changes
    assert numstat(repo, first.branch) == ["1", "1"]
    assert retry.runs[0].outcome == "ok"


def test_the_layout_is_abandoned_only_after_recompute_also_fails(tmp_path: Path) -> None:
    state, _, _ = run_oom_campaign(tmp_path, ("none", "selective", "full"), max_steps=5)
    s1, s2, s3, s4, s5 = state.steps
    assert [s.runs[0].outcome for s in (s1, s2, s3, s4)] == ["oom", "oom", "oom", "oom"]
    assert (s2.change.after, s2.stacked_on) == ("selective", 1)
    assert (s3.change.after, s3.stacked_on) == ("full", 2)  # selective was not enough: climb to full recompute
    assert s3.levers["training.local_batch_size"] == 8 and s3.levers["activation_checkpoint"] == "full"
    # full recompute failed too: the same layout compiled, the last memory saver that changes no layout
    assert (s4.change.lever, s4.change.after, s4.stacked_on) == ("compile.enable", True, 3)
    # that failed too: the layout is abandoned, and no OOM lesson is applied to the incumbent (which fits)
    assert s5.stacked_on is None and s5.change.lever != "activation_checkpoint"
    assert (s5.change.lever, s5.change.after) != ("training.local_batch_size", 8)


def test_a_retry_that_fits_ends_the_ladder(tmp_path: Path) -> None:
    state, _, _ = run_oom_campaign(tmp_path, ("none", "selective"), max_steps=4)
    s1, s2, s3, s4 = state.steps
    assert (s3.change.after, s3.stacked_on, s3.runs[0].outcome) == ("full", 2, "ok")
    assert s4.stacked_on is None


def test_no_retry_when_the_oom_step_changed_recompute_itself() -> None:
    text = recipe_text()  # AC full, micro-batch 1
    state = play(
        new_state(text),
        lambda s: (
            Change(lever="activation_checkpoint", before="full", after="none", why="t")
            if not s.steps
            else Stop(why="done")
        ),
        table_rule({(("activation_checkpoint", "none"),): "oom"}, [1000.0, 1010.0]),
    )
    state = state.model_copy(update={"phase": "stepping"})
    proposal = HeuristicPolicy().propose(
        state, Diagnosis(outcome="oom"), LESSONS, space_fn(parse_recipe_text(text)), RECORDS
    )
    assert isinstance(proposal, Change) and proposal.stacked_on is None


# ----------------------------------------------------------------------------- what it never proposes
def test_a_whole_campaign_never_repeats_or_proposes_anything_illegal(tmp_path: Path) -> None:
    """Nothing ever wins: the heuristic walks its lessons and the whole space, then stops."""
    text = recipe_text()
    recipe = parse_recipe_text(text)
    space = space_fn(recipe)
    driver = make_driver(
        MemoryForge({RECIPE_REL: text}),
        FakeRunner(table_rule({}, [1000.0, 1010.0])),
        HeuristicPolicy(),
        tmp_path,
        lessons=LESSONS,
    )
    state = driver.start(new_state(text, policy="heuristic", budget=100.0))
    assert state.finish_reason == "policy stopped: no untried legal change is left in the search space"
    pairs = [(s.change.lever, s.change.after) for s in state.steps]
    measured = [(s.change.lever, s.change.after) for s in state.steps if not s.change.enabler]
    assert len(measured) == len(set(measured))  # never a value already tried (an enabler is gated, not run)
    untried = {(k, v) for k, values in space.values.items() for v in values if catalog.effective(recipe.levers)[k] != v}
    # it explored everything legal, and nothing else -- memory_budget recompute, which needs compile, stacked on its
    # prerequisite (compile on, an enabler); compile on alone is measured as a step of its own too
    assert set(pairs) == untried == set(measured)
    mb = next(s for s in state.steps if s.change.after == "memory_budget")
    assert state.step(mb.stacked_on).change.enabler and state.step(mb.stacked_on).change.lever == "compile.enable"
    for lever, value in pairs:
        lv = catalog.get(lever)
        assert lever not in recipe.pinned and lv.tier_of(value) not in ("X", "N") and not lv.precision
        assert value in space.values[lever]
    assert state.steps[0].change.lever == "activation_checkpoint" and state.steps[0].change.lessons == ["cpu-ac-off"]


def _lesson(id: str, *tries: dict, priority: int = 500) -> Lesson:
    return Lesson.model_validate(
        {"id": id, "try": list(tries), "why": "test lesson", "source": "https://example.org/x", "priority": priority}
    )


def _state_and_space(text: str):
    state = play(new_state(text), lambda s: Stop(why="-"), table_rule({}, [1000.0, 1010.0]))
    return state.model_copy(update={"phase": "stepping", "finish_reason": ""}), space_fn(parse_recipe_text(text))


def test_lessons_that_would_change_precision_the_objective_or_go_out_of_range_are_skipped() -> None:
    text = recipe_text(training__local_batch_size=8, training__mixed_precision_param="bfloat16")
    state, space = _state_and_space(text)
    bad = [
        _lesson("precision", {"lever": "training.mixed_precision_param", "value": "float32"}),
        _lesson("bf16-states", {"lever": "optimizer.implementation", "value": "fused_opt_states_bf16"}),
        _lesson("objective", {"lever": "training.global_batch_size", "value": 16}),
        _lesson("too-big", {"lever": "training.local_batch_size", "op": "double"}),  # 16 > the pinned global batch 8
        _lesson("not-a-value", {"lever": "activation_checkpoint", "value": "sometimes"}),
    ]
    proposal = HeuristicPolicy().propose(state, OK, bad, space, RECORDS)
    assert isinstance(proposal, Change) and proposal.lessons == []  # none of the lessons: plain exploration
    assert validate_change(state, proposal, space) is None
    assert proposal.lever != "training.mixed_precision_param" and proposal.after != "fused_opt_states_bf16"
    assert proposal.after in space.values[proposal.lever]


def test_illegal_values_are_refused_by_validation() -> None:
    text = recipe_text(training__local_batch_size=8)
    state, space = _state_and_space(text)
    assert "not a legal value" in validate_change(
        state, Change(lever="training.local_batch_size", before=8, after=16), space
    )
    assert "not a legal value" in validate_change(state, Change(lever="loss.num_chunks", before=8, after=3), space)
    assert "expected one of" in validate_change(
        state, Change(lever="activation_checkpoint", before="full", after="sometimes"), space
    )
    assert "precision" in validate_change(
        state, Change(lever="training.mixed_precision_param", before="bfloat16", after="float32"), space
    )
    assert "unknown lever" in validate_change(state, Change(lever="training.seq_len", before=256, after=512), space)


def test_a_tried_value_is_not_proposed_again() -> None:
    text = recipe_text()
    state = play(
        new_state(text),
        lambda s: (
            Change(lever="activation_checkpoint", before="full", after="none", why="t")
            if not s.steps
            else Stop(why="done")
        ),
        table_rule({}, [1000.0, 1010.0]),
    )  # AC none: no gain, closed
    state = state.model_copy(update={"phase": "stepping"})
    space = space_fn(parse_recipe_text(text))
    proposal = HeuristicPolicy().propose(state, OK, LESSONS, space, RECORDS)
    assert (proposal.lever, proposal.after) != ("activation_checkpoint", "none")
    assert "already tried" in validate_change(
        state, Change(lever="activation_checkpoint", before="full", after="none"), space
    )


def _sim_recipe(rid: str, levers: str) -> str:
    """A one-node simulated H100 recipe of the tiny model with the given ``levers:`` block."""
    return f"""\
id: test/{rid}
workload: {{module: bot.inrank.workloads.llama3_tiny, config: llama3_tiny_cpu, model: llama3-tiny}}
cluster: {{hardware: h100-sxm-80gb, nodes: 1, devices_per_node: 8, launcher: sim, usd_per_device_hour: 2.0}}
levers:
{levers}pinned:
  training.global_batch_size: 64
  training.seq_len: 2048
  optimizer.lr: 0.0003
  lr_scheduler.total_steps: 1000
  debug.seed: 42
bench: {{steps: 20, warmup_steps: 5}}
"""


ASYNC_TP_FIRST = _sim_recipe(
    "async-tp",
    """\
  compile.enable_async_tensor_parallel: false
  compile.enable: false
  parallelism.tensor_parallel_degree: 2
""",
)


@pytest.mark.parametrize(
    "lessons",
    [
        [],
        [_lesson("async", {"lever": "compile.enable_async_tensor_parallel", "value": True})],
        # the catalog's own: compile alone can gain too little to clear the noise and leave async TP untried
        [lesson for lesson in LESSONS if lesson.id == "async-tp-needs-compile"],
    ],
    ids=["exploring", "from-a-lesson", "the-catalogs-async-tp-lesson"],
)
def test_a_missing_prerequisite_is_an_enabler_and_the_change_is_stacked_on_it(lessons: list[Lesson]) -> None:
    """The prerequisite is gated, not run on its own (alone it may cost throughput: CUDA graphs off before expert
    parallel), and the change it enables is then proposed stacked on it, to be measured against the incumbent."""
    recipe = parse_recipe_text(ASYNC_TP_FIRST)
    state = new_state(ASYNC_TP_FIRST).model_copy(update={"phase": "stepping", "incumbent_tps": 1000.0})
    space = space_fn(recipe)
    assert list(space.values)[0] == "compile.enable_async_tensor_parallel"
    # generic exploration goes by expected impact (recompute, batch, degrees before compile flags): leave it
    # only the async-TP lever and its prerequisite so the exploring case reaches it first
    space.values = {k: v for k, v in space.values.items() if k == "compile.enable_async_tensor_parallel"}
    proposal = HeuristicPolicy().propose(state, OK, lessons, space, RECORDS)
    assert (proposal.lever, proposal.after, proposal.enabler) == ("compile.enable", True, True)
    assert proposal.why.startswith("enabler of compile.enable_async_tensor_parallel=True: its prerequisite")
    direct = Change(lever="compile.enable_async_tensor_parallel", before=False, after=True)
    assert validate_change(state, direct, space).startswith("prerequisite missing")
    gated = cm.Step(
        n=1,
        change=proposal,
        state="closed",
        levers={**state.incumbent_levers, "compile.enable": True},
        config_verdict=Verdict(verdict="ok", stage="config"),
    )
    enabled = HeuristicPolicy().propose(state.model_copy(update={"steps": [gated]}), OK, lessons, space, RECORDS)
    assert (enabled.lever, enabled.after, enabled.stacked_on, enabled.enabler) == (
        "compile.enable_async_tensor_parallel",
        True,
        1,
        False,
    )
    assert validate_change(state.model_copy(update={"steps": [gated]}), enabled, space) is None


def test_cpu_recipe_is_what_the_tests_assume() -> None:
    recipe = parse_recipe_text(CPU_RECIPE.read_text())
    assert recipe.levers["activation_checkpoint"] == "full" and recipe.levers["training.local_batch_size"] == 1


def test_a_gain_inside_the_noise_band_is_pushed_one_notch_further() -> None:
    text = recipe_text()
    space = space_fn(parse_recipe_text(text))
    lbs2 = Change(lever="training.local_batch_size", before=1, after=2, why="t")
    # baseline runs 1000 and 1300 (very noisy); local batch 2 gains +24% on its one pair, undecided at the cap of 1
    state = play(
        new_state(text, max_pairs=1),
        lambda s: lbs2 if not s.steps else Stop(why="-"),
        table_rule({(("training.local_batch_size", 2),): [1610.0]}, [1000.0, 1300.0]),
    )
    step = state.step(1)
    assert not step.kept and step.measurement.decision == "undecided" and step.gain > 0
    change = HeuristicPolicy().propose(state, Diagnosis(outcome="ok"), load_lessons(), space, RECORDS)
    assert isinstance(change, Change) and (change.lever, change.before, change.after) == (
        "training.local_batch_size",
        1,
        4,
    )
    assert "undecided (its interval straddles" in change.why and change.stacked_on is None
    # a loss is not pushed further
    state_down = play(
        new_state(text, max_pairs=1),
        lambda s: lbs2 if not s.steps else Stop(why="-"),
        table_rule({(("training.local_batch_size", 2),): [900.0]}, [1000.0, 1300.0]),
    )
    other = HeuristicPolicy().propose(state_down, Diagnosis(outcome="ok"), load_lessons(), space, RECORDS)
    assert not (
        isinstance(other, Change)
        and other.lever == "training.local_batch_size"
        and other.after == 4
        and "undecided" in other.why
    )


PP_RECIPE = _sim_recipe(
    "pp",
    """\
  training.disable_cuda_graphs: true
  parallelism.pipeline_parallel_degree: 2
  parallelism.pipeline_parallel_schedule: 1F1B
  activation_checkpoint: full
""",
)


@pytest.mark.parametrize(
    ("bubble", "recompute", "moot"),
    [
        (0.01, 0.30, {"parallelism.pipeline_parallel_schedule"}),
        (0.20, 0.01, {"activation_checkpoint"}),
        (0.20, 0.30, set()),
    ],
)
def test_a_lever_whose_whole_cost_is_inside_the_noise_band_is_not_proposed(
    bubble: float, recompute: float, moot: set[str]
) -> None:
    """Removing a 1% bubble entirely could not be measured against a 5% band: no schedule change is tried then."""
    state = play(new_state(PP_RECIPE), lambda s: Stop(why="-"), table_rule({}, [1000.0, 1010.0]))
    state = state.model_copy(update={"phase": "stepping", "finish_reason": ""})
    assert state.band.band == pytest.approx(0.05)
    space = space_fn(parse_recipe_text(PP_RECIPE))
    space.values = {
        k: v
        for k, v in space.values.items()
        if k in ("parallelism.pipeline_parallel_schedule", "activation_checkpoint")
    }
    diagnosis = Diagnosis(
        outcome="ok",
        tps=1000.0,
        breakdown={"compute": 1 - bubble - recompute, "bubble": bubble, "recompute": recompute},
    )
    policy = HeuristicPolicy()
    levers = set()
    for _ in range(12):  # everything it would propose from this incumbent, lessons and exploration alike
        proposal = policy.propose(state, diagnosis, LESSONS, space, RECORDS)
        if not isinstance(proposal, Change):
            break
        levers.add(proposal.lever)
        state = state.model_copy(
            update={
                "steps": [
                    *state.steps,
                    cm.Step(
                        n=len(state.steps) + 1,
                        change=proposal,
                        state="closed",
                        levers={**state.incumbent_levers, proposal.lever: proposal.after},
                    ),
                ]
            }
        )
    assert levers.isdisjoint(moot) and set(space.values) - moot <= levers


def test_blind_exploration_never_undoes_a_kept_step() -> None:
    text = recipe_text()
    space = space_fn(parse_recipe_text(text))
    space.values = {"training.local_batch_size": space.values["training.local_batch_size"]}
    lbs2 = Change(lever="training.local_batch_size", before=1, after=2, why="t")
    state = play(
        new_state(text),
        lambda s: lbs2 if not s.steps else Stop(why="-"),
        table_rule({(("training.local_batch_size", 2),): [2000.0, 2000.0]}, [1000.0, 1010.0]),
    )
    assert state.step(1).kept
    state = state.model_copy(update={"phase": "stepping", "finish_reason": ""})
    proposal = HeuristicPolicy().propose(state, OK, [], space, RECORDS)
    assert isinstance(proposal, Change) and proposal.after == 4  # up, never back down to 1


def test_patience_counts_device_hours_too() -> None:
    """After a kept step, failed starts and chains that cost a baseline run's device-hours end blind exploration."""
    text = recipe_text()
    space = space_fn(parse_recipe_text(text))
    script = [
        Change(lever="training.local_batch_size", before=1, after=2, why="t"),
        Change(lever="activation_checkpoint", before="full", after="none", why="t"),
        Change(lever="activation_checkpoint", before="full", after="selective", why="t"),
    ]
    table = {
        (("activation_checkpoint", "none"),): "crash",
        (("activation_checkpoint", "selective"),): "crash",
        (("training.local_batch_size", 2),): [2000.0, 2000.0],
    }
    decide = lambda s: script[len(s.steps)] if len(s.steps) < len(script) else Stop(why="-")  # noqa: E731
    for failed, stops in ((1, False), (2, True)):  # each failed start costs half a baseline run here
        state = play(
            new_state(text, budget=100.0),
            decide if failed == 2 else (lambda s: script[len(s.steps)] if len(s.steps) < 2 else Stop(why="-")),
            table_rule(table, [1000.0, 1010.0]),
            cost=0.01,
        )
        state = state.model_copy(update={"phase": "stepping", "finish_reason": ""})
        for st in state.steps[1:]:
            st.runs = [r.model_copy(update={"device_hours": 0.005}) for r in st.runs]
        proposal = HeuristicPolicy().propose(state, OK, [], space, RECORDS)
        assert isinstance(proposal, Stop) == stops, proposal
        if stops:
            assert "1.0 baseline runs' device-hours" in proposal.why


@pytest.mark.parametrize("blind", [True, False])
def test_a_blind_probe_that_ran_out_of_memory_gets_no_recompute_retry_once_patience_is_spent(blind: bool) -> None:
    """A blind probe that measured nothing and one that ran out of memory (a real start) spend the patience: the
    second's retry with more recompute is another blind probe, and the campaign stops instead. A lesson-driven
    change that ran out of memory keeps its retry (the rule that made the published campaigns)."""
    from bot.agent.history import EXPLORING

    text = recipe_text(activation_checkpoint="none")
    space = space_fn(parse_recipe_text(text))
    script = [
        Change(lever="training.local_batch_size", before=1, after=2, why="t"),
        Change(lever="training.local_batch_size", before=2, after=4, why=EXPLORING),
        Change(lever="compile.enable", before=False, after=True, why=EXPLORING if blind else "a lesson"),
    ]
    table = {
        (("compile.enable", True),): "oom",
        (("training.local_batch_size", 2),): [2000.0, 2000.0],
        (("training.local_batch_size", 4),): [1900.0, 1900.0],
    }
    state = play(
        new_state(text, budget=100.0),
        lambda s: script[len(s.steps)] if len(s.steps) < len(script) else Stop(why="-"),
        table_rule(table, [1000.0, 1010.0]),
        cost=0.01,
    )
    assert (
        state.incumbent_step == 1 and state.step(3).runs[0].outcome == "oom" and state.step(3).runs[0].device_hours > 0
    )
    state = state.model_copy(update={"phase": "stepping", "finish_reason": ""})
    proposal = HeuristicPolicy().propose(state, OK, [], space, RECORDS)
    if blind:
        assert isinstance(proposal, Stop) and "the last 2 measured steps gained nothing" in proposal.why, proposal
    else:
        assert isinstance(proposal, Change) and (proposal.lever, proposal.after, proposal.stacked_on) == (
            "activation_checkpoint",
            "selective",
            3,
        )


def test_an_enabler_that_never_ran_leaves_its_configuration_open() -> None:
    text = recipe_text()
    state, space = _state_and_space(text)
    lbs2 = Change(lever="training.local_batch_size", before=1, after=2, why="enabler of x=1: test", enabler=True)
    levers = {**state.incumbent_levers, "training.local_batch_size": 2}
    unrun = cm.Step(n=1, change=lbs2, state="closed", levers=levers)
    state = state.model_copy(update={"steps": [unrun]})
    assert validate_change(state, lbs2.model_copy(update={"enabler": False}), space) is None  # never measured: open
    ran = unrun.model_copy(update={"runs": [cm.RunRef(kind="trial", n=1, outcome="ok", tps=900.0)]})
    assert "already tried" in validate_change(state.model_copy(update={"steps": [ran]}), lbs2, space)


# ----------------------------------------------------------------------------- no gain in hand
@pytest.mark.parametrize(
    ("breakdown", "headroom", "stops"),
    [
        (
            {"compute": 0.97, "exposed_comm": 0.01, "bubble": 0.01, "recompute": 0.01},
            0.3,
            True,
        ),  # 3% addressable < 5% band
        (
            {"compute": 0.75, "exposed_comm": 0.01, "bubble": 0.0, "recompute": 0.24},
            0.01,
            True,
        ),  # recompute, but no memory for it
        (
            {"compute": 0.75, "exposed_comm": 0.01, "bubble": 0.0, "recompute": 0.24},
            0.30,
            False,
        ),  # recompute with memory to spare
        (
            {"compute": 0.80, "exposed_comm": 0.20, "bubble": 0.0, "recompute": 0.0},
            0.01,
            False,
        ),  # exposed communication
    ],
)
def test_with_nothing_addressable_in_the_diagnosis_the_agent_stops_before_the_first_step(
    breakdown, headroom, stops
) -> None:
    state = play(new_state(PP_RECIPE), lambda s: Stop(why="-"), table_rule({}, [1000.0, 1010.0]))
    state = state.model_copy(update={"phase": "stepping", "finish_reason": "", "steps": []})
    assert state.band.band == pytest.approx(0.05)
    diagnosis = Diagnosis(outcome="ok", tps=1000.0, breakdown=breakdown, mem_headroom_frac=headroom)
    proposal = HeuristicPolicy().propose(state, diagnosis, LESSONS, space_fn(parse_recipe_text(PP_RECIPE)), RECORDS)
    assert isinstance(proposal, Stop) == stops
    if stops:
        assert proposal.why.startswith("nothing measurable to win")


def test_with_no_gain_in_hand_no_new_move_starts_past_the_no_gain_share_of_the_budget() -> None:
    from bot.agent.stopping import NO_GAIN_SHARE

    # every step measures like the baseline: nothing is ever kept; each run costs 5% of the budget
    state = play(
        new_state(PP_RECIPE, budget=1.0),
        lambda s: HeuristicPolicy().propose(
            s, Diagnosis(outcome="ok"), LESSONS, space_fn(parse_recipe_text(PP_RECIPE)), RECORDS
        ),
        table_rule({}, [1000.0, 1010.0]),
        cost=0.05,
    )
    assert state.incumbent_step == 0 and state.steps
    assert state.finish_reason.startswith("policy stopped: no gain found")
    probes = sum(r.device_hours for st in state.steps for r in st.runs)
    # the steps' own spend: never past the share (each proposal carries what is left of it as its cap), and stopped
    # only once less than a run (the machine's estimate: 1.1 x the largest run record, a pair's two runs here) is left
    assert NO_GAIN_SHARE - state.expected_run_cost() <= probes <= NO_GAIN_SHARE + 1e-9
    assert state.spent > probes  # the baseline (the set-up) is not counted against it
    caps = [st.change.max_device_hours for st in state.steps]
    assert caps[0] == pytest.approx(NO_GAIN_SHARE) and all(c is not None for c in caps)
    assert caps == sorted(caps, reverse=True)  # what is left of the allowance, proposal after proposal


def test_the_no_gain_allowance_is_the_incumbents_addressable_share_when_that_is_smaller(monkeypatch) -> None:
    import bot.agent.heuristic as heuristic
    from bot.agent.stopping import NO_GAIN_SHARE, no_gain_share

    small = Diagnosis(
        outcome="ok",
        breakdown={"compute": 0.91, "exposed_comm": 0.09, "bubble": 0.0, "recompute": 0.0},
        mem_headroom_frac=0.5,
    )
    large = Diagnosis(
        outcome="ok",
        breakdown={"compute": 0.6, "exposed_comm": 0.2, "bubble": 0.0, "recompute": 0.2},
        mem_headroom_frac=0.5,
    )
    assert no_gain_share(small) == pytest.approx(0.09)
    assert no_gain_share(large) == NO_GAIN_SHARE
    assert no_gain_share(Diagnosis(outcome="ok")) == NO_GAIN_SHARE  # a CPU run's spans name no such cost
    # a recipe whose diagnosis says 9% is addressable: its first probe may spend 9% of the budget, and with less
    # than a run of that left the agent stops
    state = play(new_state(PP_RECIPE, budget=1.0), lambda s: Stop(why="-"), table_rule({}, [1000.0, 1010.0]), cost=0.02)
    state = state.model_copy(update={"phase": "stepping", "finish_reason": "", "steps": []})
    space = space_fn(parse_recipe_text(PP_RECIPE))
    first = HeuristicPolicy().propose(state, small, LESSONS, space, RECORDS)
    assert isinstance(first, Change) and first.max_device_hours == pytest.approx(0.09)
    spent = [
        cm.Step(
            n=n,
            change=first,
            state="closed",
            levers={**state.incumbent_levers, first.lever: first.after},
            runs=[cm.RunRef(kind="trial", n=n, outcome="ok", tps=1000.0, device_hours=0.035)],
        )
        for n in (1, 2)
    ]
    monkeypatch.setattr(heuristic, "incumbent_diagnosis", lambda campaign, records: small)  # the baseline run's record
    later = HeuristicPolicy().propose(state.model_copy(update={"steps": spent}), small, LESSONS, space, RECORDS)
    assert isinstance(later, Stop) and later.why.startswith("no gain found: 2 steps spent 7% of the budget")
    assert "a recipe with no gain in hand may spend 9% of the budget on probes" in later.why


def test_the_no_gain_stop_states_the_allowance_and_what_one_step_spent(monkeypatch) -> None:
    import bot.agent.heuristic as heuristic

    # the demo's stop: one step spent 28% of a 0.12 budget; the allowance is 22% of it (a run costs 0.0055: two runs'
    # floor, 2 x 1.1 x the 0.0117 trial, is less) -- the message used to call the spend itself the allowance ("1 steps spent 28% (the 28% ...)")
    state = play(
        new_state(PP_RECIPE, budget=0.12), lambda s: Stop(why="-"), table_rule({}, [1000.0, 1010.0]), cost=0.0055
    )
    state = state.model_copy(update={"phase": "stepping", "finish_reason": "", "steps": []})
    change = Change(lever="training.gc_freq", before=50, after=100, why="t")
    step = cm.Step(
        n=1,
        change=change,
        state="closed",
        levers={**state.incumbent_levers, "training.gc_freq": 100},
        runs=[
            cm.RunRef(kind="trial", n=1, outcome="ok", tps=1000.0, device_hours=0.0117),
            *(
                cm.RunRef(
                    kind="pair", n=1, attempt=k, outcome="ok", tps=1000.0, reference_tps=1000.0, device_hours=0.011
                )
                for k in (1, 2)
            ),
        ],
    )
    monkeypatch.setattr(heuristic, "incumbent_diagnosis", lambda campaign, records: None)
    monkeypatch.setattr(heuristic, "model_backed_probe", lambda ctx: None)  # no large predicted saving to go on for
    stop = HeuristicPolicy().propose(
        state.model_copy(update={"steps": [step]}), OK, LESSONS, space_fn(parse_recipe_text(PP_RECIPE)), RECORDS
    )
    assert isinstance(stop, Stop)
    assert stop.why.startswith(
        "no gain found: 1 step spent 28% of the budget and none beat the recipe; a recipe with no "
        "gain in hand may spend 22% of the budget on probes (a step whose estimate cleared the minimum gain was measured "
        "to its decision past it), and less than a run of it is left"
    )


def test_the_no_gain_stop_names_the_two_run_floor_when_it_is_the_allowance() -> None:
    from bot.agent.stopping import no_gain_allowance_text

    # a budget of 3 runs: 22% of it is less than two runs, which the allowance gives instead
    state = play(new_state(PP_RECIPE, budget=0.3), lambda s: Stop(why="-"), table_rule({}, [1000.0, 1010.0]), cost=0.1)
    assert no_gain_allowance_text(state, None) == (
        "a recipe with no gain in hand may spend 73% of the budget on probes "
        "(2 runs' device-hours, more than its 22% share)"
    )


def test_the_no_gain_allowance_always_leaves_one_probe_measured_to_its_first_pair() -> None:
    from bot.agent.stopping import MIN_PROBE_RUNS, no_gain_allowance_left

    # a budget of 3 runs: 22% of it is less than a trial and one incumbent run, which the allowance still gives
    state = play(new_state(PP_RECIPE, budget=0.3), lambda s: Stop(why="-"), table_rule({}, [1000.0, 1010.0]), cost=0.1)
    state = state.model_copy(update={"phase": "stepping", "finish_reason": "", "steps": []})
    assert no_gain_allowance_left(state, None) == pytest.approx(MIN_PROBE_RUNS * state.expected_run_cost())


def test_once_a_step_is_kept_proposals_carry_no_allowance() -> None:
    text = recipe_text()
    state, space = _state_and_space(text)
    kept = cm.Step(
        n=1,
        change=Change(lever="training.gc_freq", before=50, after=100, why="t"),
        state="merged",
        kept=True,
        levers={**state.incumbent_levers, "training.gc_freq": 100},
        gain=0.1,
    )
    state = state.model_copy(update={"steps": [kept], "incumbent_step": 1})
    proposal = HeuristicPolicy().propose(state, OK, LESSONS, space, RECORDS)
    assert isinstance(proposal, Change) and proposal.max_device_hours is None


# ----------------------------------------------------------------------------- a line search along what paid
@pytest.mark.parametrize(("kept_tps", "goes_on"), [(2000.0, True), (1080.0, False)])
def test_a_large_kept_gain_is_followed_one_notch_further_along_the_same_lever(kept_tps: float, goes_on: bool) -> None:
    text = recipe_text()
    space = space_fn(parse_recipe_text(text))
    lbs2 = Change(lever="training.local_batch_size", before=1, after=2, why="t")
    state = play(
        new_state(text, min_gain=0.02),
        lambda s: lbs2 if not s.steps else Stop(why="-"),
        table_rule({(("training.local_batch_size", 2),): [kept_tps]}, [1000.0, 1010.0]),
    )
    assert state.step(1).kept and (state.step(1).gain >= 0.10) == goes_on
    state = state.model_copy(update={"phase": "stepping", "finish_reason": ""})
    proposal = HeuristicPolicy().propose(state, OK, [], space, RECORDS)
    assert isinstance(proposal, Change)
    further = (proposal.lever, proposal.before, proposal.after) == (
        "training.local_batch_size",
        2,
        4,
    ) and "one notch further" in proposal.why
    assert further == goes_on


CHAIN_RECIPE = _sim_recipe(
    "chain",
    """\
  training.disable_cuda_graphs: true
  parallelism.data_parallel_shard_degree: -1
  parallelism.pipeline_parallel_degree: 1
  training.local_batch_size: 8
  activation_checkpoint: full
""",
)


@pytest.mark.parametrize(
    ("stacked_on_stages", "comm", "coupled"), [(True, 0.4, True), (True, 0.1, False), (False, 0.4, False)]
)
def test_a_large_kept_gain_enabled_by_more_stages_is_followed_by_the_same_coupling_one_notch_further(
    stacked_on_stages: bool, comm: float, coupled: bool
) -> None:
    """PP 1 -> 2 was the gated enabler of local batch 8 -> 16, kept together at +50 %. The local batch has no legal
    next notch on its own (32 x DP 4 overshoots the pinned global batch 64); the same coupling does: PP 2 -> 4 as the
    enabler of local batch 32 -- while the incumbent still spends a quarter of its step in exposed communication,
    what halving the DP ranks removes. Not with little communication left, nor for a local batch kept alone."""
    from bot.agent.space import layout_problem

    state, space = _state_and_space(CHAIN_RECIPE)
    base = dict(state.incumbent_levers)
    pp, lbs = "parallelism.pipeline_parallel_degree", "training.local_batch_size"
    assert layout_problem(space.recipe, {**base, pp: 2, lbs: 32}) is not None
    steps = []
    if stacked_on_stages:
        steps.append(
            cm.Step(
                n=1,
                change=Change(
                    lever=pp, before=1, after=2, why="enabler of training.local_batch_size=16: t", enabler=True
                ),
                state="closed",
                levers={**base, pp: 2},
                config_verdict=Verdict(verdict="ok", stage="config"),
            )
        )
    on = 1 if stacked_on_stages else None
    top = {**base, lbs: 16, **({pp: 2} if stacked_on_stages else {})}
    steps.append(
        _measured(
            len(steps) + 1,
            Change(lever=lbs, before=8, after=16, why="t", stacked_on=on),
            top,
            0.5,
            kept=True,
            stacked_on=on,
            outcome="ok",
        )
    )
    s = state.model_copy(update={"steps": steps, "incumbent_step": len(steps), "incumbent_levers": top})
    incumbent = Diagnosis(
        outcome="ok", breakdown={"compute": 0.9 - comm, "exposed_comm": comm, "bubble": 0.05, "recompute": 0.05}
    )
    got = keep_going(s, space, incumbent)
    if not coupled:
        assert got is None or got.lever != pp
        return
    assert isinstance(got, Change) and (got.lever, got.before, got.after, got.enabler, got.stacked_on) == (
        pp,
        2,
        4,
        True,
        None,
    )
    assert got.why.startswith(f"enabler of {lbs}=32:") and "the same coupling one notch further" in got.why
    assert validate_change(s, got, space) is None


@pytest.mark.parametrize(
    ("chain_ac", "headroom", "left"), [("full", 0.3, False), ("full", 0.01, True), (None, 0.3, True)]
)
def test_less_recompute_follows_a_rejected_coupling_only_where_the_recompute_is_the_couplings(
    monkeypatch, chain_ac, headroom, left
) -> None:
    """PP 2 -> 4 with the local batch that fills it measured behind the incumbent, recomputing 20 % of its step with
    memory to spare. The incumbent recomputes the same way with room to spare too: less recompute is its own move,
    not a follow-up on the rejected layout. Where the incumbent has no room, or the coupling added the recompute
    (an out-of-memory retry to full from the incumbent's selective), the follow-up stands."""
    import bot.agent.heuristic.follow_up as follow_up_module

    state, space = _state_and_space(CHAIN_RECIPE)
    pp, lbs, ac = "parallelism.pipeline_parallel_degree", "training.local_batch_size", "activation_checkpoint"
    inc = {**state.incumbent_levers, pp: 2, lbs: 16, ac: "full" if chain_ac else "selective"}
    gated = cm.Step(
        n=1,
        change=Change(lever=pp, before=2, after=4, why="enabler of training.local_batch_size=32: t", enabler=True),
        state="closed",
        levers={**inc, pp: 4},
        config_verdict=Verdict(verdict="ok", stage="config"),
    )
    top = {**inc, pp: 4, lbs: 32, ac: "full"}
    behind = _measured(
        2, Change(lever=lbs, before=16, after=32, why="t", stacked_on=1), top, -0.05, stacked_on=1, outcome="ok"
    )
    s = state.model_copy(update={"steps": [gated, behind], "incumbent_levers": inc})
    monkeypatch.setattr(
        follow_up_module,
        "incumbent_diagnosis",
        lambda campaign, records: Diagnosis(outcome="ok", mem_headroom_frac=headroom),
    )
    assert follow_up_module.recompute_left_behind(s, behind, space, RECORDS) == left
    d = Diagnosis(
        outcome="ok",
        breakdown={"compute": 0.7, "exposed_comm": 0.1, "bubble": 0.0, "recompute": 0.2},
        mem_headroom_frac=0.4,
    )
    fix = fix_for(s, space, d, top, stacked_on=2, why_prefix="step 2 ran", behind=-0.05, recompute_left=left)
    assert (isinstance(fix, Change) and (fix.lever, fix.after, fix.stacked_on) == (ac, "selective", 2)) == left


@pytest.mark.parametrize(
    ("recompute", "with_lessons", "fix"),
    [
        (0.1, True, ("parallelism.pipeline_parallel_schedule", "ZBVZeroBubble")),
        (0.3, True, ("activation_checkpoint", "selective")),
        (0.1, False, ("activation_checkpoint", "selective")),
    ],
)
def test_a_rejected_coupling_with_a_full_pipeline_and_a_bubble_left_gets_the_schedule_the_lessons_pick(
    recompute: float, with_lessons: bool, fix: tuple[str, str]
) -> None:
    """PP 1 -> 2 was the gated enabler of local batch 8 -> 16 (the pinned global batch's share: no larger one is
    legal), stopped early behind the incumbent with 20 % of its step in the bubble under the incumbent's 1F1B -- a
    schedule never chosen while it did nothing. The lessons matched on that run (its levers; its stopped outcome
    read as a run that ran) pick the zero-bubble schedule, stacked on it, before less recompute where the bubble is
    the larger cost; recompute the larger, or no lessons, and less recompute comes first as before."""
    state, space = _state_and_space(
        CHAIN_RECIPE.replace(
            "  activation_checkpoint: full",
            "  parallelism.pipeline_parallel_schedule: 1F1B\n  activation_checkpoint: full",
        )
    )
    pp, lbs = "parallelism.pipeline_parallel_degree", "training.local_batch_size"
    inc = dict(state.incumbent_levers)
    gated = cm.Step(
        n=1,
        change=Change(lever=pp, before=1, after=2, why="enabler of training.local_batch_size=16: t", enabler=True),
        state="closed",
        levers={**inc, pp: 2},
        config_verdict=Verdict(verdict="ok", stage="config"),
    )
    top = {**inc, pp: 2, lbs: 16}
    behind = _measured(2, Change(lever=lbs, before=8, after=16, why="t", stacked_on=1), top, -0.05, stacked_on=1)
    s = state.model_copy(update={"steps": [gated, behind]})
    d = Diagnosis(
        outcome="stopped",
        breakdown={"compute": 0.6, "exposed_comm": 0.1, "bubble": 0.2, "recompute": recompute},
        mem_headroom_frac=0.4,
    )
    got = fix_for(
        s,
        space,
        d,
        top,
        stacked_on=2,
        why_prefix="step 2 ran",
        behind=-0.05,
        lessons=load_lessons() if with_lessons else None,
    )
    assert isinstance(got, Change) and (got.lever, got.after, got.stacked_on) == (*fix, 2)
    assert validate_change(s, got, space) is None
    if fix[0] == "parallelism.pipeline_parallel_schedule":
        assert got.lessons == ["pp-zero-bubble-schedule"] and "20% pipeline bubble" in got.why


# ----------------------------------------------------------------------------- a bubble that only fewer DP ranks can shrink
BUBBLE_RECIPE = _sim_recipe(
    "bubble",
    """\
  training.disable_cuda_graphs: true
  parallelism.data_parallel_shard_degree: -1
  parallelism.tensor_parallel_degree: 1
  parallelism.pipeline_parallel_degree: 2
  parallelism.pipeline_parallel_schedule: 1F1B
  training.local_batch_size: 16
  activation_checkpoint: full
""",
)


def test_a_bubble_with_the_local_batch_at_its_share_trades_dp_ranks_for_microbatches() -> None:
    """PP 2 x DP 4 with the pinned global batch 64: local batch 16 is already 64 / 4, so only TP 2 (DP 2) lets it grow;
    TP 2 alone would add an accumulation step (a second flush), so TP is the enabler and local batch 32 is measured."""
    state, space = _state_and_space(BUBBLE_RECIPE)
    bubble = Diagnosis(
        outcome="ok", tps=1000.0, breakdown={"compute": 0.6, "exposed_comm": 0.05, "bubble": 0.3, "recompute": 0.05}
    )
    proposal = HeuristicPolicy().propose(state, bubble, [], space, RECORDS)
    assert (proposal.lever, proposal.before, proposal.after, proposal.enabler) == (
        "parallelism.tensor_parallel_degree",
        1,
        2,
        True,
    )
    assert proposal.lessons == ["pp-bubble-fewer-dp-ranks"] and proposal.why.startswith(
        "enabler of training.local_batch_size=32:"
    )
    gated = cm.Step(
        n=1,
        change=proposal,
        state="closed",
        levers={**state.incumbent_levers, "parallelism.tensor_parallel_degree": 2},
        config_verdict=Verdict(verdict="ok", stage="config"),
    )
    enabled = HeuristicPolicy().propose(state.model_copy(update={"steps": [gated]}), bubble, [], space, RECORDS)
    assert (enabled.lever, enabled.after, enabled.stacked_on) == ("training.local_batch_size", 32, 1)
    # without a bubble worth removing, no such move
    flat = Diagnosis(
        outcome="ok", tps=1000.0, breakdown={"compute": 0.9, "exposed_comm": 0.05, "bubble": 0.01, "recompute": 0.04}
    )
    other = HeuristicPolicy().propose(state, flat, [], space, RECORDS)
    assert not (isinstance(other, Change) and "pp-bubble-fewer-dp-ranks" in other.lessons)


def test_fewer_dp_ranks_never_enable_the_baselines_own_layout() -> None:
    """The recipe ran TP 2 at local batch 32; the campaign kept TP 2 -> 1 (on its enabler, local batch 16). Twice the TP
    degree with twice the local batch is the baseline's layout, which validation refuses to step to: proposing its
    enabler would gate it and propose it again, step after step (a scratch glm-4.5 campaign: 44 identical enablers)."""
    text = BUBBLE_RECIPE.replace("tensor_parallel_degree: 1", "tensor_parallel_degree: 2").replace(
        "local_batch_size: 16", "local_batch_size: 32"
    )
    state, space = _state_and_space(text)
    base = dict(state.incumbent_levers)
    tp, lbs = "parallelism.tensor_parallel_degree", "training.local_batch_size"
    enabler = Change(lever=lbs, before=32, after=16, why=f"enabler of {tp}=1: t", enabler=True)
    gated = cm.Step(
        n=1,
        change=enabler,
        state="closed",
        levers={**base, lbs: 16},
        config_verdict=Verdict(verdict="ok", stage="config"),
    )
    kept = _measured(
        2,
        Change(lever=tp, before=2, after=1, why="t", stacked_on=1),
        {**base, lbs: 16, tp: 1},
        0.09,
        kept=True,
        stacked_on=1,
        outcome="ok",
    )
    inc = {**base, lbs: 16, tp: 1}
    state = state.model_copy(
        update={"steps": [gated, kept], "incumbent_step": 2, "incumbent_levers": inc, "phase": "stepping"}
    )
    assert (
        validate_change(state, Change(lever=lbs, before=16, after=32, why="t"), space) is None
    )  # the step alone is open
    bubble = Diagnosis(
        outcome="ok", tps=1000.0, breakdown={"compute": 0.6, "exposed_comm": 0.05, "bubble": 0.3, "recompute": 0.05}
    )
    proposal = fewer_dp_ranks(state, bubble, space)
    assert proposal is None or proposal.lever != tp, proposal


@pytest.mark.parametrize("measured", [True, False])
def test_fewer_dp_ranks_get_one_measured_try_per_incumbent(measured: bool) -> None:
    """TP 2 as the enabler of local batch 32 measured slower: CP 2 would buy the same halving of the bubble, so it is
    not tried on that incumbent. A TP try that never ran (refused by the gate) leaves the CP one open."""
    text = BUBBLE_RECIPE.replace(
        "  activation_checkpoint: full\n", "  activation_checkpoint: full\n  parallelism.context_parallel_degree: 1\n"
    )
    state, space = _state_and_space(text)
    bubble = Diagnosis(
        outcome="ok", tps=1000.0, breakdown={"compute": 0.6, "exposed_comm": 0.05, "bubble": 0.3, "recompute": 0.05}
    )
    tp = HeuristicPolicy().propose(state, bubble, [], space, RECORDS)
    assert (tp.lever, tp.after, tp.enabler) == ("parallelism.tensor_parallel_degree", 2, True)
    tp_levers = {**state.incumbent_levers, "parallelism.tensor_parallel_degree": 2}
    gated = cm.Step(
        n=1, change=tp, state="closed", levers=tp_levers, config_verdict=Verdict(verdict="ok", stage="config")
    )
    lbs = HeuristicPolicy().propose(state.model_copy(update={"steps": [gated]}), bubble, [], space, RECORDS)
    runs = [cm.RunRef(kind="trial", n=2, outcome="stopped", tps=900.0)] if measured else []
    slower = cm.Step(
        n=2,
        change=lbs,
        stacked_on=1,
        state="closed",
        levers={**tp_levers, "training.local_batch_size": 32},
        runs=runs,
        gain=-0.1 if measured else None,
    )
    after = fewer_dp_ranks(state.model_copy(update={"steps": [gated, slower]}), bubble, space)
    if measured:
        assert after is None
    else:
        assert (after.lever, after.after, after.enabler) == ("parallelism.context_parallel_degree", 2, True)


COMM_RECIPE = _sim_recipe(
    "comm",
    """\
  parallelism.data_parallel_shard_degree: -1
  parallelism.tensor_parallel_degree: 1
  parallelism.pipeline_parallel_degree: 1
  training.local_batch_size: 4
  activation_checkpoint: full
""",
).replace("nodes: 1,", "nodes: 2,")


@pytest.mark.parametrize(("comm", "nodes", "fires"), [(0.40, 2, True), (0.10, 2, False), (0.40, 1, False)])
def test_exposed_fsdp_communication_across_nodes_trades_dp_ranks_for_a_larger_local_batch(
    comm: float, nodes: int, fires: bool
) -> None:
    """No PP, 16 FSDP ranks over two nodes, global batch 64 = local batch 4 x 16: TP 2 (in the node) as the enabler of
    local batch 8 -- only when exposed communication is large and the FSDP group crosses a node."""
    text = (
        COMM_RECIPE
        if nodes == 2
        else COMM_RECIPE.replace("nodes: 2,", "nodes: 1,").replace("global_batch_size: 64", "global_batch_size: 32")
    )
    state, space = _state_and_space(text)
    diagnosis = Diagnosis(
        outcome="ok",
        tps=1000.0,
        breakdown={"compute": 0.9 - comm, "exposed_comm": comm, "bubble": 0.0, "recompute": 0.1},
    )
    space.values = {
        k: v
        for k, v in space.values.items()
        if k in ("parallelism.tensor_parallel_degree", "training.local_batch_size")
    }
    proposal = HeuristicPolicy().propose(state, diagnosis, [], space, RECORDS)
    got = isinstance(proposal, Change) and proposal.lessons == ["fsdp-comm-fewer-dp-ranks"]
    assert got == fires, proposal
    if fires:
        assert (proposal.lever, proposal.after, proposal.enabler) == ("parallelism.tensor_parallel_degree", 2, True)
        assert proposal.why.startswith("enabler of training.local_batch_size=8:")


@pytest.mark.parametrize(
    ("comm", "recompute", "driven_first"), [(0.34, 0.07, True), (0.30, 0.35, False), (0.30, 0.20, False)]
)
def test_the_diagnosis_driven_move_goes_before_a_lesson_aimed_at_a_smaller_cost(
    comm: float, recompute: float, driven_first: bool
) -> None:
    """FSDP over two nodes spending a third of the step in exposed communication: fewer DP ranks (aimed at it) is
    measured before a less-recompute lesson aimed at 7 % of the step; where recompute is the larger cost, or not
    less than half of it, the lesson keeps its turn."""
    state, space = _state_and_space(COMM_RECIPE)
    diagnosis = Diagnosis(
        outcome="ok",
        tps=1000.0,
        breakdown={"compute": 1 - comm - recompute, "exposed_comm": comm, "bubble": 0.0, "recompute": recompute},
    )
    space.values = {
        k: v
        for k, v in space.values.items()
        if k in ("parallelism.tensor_parallel_degree", "training.local_batch_size", "activation_checkpoint")
    }
    less_ac = _lesson("less-ac", {"lever": "activation_checkpoint", "value": "selective"})
    proposal = HeuristicPolicy().propose(state, diagnosis, [less_ac], space, RECORDS)
    if driven_first:
        assert proposal.lessons == ["fsdp-comm-fewer-dp-ranks"] and proposal.enabler, proposal
    else:
        assert (proposal.lever, proposal.after, proposal.lessons) == ("activation_checkpoint", "selective", ["less-ac"])


def test_a_lesson_aimed_at_the_same_cost_goes_before_the_diagnosis_driven_move() -> None:
    """The same third of the step in exposed communication, the same less-recompute lesson first in the catalog: a
    lesson aimed at the exposed communication too (resharding off, one lever) is measured before fewer DP ranks (a
    layout change); without one the driven move keeps its turn (the test above)."""
    state, space = _state_and_space(
        COMM_RECIPE.replace(
            "  activation_checkpoint: full\n",
            "  activation_checkpoint: full\n  parallelism.fsdp_reshard_after_forward: default\n",
        )
    )
    diagnosis = Diagnosis(
        outcome="ok", tps=1000.0, breakdown={"compute": 0.59, "exposed_comm": 0.34, "bubble": 0.0, "recompute": 0.07}
    )
    space.values = {
        k: v
        for k, v in space.values.items()
        if k
        in (
            "parallelism.tensor_parallel_degree",
            "training.local_batch_size",
            "activation_checkpoint",
            "parallelism.fsdp_reshard_after_forward",
        )
    }
    less_ac = _lesson("less-ac", {"lever": "activation_checkpoint", "value": "selective"})
    reshard = _lesson("reshard", {"lever": "parallelism.fsdp_reshard_after_forward", "value": "never"}, priority=1)
    assert less_ac.priority > reshard.priority  # the less-recompute lesson is the first lesson
    proposal = HeuristicPolicy().propose(state, diagnosis, [less_ac, reshard], space, RECORDS)
    assert (proposal.lever, proposal.after, proposal.lessons) == (
        "parallelism.fsdp_reshard_after_forward",
        "never",
        ["reshard"],
    )


@pytest.mark.parametrize(
    ("nodes", "comm", "pp", "fires"), [(2, 0.9, 1, True), (1, 0.9, 1, False), (2, 0.3, 1, False), (2, 0.9, 2, False)]
)
def test_pipeline_stages_across_nodes_are_tried_only_when_fsdp_communication_dominates_a_multi_node_step(
    nodes, comm, pp, fires
) -> None:
    from bot.agent.lessons import relevant

    ctx = {
        "diagnosis.outcome": "ok",
        "diagnosis.breakdown.exposed_comm_frac": comm,
        "recipe.nodes": nodes,
        "recipe.hardware": "h100-sxm-80gb",
        "levers.parallelism.pipeline_parallel_degree": pp,
    }
    assert ("pp-across-nodes-when-fsdp-comm-dominates" in {ls.id for ls in relevant(LESSONS, ctx)}) == fires


def test_blind_exploration_skips_levers_that_do_nothing_in_the_incumbents_layout() -> None:
    """Without PP the PP microbatch size and schedule are never read: exploring them would only measure noise."""
    text = recipe_text()
    space = space_fn(parse_recipe_text(text))
    pp_levers = ("parallelism.pipeline_parallel_microbatch_size", "parallelism.pipeline_parallel_schedule")
    space.values = {
        "parallelism.pipeline_parallel_microbatch_size": [1, 2, 4],
        "parallelism.pipeline_parallel_schedule": ["1F1B", "GPipe"],
        "training.local_batch_size": space.values["training.local_batch_size"],
    }
    state = new_state(text).model_copy(update={"phase": "stepping"})
    proposal = HeuristicPolicy().propose(state, OK, [], space, RECORDS)
    assert isinstance(proposal, Change) and proposal.lever == "training.local_batch_size"
    space.values = {k: space.values[k] for k in pp_levers}  # nothing but inert levers left: stop, not a blind probe
    proposal = HeuristicPolicy().propose(state, OK, [], space, RECORDS)
    assert isinstance(proposal, Stop)


ZBV_RECIPE = _sim_recipe(
    "zbv",
    """\
  training.disable_cuda_graphs: true
  parallelism.pipeline_parallel_degree: 2
  parallelism.pipeline_parallel_schedule: ZBVZeroBubble
  training.local_batch_size: 8
  compile.enable: false
  activation_checkpoint: none
""",
)


@pytest.mark.parametrize(
    ("bubble", "ac", "swaps"), [(0.02, "none", True), (0.20, "none", False), (0.02, "selective", False)]
)
def test_compile_over_a_v_shaped_schedule_is_stacked_on_the_compile_safe_zero_bubble_schedule(
    bubble: float, ac: str, swaps: bool
) -> None:
    """compile-on-gpu over ZBVZeroBubble (which crashes under compile, pytorch#161904): the schedule swap to
    InterleavedZeroBubble is the enabler (gated, not run: alone it may lose a little), compile is stacked on it --
    while the incumbent's bubble is small and it does not recompute; with a fifth of its step in the bubble the kept
    schedule still bounds the step, and under recompute InterleavedZeroBubble crawls (torchtitan#773): no swap."""
    from bot.core.recipe import set_lever_text

    text = set_lever_text(ZBV_RECIPE, "activation_checkpoint", ac)
    recipe = parse_recipe_text(text)
    state = new_state(text).model_copy(update={"phase": "stepping", "incumbent_tps": 1000.0})
    space = space_fn(recipe)
    space.values = {
        k: v for k, v in space.values.items() if k in ("compile.enable", "parallelism.pipeline_parallel_schedule")
    }
    compile_lesson = [lesson for lesson in LESSONS if lesson.id == "compile-on-gpu"]
    d = Diagnosis(outcome="ok", tps=1000.0, breakdown={"compute": 0.9 - bubble, "bubble": bubble, "exposed_comm": 0.1})
    proposal = HeuristicPolicy().propose(state, d, compile_lesson, space, RECORDS)
    swap = ("parallelism.pipeline_parallel_schedule", "InterleavedZeroBubble", True)
    assert ((proposal.lever, proposal.after, proposal.enabler) == swap) == swaps
    if not swaps:
        assert not (
            isinstance(proposal, Change) and proposal.lever == "compile.enable"
        )  # never compile on the V schedule itself
        return
    assert "pytorch#161904" in proposal.why and proposal.lessons == ["compile-on-gpu"]
    gated = cm.Step(
        n=1,
        change=proposal,
        state="closed",
        config_verdict=Verdict(verdict="ok", stage="config"),
        levers={**state.incumbent_levers, "parallelism.pipeline_parallel_schedule": "InterleavedZeroBubble"},
    )
    enabled = HeuristicPolicy().propose(state.model_copy(update={"steps": [gated]}), d, compile_lesson, space, RECORDS)
    assert (enabled.lever, enabled.after, enabled.stacked_on) == ("compile.enable", True, 1)


def _rejected_then_kept(kept_lever: str, kept_value: object):
    """A lesson's EP 1 -> 2 cut as clearly slower (step 1), then an unrelated step kept (step 2)."""
    from bot.core.recipe import set_lever_text

    ep = _lesson("ep", {"lever": "parallelism.expert_parallel_degree", "op": "double"})
    text = set_lever_text(
        (CPU_RECIPE.parents[2] / "bot/bench/tasks/qwen3-30b-a3b/b200x16.yaml").read_text(),
        "training.disable_cuda_graphs",
        True,
    )
    state, space = _state_and_space(text)
    base = dict(state.incumbent_levers)
    fresh = from_lessons(state, space, [ep], catalog.effective(base), set())
    assert isinstance(fresh, Change) and (fresh.lever, fresh.after) == ("parallelism.expert_parallel_degree", 2)
    slow = cm.Step(
        n=1,
        change=Change(lever="parallelism.expert_parallel_degree", before=1, after=2, lessons=["ep"], why="t"),
        state="closed",
        levers={**base, "parallelism.expert_parallel_degree": 2},
        measurement=cm.Measurement(
            estimate=-0.1, lo=-0.15, hi=-0.05, confidence=0.9, min_gain=0.05, decision="no_gain", cut=True
        ),
    )
    kept_levers = {**base, kept_lever: kept_value}
    kept = cm.Step(
        n=2,
        change=Change(lever=kept_lever, before=base.get(kept_lever), after=kept_value, why="t"),
        state="merged",
        levers=kept_levers,
        kept=True,
    )
    state = state.model_copy(update={"steps": [slow, kept], "incumbent_levers": kept_levers, "incumbent_step": 2})
    return state, space, [ep]


def test_a_lesson_change_measured_clearly_slower_is_not_proposed_again_after_an_unrelated_kept_step() -> None:
    state, space, lessons = _rejected_then_kept("activation_checkpoint", "selective")
    proposal = from_lessons(state, space, lessons, catalog.effective(state.incumbent_levers), set())
    assert proposal is None  # less recompute does not change what EP costs: it would measure the same
    # a kept change of a parallel degree is a new layout: the lesson may try it there
    state, space, lessons = _rejected_then_kept("parallelism.tensor_parallel_degree", 2)
    proposal = from_lessons(state, space, lessons, catalog.effective(state.incumbent_levers), set())
    assert isinstance(proposal, Change) and (proposal.lever, proposal.after) == (
        "parallelism.expert_parallel_degree",
        2,
    )


@pytest.mark.parametrize("chained", [False, True], ids=["alone", "as-an-enabler"])
@pytest.mark.parametrize(("kept_gain", "undone"), [(4.33, False), (0.03, True)])
def test_a_lesson_does_not_undo_a_kept_step_that_removed_a_tenth_of_the_step(
    kept_gain: float, undone: bool, chained: bool
) -> None:
    """pp-off-when-fsdp-may-fit proposed PP 2 -> 1 right after PP 1 -> 2 was kept at +433 %; a kept gain of 3 % may be
    revisited (what it traded may matter more later). PP 1 -> 2 kept as the enabler of a change stacked on it counts
    the same."""
    pp_off = _lesson("pp-off", {"lever": "parallelism.pipeline_parallel_degree", "value": 1})
    text = recipe_text()
    state, space = _state_and_space(text)
    space.values["parallelism.pipeline_parallel_degree"] = [1, 2]
    # (an earlier kept step changed the recompute mode: back at PP 1 it is not the baseline's configuration)
    levers = {**state.incumbent_levers, "parallelism.pipeline_parallel_degree": 2, "activation_checkpoint": "none"}
    pp2 = Change(lever="parallelism.pipeline_parallel_degree", before=1, after=2, why="t")
    if chained:
        enabler = cm.Step(n=1, change=pp2.model_copy(update={"enabler": True}), state="closed", levers=levers)
        levers = {**levers, "loss.num_chunks": 4}
        kept = cm.Step(
            n=2,
            change=Change(lever="loss.num_chunks", before=8, after=4, why="t", stacked_on=1),
            stacked_on=1,
            state="merged",
            levers=levers,
            kept=True,
            gain=kept_gain,
        )
        steps = [enabler, kept]
    else:
        steps = [cm.Step(n=1, change=pp2, state="merged", levers=levers, kept=True, gain=kept_gain)]
    state = state.model_copy(update={"steps": steps, "incumbent_levers": levers, "incumbent_step": len(steps)})
    proposal = from_lessons(state, space, [pp_off], catalog.effective(levers), set())
    assert (
        isinstance(proposal, Change) and (proposal.lever, proposal.after) == ("parallelism.pipeline_parallel_degree", 1)
    ) == undone


def test_a_blind_probe_gated_as_an_enabler_is_still_a_blind_probe() -> None:
    """_fill_first keeps the probe's why inside the enabler's: a retry stacked on the local batch it enabled is a
    blind probe's retry, which the patience stop bounds."""
    from bot.agent.history import EXPLORING, from_a_blind_probe

    state, _ = _state_and_space(recipe_text())
    pp = Change(
        lever="parallelism.pipeline_parallel_degree",
        before=1,
        after=2,
        enabler=True,
        why=f"enabler of training.local_batch_size=8: {EXPLORING}; alone, 2 stages at 1 microbatches ...",
    )
    lbs = Change(
        lever="training.local_batch_size", before=1, after=8, why="the change step 1 enabled (...)", stacked_on=1
    )
    lesson = pp.model_copy(update={"why": "enabler of training.local_batch_size=8: a lesson; alone, ..."})
    for root, blind in ((pp, True), (lesson, False)):
        steps = [cm.Step(n=1, change=root, state="closed"), cm.Step(n=2, change=lbs, stacked_on=1, state="closed")]
        assert from_a_blind_probe(state.model_copy(update={"steps": steps}), 2) == blind


FEW_MICROBATCHES = _sim_recipe(
    "few-microbatches",
    """\
  training.disable_cuda_graphs: true
  parallelism.data_parallel_shard_degree: -1
  parallelism.pipeline_parallel_degree: 2
  parallelism.pipeline_parallel_schedule: 1F1B
  training.local_batch_size: 4
  activation_checkpoint: full
""",
)


@pytest.mark.parametrize(
    ("pp", "local_batch", "schedule", "filled_to"),
    [(2, 4, "1F1B", 32), (1, 8, "1F1B", 16), (2, 32, "1F1B", None), (1, 8, "InterleavedZeroBubble", None)],
)
def test_more_pipeline_stages_at_few_microbatches_are_the_enabler_of_the_largest_local_batch(
    pp: int, local_batch: int, schedule: str, filled_to: int | None
) -> None:
    """PP 2 -> 4 on 8 devices with local batch 4 (4 microbatches per flush over 4 stages: (p-1)/m = 3/4, about 43 % of
    the step idle) would measure the bubble, not the layout: it is gated, not run, and the largest local batch the
    pinned global batch allows (64 over DP 2: 32) is stacked on it. So is PP 1 -> 2 at local batch 8 under 1F1B (1/8,
    about 11 %, over the BUBBLE_FRAC the fill acts on once measured; 16 legal over DP 4). Not gated: PP 2 -> 4 at
    local batch 32 (no larger local batch is legal) and PP 1 -> 2 at local batch 8 under a zero-bubble interleaved
    schedule (1/(2·8)/3, about 2 % of the step): a plain step."""
    from bot.core.recipe import set_lever_text

    text = set_lever_text(FEW_MICROBATCHES, "training.local_batch_size", local_batch)
    text = set_lever_text(text, "parallelism.pipeline_parallel_degree", pp)
    text = set_lever_text(text, "parallelism.pipeline_parallel_schedule", schedule)
    state, space = _state_and_space(text)
    plain = Change(lever="parallelism.pipeline_parallel_degree", before=pp, after=2 * pp, why="t")
    if filled_to is None:
        from bot.agent.space import layout_problem

        more = {**state.incumbent_levers, "parallelism.pipeline_parallel_degree": 2 * pp}
        assert layout_problem(space.recipe, more) is None
        assert (
            layout_problem(space.recipe, {**more, "training.local_batch_size": 2 * local_batch}) is None
            or local_batch == 32
        )
        assert fill_first(state, space, plain) is None
        return
    filled = fill_first(state, space, plain)
    assert (
        filled is not None
        and filled.enabler
        and filled.why.startswith(f"enabler of training.local_batch_size={filled_to}:")
    )
    pp_up = _lesson("pp-up", {"lever": "parallelism.pipeline_parallel_degree", "op": "double"})
    proposal = HeuristicPolicy().propose(state, OK, [pp_up], space, RECORDS)
    assert isinstance(proposal, Change) and (proposal.lever, proposal.after, proposal.enabler) == (
        "parallelism.pipeline_parallel_degree",
        2 * pp,
        True,
    )
    assert (
        proposal.why.startswith(f"enabler of training.local_batch_size={filled_to}:") and "(p-1)/(v·m)" in proposal.why
    )
    assert proposal.lessons == ["pp-up", "pp-fill-the-pipeline"]
    gated = cm.Step(
        n=1,
        change=proposal,
        state="closed",
        levers={**state.incumbent_levers, "parallelism.pipeline_parallel_degree": 2 * pp},
        config_verdict=Verdict(verdict="ok", stage="config"),
    )
    enabled = HeuristicPolicy().propose(state.model_copy(update={"steps": [gated]}), OK, [pp_up], space, RECORDS)
    assert (enabled.lever, enabled.before, enabled.after, enabled.stacked_on) == (
        "training.local_batch_size",
        local_batch,
        filled_to,
        1,
    )
    # once that configuration was measured (no gain), the change is no longer gated again and again: it runs alone, as before
    measured = cm.Step(
        n=2,
        change=enabled,
        stacked_on=1,
        state="closed",
        gain=-0.05,
        levers={**gated.levers, "training.local_batch_size": filled_to},
        runs=[cm.RunRef(kind="trial", n=2, outcome="stopped", tps=900.0)],
    )
    again = fill_first(
        state.model_copy(update={"steps": [gated, measured]}),
        space,
        proposal.model_copy(update={"enabler": False, "why": "t", "lessons": ["pp-up"]}),
    )
    assert again is None


def test_more_pipeline_stages_that_ran_out_of_memory_under_full_recompute_are_retried_with_twice_as_many() -> None:
    """PP 1 -> 2 out of memory under full recompute (FSDP over half the ranks keeps unsharded stage weights): the
    retry is PP 4, stacked on it -- a quarter of the layers per rank. A failed change that is no parallel degree
    (compile) is not re-sharded."""
    text = (CPU_RECIPE.parents[2] / "bot/bench/tasks/minimax-m2/h200x64.yaml").read_text()
    state, space = _state_and_space(text)
    base = dict(state.incumbent_levers)
    for lever, before, after, expected in (
        ("parallelism.pipeline_parallel_degree", 1, 2, ("parallelism.pipeline_parallel_degree", 4, 1)),
        ("compile.enable", False, True, None),
    ):
        levers = {**base, lever: after}
        oom = cm.Step(
            n=1,
            change=Change(lever=lever, before=before, after=after, why="t"),
            state="closed",
            levers=levers,
            runs=[cm.RunRef(kind="trial", n=1, outcome="oom", reason="not run: predicted to run out of memory")],
        )
        retry = oom_retry(state.model_copy(update={"steps": [oom]}), space)
        got = (retry.lever, retry.after, retry.stacked_on) if isinstance(retry, Change) else None
        assert got == expected, (lever, retry)
        if retry is not None:
            assert retry.lessons == ["oom-raise-pipeline-parallel"]


@pytest.mark.parametrize(
    ("compiled", "recompute", "expected"),
    [
        (False, "full", ("compile.enable", True, "oom-compile-under-full-recompute")),
        (True, "full", None),  # compiled already: nothing left to retry it with
        (False, "selective", ("activation_checkpoint", "full", OOM_LESSON)),  # recompute first
    ],
)
def test_a_larger_batch_out_of_memory_recomputing_all_it_can_is_retried_compiled(
    compiled: bool, recompute: str, expected: tuple | None
) -> None:
    """Local batch 4 -> 8 out of memory: under full recompute and eager, the retry is the same layout compiled, stacked
    on it (no recompute is left to add, and a batch change is not re-sharded)."""
    text = (CPU_RECIPE.parents[2] / "bot/bench/tasks/minimax-m2/h200x64.yaml").read_text()
    state, space = _state_and_space(text)
    levers = {
        **state.incumbent_levers,
        "compile.enable": compiled,
        "activation_checkpoint": recompute,
        "training.local_batch_size": 8,
    }
    state = state.model_copy(update={"incumbent_levers": {**levers, "training.local_batch_size": 4}})
    oom = cm.Step(
        n=1,
        change=Change(lever="training.local_batch_size", before=4, after=8, why="t"),
        state="closed",
        levers=levers,
        runs=[cm.RunRef(kind="trial", n=1, outcome="oom", reason="peak memory 81 GiB exceeds 80 GiB")],
    )
    retry = oom_retry(state.model_copy(update={"steps": [oom]}), space)
    got = (retry.lever, retry.after, retry.lessons[0]) if isinstance(retry, Change) else None
    assert got == expected, retry
    if retry is not None:
        assert retry.stacked_on == 1


DUALPIPE_AT_ITS_SHARE = (
    _sim_recipe(
        "dualpipe-share",
        """\
  training.disable_cuda_graphs: true
  parallelism.data_parallel_shard_degree: -1
  parallelism.pipeline_parallel_degree: 2
  parallelism.pipeline_parallel_schedule: DualPipeV
  training.local_batch_size: 4
  activation_checkpoint: full
""",
    )
    .replace("model: llama3-tiny", "model: llama3.1-8b")
    .replace("training.global_batch_size: 64", "training.global_batch_size: 16")
)


def test_more_stages_refused_by_dualpipev_for_too_few_microbatches_cross_on_the_zero_bubble_v_schedule() -> None:
    """Less recompute ran out of memory; its memory partner, PP 2 -> 4, is refused: DualPipeV needs 8 microbatches for
    8 stages and the local batch is the pinned global batch's share (4), while local batch 8 at PP 2 would not divide
    it -- no one-lever path. ZBVZeroBubble (the same V placement, no such bound) is stacked first as the enabler, the
    stages on it; once the local batch gives 8 microbatches, DualPipeV is proposed back -- not before."""
    from bot.agent.space import layout_problem

    state, space = _state_and_space(DUALPIPE_AT_ITS_SHARE)
    base = dict(state.incumbent_levers)
    pp4 = {**base, "activation_checkpoint": "selective", "parallelism.pipeline_parallel_degree": 4}
    assert "microbatches" in layout_problem(space.recipe, pp4)
    assert "divisible" in layout_problem(space.recipe, {**base, "training.local_batch_size": 8})
    sel = {**base, "activation_checkpoint": "selective"}
    oom = cm.Step(
        n=1,
        change=Change(lever="activation_checkpoint", before="full", after="selective", why="t"),
        state="closed",
        levers=sel,
        runs=[cm.RunRef(kind="trial", n=1, outcome="oom", reason="peak memory 90 GiB")],
    )
    s1 = state.model_copy(update={"steps": [oom]})
    stone = oom_retry(s1, space)
    assert isinstance(stone, Change)
    assert (stone.lever, stone.before, stone.after, stone.enabler, stone.stacked_on) == (
        "parallelism.pipeline_parallel_schedule",
        "DualPipeV",
        "ZBVZeroBubble",
        True,
        1,
    )
    assert (
        stone.why.startswith("enabler of parallelism.pipeline_parallel_degree=4:")
        and "pp-schedule-stepping-stone" in stone.lessons
    )
    zbv = {**sel, "parallelism.pipeline_parallel_schedule": "ZBVZeroBubble"}
    gated = cm.Step(
        n=2,
        change=stone,
        stacked_on=1,
        state="closed",
        levers=zbv,
        config_verdict=Verdict(verdict="ok", stage="config"),
    )
    s2 = state.model_copy(update={"steps": [oom, gated]})
    stages = HeuristicPolicy().propose(s2, OK, [], space, RECORDS)
    assert isinstance(stages, Change)
    # 4 stages under ZBVZeroBubble at 4 microbatches leave an analytic bubble of 3/(2·4)/3, 11 % of the step: the
    # stages are themselves the enabler of the largest local batch PP 4 allows (8), stacked on the schedule
    assert (stages.lever, stages.after, stages.stacked_on, stages.enabler) == (
        "parallelism.pipeline_parallel_degree",
        4,
        2,
        True,
    )
    assert stages.why.startswith("enabler of training.local_batch_size=8:")
    assert validate_change(s2, stages, space) is None
    # were the chain kept at local batch 4: DualPipeV is still refused, so it is not proposed back yet
    at4 = {**zbv, "parallelism.pipeline_parallel_degree": 4}
    kept = cm.Step(
        n=3,
        change=stages,
        stacked_on=2,
        state="closed",
        levers=at4,
        kept=True,
        gain=0.06,
        runs=[cm.RunRef(kind="trial", n=3, outcome="ok", tps=1060.0)],
    )
    s3 = state.model_copy(update={"steps": [oom, gated, kept], "incumbent_levers": at4, "incumbent_step": 3})
    assert restore_schedule(s3, space) is None
    # a later kept step doubles the local batch: now DualPipeV has its 8 microbatches and comes back
    at8 = {**at4, "training.local_batch_size": 8}
    lbs = cm.Step(
        n=4,
        change=Change(lever="training.local_batch_size", before=4, after=8, why="t"),
        state="closed",
        levers=at8,
        kept=True,
        gain=0.2,
        runs=[cm.RunRef(kind="trial", n=4, outcome="ok", tps=1270.0)],
    )
    s4 = state.model_copy(update={"steps": [oom, gated, kept, lbs], "incumbent_levers": at8, "incumbent_step": 4})
    back = restore_schedule(s4, space)
    assert isinstance(back, Change) and (back.lever, back.before, back.after, back.stacked_on) == (
        "parallelism.pipeline_parallel_schedule",
        "ZBVZeroBubble",
        "DualPipeV",
        None,
    )
    # a stone whose record does not say the schedule it replaced: nothing to restore
    unsaid = gated.model_copy(update={"change": stone.model_copy(update={"before": None})})
    assert restore_schedule(s4.model_copy(update={"steps": [oom, unsaid, kept, lbs]}), space) is None
    tried = cm.Step(
        n=5,
        change=back,
        state="closed",
        levers={**at8, "parallelism.pipeline_parallel_schedule": "DualPipeV"},
        runs=[cm.RunRef(kind="trial", n=5, outcome="stopped", tps=1200.0)],
    )
    assert restore_schedule(s4.model_copy(update={"steps": [*s4.steps, tried]}), space) is None
    # measured back once: a later kept step (a new incumbent) does not reopen it
    later = {**at8, "compile.enable": True}
    kept_later = cm.Step(
        n=6,
        change=Change(lever="compile.enable", before=False, after=True, why="t"),
        state="closed",
        levers=later,
        kept=True,
        gain=0.03,
        runs=[cm.RunRef(kind="trial", n=6, outcome="ok", tps=1300.0)],
    )
    s6 = s4.model_copy(update={"steps": [*s4.steps, tried, kept_later], "incumbent_levers": later, "incumbent_step": 6})
    assert restore_schedule(s6, space) is None
    # no stepping stone where the chain would pass MAX_CHAIN: the out-of-memory step already four deep
    from bot.agent import heuristic, history

    deep = [
        cm.Step(
            n=i,
            change=Change(
                lever="training.disable_cuda_graphs",
                before=False,
                after=True,
                why="t",
                enabler=True,
                stacked_on=i - 1 or None,
            ),
            stacked_on=i - 1 or None,
            state="closed",
            levers=base,
        )
        for i in range(1, 4)
    ]
    oom4 = oom.model_copy(update={"n": 4, "stacked_on": 3, "change": oom.change.model_copy(update={"stacked_on": 3})})
    assert history.chain_depth(state.model_copy(update={"steps": [*deep, oom4]}), oom4) == heuristic.MAX_CHAIN - 1
    assert oom_retry(state.model_copy(update={"steps": [*deep, oom4]}), space) is None


def test_a_memory_partner_that_runs_out_of_memory_is_retried_in_its_place_not_stacked_on_itself() -> None:
    """Less recompute ran out of memory; its partner PP 1 -> 2, stacked on it, ran out too: PP 1 -> 4 is stacked on
    the same recompute change, so the chain grows no deeper however many notches the partner needs (minimax-m2 on
    128 H100 reached PP 8 only as the fifth link of a chain, past the depth that lets it fill the pipeline)."""
    state, space = _state_and_space(CHAIN_RECIPE)
    base = dict(state.incumbent_levers)
    pp, ac = "parallelism.pipeline_parallel_degree", "activation_checkpoint"
    oom1 = cm.Step(
        n=1,
        change=Change(lever=ac, before="full", after="selective", why="t"),
        state="closed",
        levers={**base, ac: "selective"},
        runs=[cm.RunRef(kind="trial", n=1, outcome="oom")],
    )
    s1 = state.model_copy(update={"steps": [oom1]})
    first = oom_retry(s1, space)
    assert isinstance(first, Change) and (first.lever, first.before, first.after, first.stacked_on) == (pp, 1, 2, 1)
    oom2 = cm.Step(
        n=2,
        change=first,
        stacked_on=1,
        state="closed",
        levers={**base, ac: "selective", pp: 2},
        runs=[cm.RunRef(kind="trial", n=2, outcome="oom")],
    )
    again = oom_retry(s1.model_copy(update={"steps": [oom1, oom2]}), space)
    assert isinstance(again, Change)
    assert (again.lever, again.before, again.after, again.stacked_on) == (pp, 1, 4, 1) and "step 1 (" in again.why
    assert validate_change(s1.model_copy(update={"steps": [oom1, oom2]}), again, space) is None


@pytest.mark.parametrize(
    ("compiled", "pipeline", "partner"),
    [
        (True, False, ("activation_checkpoint", "memory_budget")),
        (True, True, ("parallelism.pipeline_parallel_degree", 2)),
        (False, False, ("training.local_batch_size", 4)),
    ],
)
def test_no_recompute_that_ran_out_of_memory_under_compile_keeps_part_of_the_saving_with_memory_budget(
    compiled: bool, pipeline: bool, partner: tuple[str, object]
) -> None:
    """Selective -> none ran out of memory. The layout partners come first (here more pipeline stages, where the
    recipe lets the tuner change them); with none, and torch.compile on the model, memory_budget recompute (the
    compiler's partitioner under a budget) in its place -- the layout unchanged -- before half the local batch;
    without compile memory_budget would need a prerequisite, and half the local batch comes as before.
    memory_budget -> none is the next step down the recompute ladder."""
    import bot.agent.heuristic as heuristic

    text = _sim_recipe(
        "budget",
        "  training.disable_cuda_graphs: true\n  parallelism.data_parallel_shard_degree: -1\n"
        + ("  parallelism.pipeline_parallel_degree: 1\n" if pipeline else "")
        + "  training.local_batch_size: 8\n  activation_checkpoint: selective\n"
        + f"  compile.enable: {'true' if compiled else 'false'}\n",
    )
    state, space = _state_and_space(text)
    ac = "activation_checkpoint"
    oom = cm.Step(
        n=1,
        change=Change(lever=ac, before="selective", after="none", why="t"),
        state="closed",
        levers={**state.incumbent_levers, ac: "none"},
        runs=[cm.RunRef(kind="trial", n=1, outcome="oom")],
    )
    s = state.model_copy(update={"steps": [oom]})
    got = oom_retry(s, space)
    assert isinstance(got, Change) and (got.lever, got.after) == partner
    assert validate_change(s, got, space) is None
    if got.lever == ac:  # in place of the change to none: a step from the incumbent, not stacked on the failed one
        assert (
            got.lessons == ["less-recompute-partner-memory-budget"]
            and got.stacked_on is None
            and got.before == "selective"
        )
    else:
        assert got.stacked_on == 1
    assert heuristic.LESS_RECOMPUTE["memory_budget"] == "none"
    if pipeline and compiled:  # its partner ran out of memory too, one notch further as well: memory_budget in place
        pp = "parallelism.pipeline_parallel_degree"
        p2 = cm.Step(
            n=2,
            change=got,
            stacked_on=1,
            state="closed",
            levers={**oom.levers, pp: 2},
            runs=[cm.RunRef(kind="trial", n=2, outcome="oom")],
        )
        p4 = cm.Step(
            n=3,
            change=Change(lever=pp, before=1, after=4, why="t", stacked_on=1),
            stacked_on=1,
            state="closed",
            levers={**oom.levers, pp: 4},
            runs=[cm.RunRef(kind="trial", n=3, outcome="oom")],
        )
        s = state.model_copy(update={"steps": [oom, p2, p4]})
        last = oom_retry(s, space)
        assert isinstance(last, Change) and (last.lever, last.after, last.stacked_on) == (ac, "memory_budget", None)
        assert "its memory partners too" in last.why


EP_RECIPE = CPU_RECIPE.parents[2] / "bot/bench/tasks/deepseek-v3/h200x256.yaml"


def test_a_schedule_refused_for_too_few_microbatches_at_the_batch_share_comes_through_a_two_enabler_chain() -> None:
    """The incumbent runs ZBVZeroBubble over 8 stages at local batch 4, the pinned global batch's share; DualPipeV
    (what the MoE lesson asks for) needs 16 microbatches. No local batch at this DP degree gives them, so four times
    the TP degree (inside the node) is the enabler of local batch 16, which is itself the gated enabler of DualPipeV,
    stacked and measured on both. The layout alone (under ZBVZeroBubble) is never measured for it; once that
    configuration was stepped, no chain is proposed."""
    from bot.agent.space import layout_problem

    state, space = _state_and_space(EP_RECIPE.read_text())
    sched, tp, lbs = (
        "parallelism.pipeline_parallel_schedule",
        "parallelism.tensor_parallel_degree",
        "training.local_batch_size",
    )
    zbv = {**state.incumbent_levers, sched: "ZBVZeroBubble"}
    kept = _measured(
        1,
        Change(lever=sched, before="Interleaved1F1B", after="ZBVZeroBubble", why="t"),
        zbv,
        1.0,
        kept=True,
        outcome="ok",
    )
    s1 = state.model_copy(update={"steps": [kept], "incumbent_step": 1, "incumbent_levers": zbv})
    assert "microbatches" in layout_problem(space.recipe, {**zbv, sched: "DualPipeV"})
    first = checked(s1, space, sched, "DualPipeV", "hides the all-to-all", ["moe-pp-dualpipe-hides-all-to-all"])
    assert isinstance(first, Change)
    assert (first.lever, first.before, first.after, first.enabler, first.stacked_on) == (tp, 1, 4, True, None)
    assert first.why.startswith(f"enabler of {lbs}=16, then {sched}=DualPipeV:")
    assert "pp-schedule-microbatches-fewer-dp-ranks" in first.lessons and validate_change(s1, first, space) is None
    gated = cm.Step(
        n=2, change=first, state="closed", levers={**zbv, tp: 4}, config_verdict=Verdict(verdict="ok", stage="config")
    )
    s2 = s1.model_copy(update={"steps": [kept, gated]})
    second = HeuristicPolicy().propose(s2, OK, LESSONS, space, RECORDS)
    assert isinstance(second, Change)
    assert (second.lever, second.before, second.after, second.enabler, second.stacked_on) == (lbs, 4, 16, True, 2)
    assert second.why.startswith(f"enabler of {sched}=DualPipeV:") and validate_change(s2, second, space) is None
    gated2 = cm.Step(
        n=3,
        change=second,
        stacked_on=2,
        state="closed",
        levers={**zbv, tp: 4, lbs: 16},
        config_verdict=Verdict(verdict="ok", stage="config"),
    )
    s3 = s1.model_copy(update={"steps": [kept, gated, gated2]})
    third = HeuristicPolicy().propose(s3, OK, LESSONS, space, RECORDS)
    assert isinstance(third, Change)
    assert (third.lever, third.before, third.after, third.enabler, third.stacked_on) == (
        sched,
        "ZBVZeroBubble",
        "DualPipeV",
        False,
        3,
    )
    assert validate_change(s3, third, space) is None
    measured = _measured(4, third, {**zbv, tp: 4, lbs: 16, sched: "DualPipeV"}, -0.02, stacked_on=3)
    s4 = s1.model_copy(update={"steps": [kept, gated, gated2, measured]})
    assert checked(s4, space, sched, "DualPipeV", "t", ["moe-pp-dualpipe-hides-all-to-all"]) is None


def test_a_schedule_refused_for_too_few_microbatches_below_the_batch_share_gets_the_local_batch_alone() -> None:
    """With gradient accumulation (PP 2 over 256 ranks: DP 128, global batch 512, local batch 2 -- half its share of
    4), DualPipeV's 4 stages need 4 microbatches: local batch 4 gives them at the same DP degree, so it alone is the
    enabler, with no degree change."""
    from bot.core.recipe import set_lever_text

    text = set_lever_text(
        set_lever_text(EP_RECIPE.read_text(), "training.local_batch_size", 2), "parallelism.pipeline_parallel_degree", 2
    )
    text = text.replace("training.global_batch_size: 128", "training.global_batch_size: 512")
    state, space = _state_and_space(text)
    sched, lbs = "parallelism.pipeline_parallel_schedule", "training.local_batch_size"
    got = checked(state, space, sched, "DualPipeV", "t", ["moe-pp-dualpipe-hides-all-to-all"])
    assert isinstance(got, Change)
    assert (got.lever, got.before, got.after, got.enabler) == (lbs, 2, 4, True)
    assert got.why.startswith(f"enabler of {sched}=DualPipeV:")


def _measured(
    n: int,
    change: Change,
    levers: dict,
    gain: float,
    *,
    kept: bool = False,
    stacked_on: int | None = None,
    outcome: str = "stopped",
) -> cm.Step:
    return cm.Step(
        n=n,
        change=change,
        stacked_on=stacked_on,
        state="closed",
        levers=levers,
        kept=kept,
        gain=gain,
        runs=[cm.RunRef(kind="trial", n=n, outcome=outcome, tps=1000.0 * (1 + gain))],
    )


@pytest.mark.parametrize(("retry_gain", "retried"), [(-0.23, False), (-0.04, True)])
def test_a_recompute_retry_measured_far_slower_is_not_made_again_for_the_same_change(
    retry_gain: float, retried: bool
) -> None:
    """EP 32 -> 16 ran out of memory and its full-recompute retry measured -23 %; after a kept TP change the same EP
    change ran out of memory again: the same retry is not made again (recompute costs the same share again). A retry
    that lost only a little may still pay on the new layout: it is made."""
    state, space = _state_and_space(EP_RECIPE.read_text())
    base = dict(state.incumbent_levers)
    ep, ac = "parallelism.expert_parallel_degree", "activation_checkpoint"
    ep_down = Change(lever=ep, before=32, after=16, why="t")
    oom1 = cm.Step(
        n=1, change=ep_down, state="closed", levers={**base, ep: 16}, runs=[cm.RunRef(kind="trial", n=1, outcome="oom")]
    )
    retry1 = _measured(
        2,
        Change(lever=ac, before="selective", after="full", why="t", stacked_on=1),
        {**base, ep: 16, ac: "full"},
        retry_gain,
        stacked_on=1,
    )
    tp = "parallelism.tensor_parallel_degree"
    kept = _measured(3, Change(lever=tp, before=1, after=2, why="t"), {**base, tp: 2}, 0.05, kept=True, outcome="ok")
    oom2 = cm.Step(
        n=4,
        change=ep_down,
        state="closed",
        levers={**base, tp: 2, ep: 16},
        runs=[cm.RunRef(kind="trial", n=4, outcome="oom")],
    )
    s = state.model_copy(
        update={"steps": [oom1, retry1, kept, oom2], "incumbent_step": 3, "incumbent_levers": {**base, tp: 2}}
    )
    retry = oom_retry(s, space)
    assert (isinstance(retry, Change) and (retry.lever, retry.after, retry.stacked_on) == (ac, "full", 4)) == retried, (
        retry
    )


@pytest.mark.parametrize(
    ("kept_lever", "retried"),
    [("parallelism.fsdp_reshard_after_forward", False), ("parallelism.tensor_parallel_degree", True)],
)
def test_a_recompute_retry_measured_clearly_slower_is_not_made_again_until_a_degree_changes(
    kept_lever: str, retried: bool
) -> None:
    """CP 4 -> 2 ran out of memory and its selective retry measured -7 % with its interval wholly below zero; after a
    kept reshard-after-forward change (no parallel degree moved) the same CP change ran out of memory again: the
    layout is the same, and the retry is not made again. After a kept TP change (a new layout) it is."""
    from bot.core.state import Measurement

    state, space = _state_and_space(EP_RECIPE.read_text())
    base = dict(state.incumbent_levers)
    cp, ac = "parallelism.context_parallel_degree", "activation_checkpoint"
    base = {**base, cp: 4, ac: "none"}
    state = state.model_copy(update={"incumbent_levers": base})
    cp_down = Change(lever=cp, before=4, after=2, why="t")
    oom1 = cm.Step(
        n=1, change=cp_down, state="closed", levers={**base, cp: 2}, runs=[cm.RunRef(kind="trial", n=1, outcome="oom")]
    )
    retry1 = _measured(
        2,
        Change(lever=ac, before="none", after="selective", why="t", stacked_on=1),
        {**base, cp: 2, ac: "selective"},
        -0.071,
        stacked_on=1,
    )
    retry1.measurement = Measurement(
        estimate=-0.071, lo=-0.10, hi=-0.04, confidence=0.9, min_gain=0.0075, pairs=1, decision="no_gain"
    )
    after = {"parallelism.fsdp_reshard_after_forward": "never", "parallelism.tensor_parallel_degree": 2}[kept_lever]
    kept = _measured(
        3,
        Change(lever=kept_lever, before=base[kept_lever], after=after, why="t"),
        {**base, kept_lever: after},
        0.02,
        kept=True,
        outcome="ok",
    )
    now = {**base, kept_lever: after}
    oom2 = cm.Step(
        n=4, change=cp_down, state="closed", levers={**now, cp: 2}, runs=[cm.RunRef(kind="trial", n=4, outcome="oom")]
    )
    s = state.model_copy(update={"steps": [oom1, retry1, kept, oom2], "incumbent_step": 3, "incumbent_levers": now})
    retry = oom_retry(s, space)
    assert (
        isinstance(retry, Change) and (retry.lever, retry.after, retry.stacked_on) == (ac, "selective", 4)
    ) == retried, retry


@pytest.mark.parametrize("aimed_at_the_same_cost", [True, False])
def test_a_small_kept_gain_is_measured_the_other_way_once_a_large_layout_change_is_kept_after_it(
    aimed_at_the_same_cost: bool,
) -> None:
    """EP 32 -> 16 was kept at +3.8 % for its exposed all-to-all; DualPipeV (the MoE lesson that fires on exposed
    communication), kept after it at +22 %, hides the all-to-all: right after that, EP back to 32 is measured once on
    the incumbent (it measured +18 %). Not before a large layout change, not a second time, and not after one aimed
    at another cost (TP 1 -> 4 for the bubble)."""
    state, space = _state_and_space(EP_RECIPE.read_text())
    base = dict(state.incumbent_levers)
    ep, sched, tp = (
        "parallelism.expert_parallel_degree",
        "parallelism.pipeline_parallel_schedule",
        "parallelism.tensor_parallel_degree",
    )
    small = _measured(
        1,
        Change(lever=ep, before=32, after=16, why="t", lessons=["ep-within-node"]),
        {**base, ep: 16},
        0.038,
        kept=True,
        outcome="ok",
    )
    at16 = {**base, ep: 16}
    s1 = state.model_copy(update={"steps": [small], "incumbent_step": 1, "incumbent_levers": at16})
    assert second_pass(s1, space, LESSONS) is None
    dual = {**at16, sched: "DualPipeV", tp: 4, "training.local_batch_size": 16}
    big_change = (
        Change(
            lever=sched, before=base[sched], after="DualPipeV", why="t", lessons=["moe-pp-dualpipe-hides-all-to-all"]
        )
        if aimed_at_the_same_cost
        else Change(lever=tp, before=1, after=4, why="t", lessons=["pp-bubble-fewer-dp-ranks"])
    )
    big = _measured(2, big_change, dual, 0.22, kept=True, outcome="ok")
    s2 = state.model_copy(update={"steps": [small, big], "incumbent_step": 2, "incumbent_levers": dual})
    back = second_pass(s2, space, LESSONS, just_kept=True)
    if not aimed_at_the_same_cost:
        assert back is None and second_pass(s2, space, LESSONS) is None
        return
    assert isinstance(back, Change) and (back.lever, back.before, back.after, back.stacked_on) == (ep, 16, 32, None)
    assert back.lessons == ["second-pass-over-small-gains"] and "step 2" in back.why
    # a small step whose record does not say the value before it: no way back to measure (was a ValidationError: a
    # change to None)
    unsaid = small.model_copy(update={"change": small.change.model_copy(update={"before": None})})
    assert second_pass(s2.model_copy(update={"steps": [unsaid, big]}), space, LESSONS, just_kept=True) is None
    tried = _measured(3, back, {**dual, ep: 32}, -0.05)
    assert (
        second_pass(
            state.model_copy(update={"steps": [small, big, tried], "incumbent_step": 2, "incumbent_levers": dual}),
            space,
            LESSONS,
        )
        is None
    )
    # not a second time on a later incumbent either
    later = {**dual, "compile.enable": True}
    kept_later = _measured(
        4, Change(lever="compile.enable", before=False, after=True, why="t"), later, 0.03, kept=True, outcome="ok"
    )
    assert (
        second_pass(
            state.model_copy(
                update={"steps": [small, big, tried, kept_later], "incumbent_step": 4, "incumbent_levers": later}
            ),
            space,
            LESSONS,
        )
        is None
    )
    # a later step that is not the large one: right-after mode waits for the lessons
    other = _measured(
        3, Change(lever="compile.enable", before=False, after=True, why="t"), {**dual, "compile.enable": True}, -0.02
    )
    s3 = state.model_copy(update={"steps": [small, big, other], "incumbent_step": 2, "incumbent_levers": dual})
    assert second_pass(s3, space, LESSONS, just_kept=True) is None
    assert second_pass(s3, space, LESSONS) is not None


@pytest.mark.parametrize(("schedule", "swaps"), [("DualPipeV", False), ("ZBVZeroBubble", True)])
def test_compile_does_not_swap_dualpipev_away_under_expert_parallel(schedule: str, swaps: bool) -> None:
    """Under expert parallel DualPipeV hides the all-to-all under the other direction's compute: the compile-safe
    InterleavedZeroBubble would expose it again (deepseek-v3 on 256 H200: -29 %), so compile's prerequisite swap is
    not proposed from it; from ZBVZeroBubble, which hides nothing, it still is."""
    from bot.core.recipe import set_lever_text

    text = EP_RECIPE.read_text()
    for lever, value in (
        ("parallelism.pipeline_parallel_schedule", schedule),
        ("parallelism.tensor_parallel_degree", 4),
        ("training.local_batch_size", 16),
        ("activation_checkpoint", "none"),
    ):
        text = set_lever_text(text, lever, value)
    recipe = parse_recipe_text(text)
    state = new_state(text).model_copy(update={"phase": "stepping", "incumbent_tps": 1000.0})
    space = space_fn(recipe)
    space.values = {
        k: v for k, v in space.values.items() if k in ("compile.enable", "parallelism.pipeline_parallel_schedule")
    }
    d = Diagnosis(outcome="ok", tps=1000.0, breakdown={"compute": 0.88, "bubble": 0.02, "exposed_comm": 0.1})
    compile_lesson = [lesson for lesson in LESSONS if lesson.id == "compile-on-gpu"]
    proposal = HeuristicPolicy().propose(state, d, compile_lesson, space, RECORDS)
    swap = isinstance(proposal, Change) and (proposal.lever, proposal.after, proposal.enabler) == (
        "parallelism.pipeline_parallel_schedule",
        "InterleavedZeroBubble",
        True,
    )
    assert swap == swaps, proposal


def test_the_second_pass_leaves_a_small_local_batch_gain_alone() -> None:
    """A larger local batch only spends memory (no trade a later layout change could reverse): after a kept
    schedule change aimed at the same bubble, it is not measured back (405B: local batch 256 -> 32 measured -17 %)."""
    state, space = _state_and_space(EP_RECIPE.read_text())
    base = dict(state.incumbent_levers)
    lbs, sched, tp = (
        "training.local_batch_size",
        "parallelism.pipeline_parallel_schedule",
        "parallelism.tensor_parallel_degree",
    )
    at4 = {**base, tp: 4, lbs: 8}
    small = _measured(
        1,
        Change(lever=lbs, before=8, after=16, why="t", lessons=["pp-fill-the-pipeline"]),
        {**at4, lbs: 16},
        0.04,
        kept=True,
        outcome="ok",
    )
    zbv = {**at4, lbs: 16, sched: "ZBVZeroBubble"}
    big = _measured(
        2,
        Change(lever=sched, before=base[sched], after="ZBVZeroBubble", why="t", lessons=["pp-zero-bubble-schedule"]),
        zbv,
        0.2,
        kept=True,
        outcome="ok",
    )
    s2 = state.model_copy(update={"steps": [small, big], "incumbent_step": 2, "incumbent_levers": zbv})
    from bot.agent.space import layout_problem

    assert layout_problem(space.recipe, {**zbv, lbs: 8}) is None  # measuring it back would be legal
    assert second_pass(s2, space, LESSONS, just_kept=True) is None
    assert second_pass(s2, space, LESSONS) is None


def _screened(n: int, change: Change, levers: dict) -> cm.Step:
    """Step ``n``: ``change`` screened out by the memory screen -- an out-of-memory trial that was never run."""
    return cm.Step(
        n=n,
        change=change,
        state="closed",
        levers=levers,
        stacked_on=change.stacked_on,
        runs=[cm.RunRef(kind="trial", n=1, outcome="oom", reason="not run: predicted to run out of memory")],
    )


@pytest.mark.parametrize("first_probe_measured", [True, False])
def test_a_blind_probe_the_memory_screen_ruled_out_spends_patience_once_with_its_free_retries(
    first_probe_measured: bool,
) -> None:
    """A blind probe predicted to run out of memory found nothing, like one that ran out for real: after a measured
    probe that gained nothing it ends blind exploration. Its retry, stacked on it and screened out too, is the same
    probe: a screened probe and its screened retry alone leave the patience half spent."""
    from bot.agent.history import EXPLORING
    from bot.agent.stopping import patience_stop

    text = recipe_text(activation_checkpoint="none")
    space = space_fn(parse_recipe_text(text))
    script = [
        Change(lever="training.local_batch_size", before=1, after=2, why="t"),
        Change(lever="training.local_batch_size", before=2, after=4, why=EXPLORING),
    ]
    table = {
        (("training.local_batch_size", 2),): [2000.0, 2000.0],
        (("training.local_batch_size", 4),): [1900.0, 1900.0],
    }
    n_played = 2 if first_probe_measured else 1
    state = play(
        new_state(text, budget=100.0),
        lambda s: script[len(s.steps)] if len(s.steps) < n_played else Stop(why="-"),
        table_rule(table, [1000.0, 1010.0]),
        cost=0.01,
    )
    assert state.incumbent_step == 1
    inc = dict(state.incumbent_levers)
    probe = Change(lever="compile.enable", before=False, after=True, why=EXPLORING)
    steps = [_screened(n_played + 1, probe, {**inc, "compile.enable": True})]
    if not first_probe_measured:
        retry = Change(
            lever="activation_checkpoint", before="none", after="selective", why="retry", stacked_on=n_played + 1
        )
        steps.append(
            _screened(n_played + 2, retry, {**inc, "compile.enable": True, "activation_checkpoint": "selective"})
        )
    state = state.model_copy(update={"phase": "stepping", "finish_reason": "", "steps": [*state.steps, *steps]})
    stop = patience_stop(state)
    if first_probe_measured:
        assert stop is not None and "the last 2 measured steps gained nothing" in stop
        proposal = HeuristicPolicy().propose(state, OK, [], space, RECORDS)
        assert isinstance(proposal, Stop) and proposal.why == stop, proposal
    else:
        assert stop is None


@pytest.mark.parametrize("on", ["enabler", "oom-step"])
def test_a_change_measured_clearly_slower_on_its_enabler_is_not_proposed_again_after_an_unrelated_kept_step(
    on: str,
) -> None:
    """llama3.1-70b on 32 B200: a lesson's TP 4 -> 2, with local batch 8 -> 4 as its enabler, stopped early at -40 %;
    async TP was kept (+3.5 %), and the same pair was proposed and stopped early again (-42 %), a run the budget then
    lacked. A change stacked on its enabler counts as measured like one run alone. One stacked on an out-of-memory step
    measured that step's recompute too: it may come again."""
    text = (CPU_RECIPE.parents[2] / "bot/bench/tasks/llama3.1-70b/b200x32.yaml").read_text()
    state, space = _state_and_space(text)
    tp = _lesson("tp", {"lever": "parallelism.tensor_parallel_degree", "value": 4})
    base = dict(state.incumbent_levers)
    first = from_lessons(state, space, [tp], catalog.effective(base), set())
    assert (
        isinstance(first, Change) and first.enabler and (first.lever, first.after) == ("training.local_batch_size", 4)
    )
    lbs4 = {**base, "training.local_batch_size": 4}
    below = (
        cm.Step(n=1, change=first, state="closed", config_verdict=Verdict(verdict="ok", stage="config"), levers=lbs4)
        if on == "enabler"
        else cm.Step(
            n=1,
            change=Change(lever="activation_checkpoint", before="full", after="selective", why="t"),
            state="closed",
            levers={**lbs4, "activation_checkpoint": "selective"},
        )
    )
    slow = cm.Step(
        n=2,
        change=Change(
            lever="parallelism.tensor_parallel_degree", before=8, after=4, lessons=["tp"], why="t", stacked_on=1
        ),
        stacked_on=1,
        state="closed",
        levers={**below.levers, "parallelism.tensor_parallel_degree": 4},
        measurement=cm.Measurement(
            estimate=-0.4, lo=-0.45, hi=-0.35, confidence=0.9, min_gain=0.005, decision="no_gain", cut=True
        ),
    )
    kept_levers = {**base, "compile.enable": True}
    kept = cm.Step(
        n=3,
        change=Change(lever="compile.enable", before=False, after=True, why="t"),
        state="merged",
        levers=kept_levers,
        kept=True,
    )
    state = state.model_copy(
        update={"steps": [below, slow, kept], "incumbent_levers": kept_levers, "incumbent_step": 3}
    )
    again = from_lessons(state, space, [tp], catalog.effective(kept_levers), set())
    if on == "enabler":
        assert again is None
    else:
        assert isinstance(again, Change) and (again.lever, again.after) == ("training.local_batch_size", 4)


PARTNER_RECIPE = """\
id: test/partners
workload: {module: torchtitan.models.llama3, config: llama3_8b, model: llama3.1-8b}
cluster: {hardware: h100-sxm-80gb, nodes: 8, devices_per_node: 8, launcher: sim, usd_per_device_hour: 2.0}
levers:
  parallelism.data_parallel_shard_degree: -1
  parallelism.tensor_parallel_degree: 1
  parallelism.context_parallel_degree: 1
  training.local_batch_size: 2
  activation_checkpoint: selective
pinned:
  training.global_batch_size: 128
  training.seq_len: 8192
  optimizer.lr: 0.0003
  lr_scheduler.total_steps: 1000
  debug.seed: 42
bench: {steps: 20, warmup_steps: 5}
"""


def test_memory_partners_are_tried_in_the_order_the_cost_model_predicts_fastest_tensor_parallel_among_them() -> None:
    """Selective -> none ran out of memory at 8192 tokens, with both context and tensor parallel free to change:
    the analytic cost model predicts the recompute saving kept under TP 2 faster than under CP 2 (ring attention over
    half the ranks), so TP 2 inside the node is the partner, stacked on the failed step; once TP is at the node's
    width it is no partner (TP across nodes), and CP is."""
    from bot.agent.costmodel import estimate_of

    state, space = _state_and_space(PARTNER_RECIPE)
    ac, tp, cp = "activation_checkpoint", "parallelism.tensor_parallel_degree", "parallelism.context_parallel_degree"
    none = {**state.incumbent_levers, ac: "none"}
    assert estimate_of(space.recipe, {**none, tp: 2}).step_s < estimate_of(space.recipe, {**none, cp: 2}).step_s
    oom = cm.Step(
        n=1,
        change=Change(lever=ac, before="selective", after="none", why="t"),
        state="closed",
        levers=none,
        runs=[cm.RunRef(kind="trial", n=1, outcome="oom")],
    )
    s = state.model_copy(update={"steps": [oom]})
    got = oom_retry(s, space)
    assert isinstance(got, Change) and (got.lever, got.before, got.after, got.stacked_on) == (tp, 1, 2, 1)
    assert got.lessons == ["less-recompute-partner-tensor-parallel"] and "inside the node" in got.why
    wide = state.model_copy(update={"incumbent_levers": {**state.incumbent_levers, tp: 8}})
    oom8 = oom.model_copy(update={"levers": {**none, tp: 8}})
    got = oom_retry(wide.model_copy(update={"steps": [oom8]}), space)
    assert isinstance(got, Change) and got.lever != tp
    # TP partners the recompute change itself, never another partner (minimax-m2 on 64 H200s lost every gain to TP 4
    # stacked on a PP partner): CP 2 stacked on it ran out of memory too, and the next move is the last resort, half
    # the local batch on that chain, not TP 2 on top of CP 2
    cp2 = cm.Step(
        n=2,
        change=Change(lever=cp, before=1, after=2, why="t", stacked_on=1),
        stacked_on=1,
        state="closed",
        levers={**none, cp: 2},
        runs=[cm.RunRef(kind="trial", n=2, outcome="oom")],
    )
    got = oom_retry(state.model_copy(update={"steps": [oom, cp2]}), space)
    assert isinstance(got, Change) and (got.lever, got.before, got.after, got.stacked_on) == (
        "training.local_batch_size",
        2,
        1,
        2,
    )


HALVED_TWICE = _sim_recipe(
    "halve-twice",
    """\
  parallelism.tensor_parallel_degree: 2
  training.local_batch_size: 16
  activation_checkpoint: full
""",
)


@pytest.mark.parametrize("predicted, halves", [(170.0, True), (190.0, False)])
def test_a_halved_batch_that_ran_out_of_memory_again_is_halved_once_more_only_where_its_own_peak_says_it_fits(
    monkeypatch, predicted: float, halves: bool
) -> None:
    """Under full recompute a degree change that ran out of memory is retried with half the local batch; where that
    ran out of memory too, its measured peak anchors the memory model, and a second halving is tried only where the
    prediction fits the device (glm-4.5 on 64 simulated H200: PP 8 -> 1 with local batch 16 predicted at 231 GiB, at
    8 measured 165 GiB of 140, at 4 kept +10 %: the oracle's layout)."""
    import bot.agent.heuristic.oom_retry as oom_retry_module
    from bot.agent.heuristic import OOM_BATCH_LESSON
    from bot.agent.memory_screen import PeakPrediction

    space = space_fn(parse_recipe_text(HALVED_TWICE))
    script = [
        Change(lever="parallelism.tensor_parallel_degree", before=2, after=1, why="t"),
        Change(
            lever="training.local_batch_size", before=16, after=8, why="t", stacked_on=1, lessons=[OOM_BATCH_LESSON]
        ),
    ]
    state = play(
        new_state(HALVED_TWICE, budget=100.0),
        lambda s: script[len(s.steps)] if len(s.steps) < len(script) else Stop(why="-"),
        table_rule({(("parallelism.tensor_parallel_degree", 1),): "oom"}, [1000.0, 1010.0]),
        cost=0.01,
    )
    assert [s.runs[0].outcome for s in state.steps] == ["oom", "oom"] and state.step(2).stacked_on == 1
    state = state.model_copy(update={"phase": "stepping", "finish_reason": ""})
    seen = []

    def peak(campaign, levers, stacked_on, space, records):
        seen.append((catalog.effective(levers)["training.local_batch_size"], stacked_on))
        return PeakPrediction(predicted=predicted, capacity=180.0, measured=200.0, ratio=predicted / 200.0)

    monkeypatch.setattr(oom_retry_module, "predicted_peak", peak)
    retry = oom_retry(state, space, RECORDS)
    assert seen == [(4, 2)]  # the next halving, anchored on the run that ran out of memory
    if halves:
        assert retry is not None and (retry.lever, retry.before, retry.after, retry.stacked_on) == (
            "training.local_batch_size",
            8,
            4,
            2,
        )
        assert "it measured 200 GiB" in retry.why and f"at {predicted:.0f} GiB of 180" in retry.why
    else:
        assert retry is None
    # without the records to anchor on, the ladder ends as before
    assert oom_retry(state, space) is None


@pytest.mark.parametrize("pipeline", [False, True])
def test_less_recompute_out_of_memory_with_parameters_held_unsharded_is_retried_resharding_after_forward(
    pipeline: bool,
) -> None:
    """Full -> selective ran out of memory on a layout that holds the gathered parameters from forward to backward
    (reshard_after_forward never): resharding after forward is its memory partner, stacked on it -- even where the
    memory screen had ruled that very layout out before (predicted, not run: the retry is anchored on the peak the
    failed run measured). Under PP torchtitan never reshards after forward anyway: no such partner."""
    text = _sim_recipe(
        "reshard",
        "  training.disable_cuda_graphs: true\n  parallelism.fsdp_reshard_after_forward: never\n"
        + ("  parallelism.pipeline_parallel_degree: 2\n" if pipeline else "")
        + "  training.local_batch_size: 8\n  activation_checkpoint: full\n",
    )
    state, space = _state_and_space(text)
    ac, reshard = "activation_checkpoint", "parallelism.fsdp_reshard_after_forward"
    space.values = {ac: ["full", "selective", "none"], reshard: ["default", "always", "never"]}
    base = dict(state.incumbent_levers)
    screened = cm.Step(
        n=1,
        change=Change(lever=ac, before="full", after="selective", predicted_oom="predicted to run out of memory: ..."),
        state="closed",
        levers={**base, reshard: "default", ac: "selective"},
        runs=[cm.RunRef(kind="trial", n=1, outcome="oom", reason="not run: predicted to run out of memory: ...")],
    )
    oom = cm.Step(
        n=2,
        change=Change(lever=ac, before="full", after="selective", why="t"),
        state="closed",
        levers={**base, ac: "selective"},
        runs=[cm.RunRef(kind="trial", n=2, outcome="oom")],
    )
    s = state.model_copy(update={"steps": [screened, oom]})
    got = oom_retry(s, space)
    if pipeline:
        assert got is None or got.lever != reshard
        return
    assert isinstance(got, Change)
    assert (got.lever, got.before, got.after, got.stacked_on) == (reshard, "never", "default", 2)
    assert got.lessons == ["less-recompute-partner-reshard-after-forward"]
    assert "frees each layer's gathered parameters after its forward" in got.why


def test_a_degree_change_out_of_memory_whose_recompute_retry_is_predicted_slower_is_retried_with_the_layout() -> None:
    """TP 2 -> 1 ran out of memory and its retry with recompute was predicted slower (closed, not run): the degree
    change is retried with a layout that frees memory instead -- here the non-interleaved schedule, stacked on it,
    once; a retry of that partner predicted slower ends the chain."""
    tp, ac, sch = (
        "parallelism.tensor_parallel_degree",
        "activation_checkpoint",
        "parallelism.pipeline_parallel_schedule",
    )
    text = _sim_recipe(
        "degree-partner",
        "  training.disable_cuda_graphs: true\n  parallelism.pipeline_parallel_degree: 2\n"
        f"  {tp}: 2\n  {sch}: Interleaved1F1B\n  training.local_batch_size: 8\n  {ac}: none\n",
    )
    state, space = _state_and_space(text)
    space.values = {tp: [1, 2], ac: ["full", "selective", "none"], sch: ["Interleaved1F1B", "1F1B"]}
    base = dict(state.incumbent_levers)
    oom = cm.Step(
        n=1,
        change=Change(lever=tp, before=2, after=1, why="t"),
        state="closed",
        levers={**base, tp: 1},
        runs=[cm.RunRef(kind="trial", n=1, outcome="oom")],
    )
    slower = cm.Step(
        n=2,
        change=Change(
            lever=ac,
            before="none",
            after="selective",
            stacked_on=1,
            lessons=[OOM_LESSON],
            predicted_slower="predicted slower: ...",
        ),
        stacked_on=1,
        state="closed",
        levers={**base, tp: 1, ac: "selective"},
    )
    s = state.model_copy(update={"steps": [oom, slower]})
    got = oom_retry(s, space)
    assert isinstance(got, Change)
    assert (got.lever, got.before, got.after, got.stacked_on) == (sch, "Interleaved1F1B", "1F1B", 1)
    assert "recomputing more is predicted slower" in got.why and got.lessons[0] == DEGREE_PARTNER_LESSON
    partner_slower = cm.Step(
        n=3,
        change=got.model_copy(update={"predicted_slower": "predicted slower: ..."}),
        stacked_on=1,
        state="closed",
        levers={**base, tp: 1, sch: "1F1B"},
    )
    assert oom_retry(s.model_copy(update={"steps": [oom, slower, partner_slower]}), space) is None
