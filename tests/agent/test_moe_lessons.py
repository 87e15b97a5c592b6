"""The MoE CPU lessons (bot/agent/lessons_catalog/moe.yaml ``moe-cpu-*``) drive the heuristic on the moe-tiny recipes."""

from __future__ import annotations

from pathlib import Path

from campaign_fakes import new_state, play, table_rule

from bot.agent.heuristic import HeuristicPolicy
from bot.agent.lessons import load_lessons
from bot.agent.policy import validate_change
from bot.agent.space import make_space
from bot.core.diagnosis import Diagnosis
from bot.core.recipe import parse_recipe_text
from bot.core.records import Change, FileRecords, Stop

REPO = Path(__file__).resolve().parents[2]
OK = Diagnosis(outcome="ok", tps=1000.0, mem_headroom_frac=0.9)
LESSONS = load_lessons()


def _stepping(text: str):
    state = play(new_state(text), lambda s: Stop(why="-"), table_rule({}, [1000.0, 1010.0]))
    return state.model_copy(update={"phase": "stepping", "finish_reason": ""}), make_space(parse_recipe_text(text))


def test_the_moe_cpu_lessons_are_cited_and_cpu_only() -> None:
    moe = {les.id: les for les in LESSONS if les.id.startswith("moe-cpu-")}
    assert set(moe) == {"moe-cpu-recompute-off", "moe-cpu-bigger-expert-gemms", "moe-cpu-ep-off"}
    assert all(les.source.startswith("https://") and les.applies_to.hardware == ["cpu"] for les in moe.values())


def test_first_the_moe_recipe_stops_recomputing_then_grows_the_expert_gemms() -> None:
    text = (REPO / "recipes" / "moe-tiny" / "cpu.yaml").read_text()
    state, space = _stepping(text)
    first = HeuristicPolicy().propose(state, OK, LESSONS, space, FileRecords())
    assert isinstance(first, Change) and (first.lever, first.after) == ("activation_checkpoint", "none")
    assert first.lessons == ["moe-cpu-recompute-off"] and validate_change(state, first, space) is None
    no_ac = text.replace("activation_checkpoint: full", "activation_checkpoint: none")
    state, space = _stepping(no_ac)
    second = HeuristicPolicy().propose(state, OK, LESSONS, space, FileRecords())
    assert isinstance(second, Change) and (second.lever, second.before, second.after) == (
        "training.local_batch_size",
        2,
        4,
    )
    assert second.lessons == ["moe-cpu-bigger-expert-gemms"]


def test_ep_over_gloo_is_turned_off() -> None:
    text = (REPO / "recipes" / "moe-tiny" / "cpu-2rank.yaml").read_text()
    text = text.replace("parallelism.expert_parallel_degree: 1", "parallelism.expert_parallel_degree: 2")
    text = text.replace("activation_checkpoint: full", "activation_checkpoint: none").replace(
        "training.local_batch_size: 2", "training.local_batch_size: 4"
    )
    state, space = _stepping(text)
    change = HeuristicPolicy().propose(state, OK, LESSONS, space, FileRecords())
    assert isinstance(change, Change) and (change.lever, change.after) == ("parallelism.expert_parallel_degree", 1)
    assert change.lessons == ["moe-cpu-ep-off"]


def test_the_lessons_read_how_many_ep_groups_fit_a_node_from_the_recipe_and_the_incumbents_ep() -> None:
    from bot.agent.policy import lesson_context

    text = (REPO / "bot" / "bench" / "tasks" / "qwen3-30b-a3b" / "h100x64.yaml").read_text()
    text = text.replace("parallelism.expert_parallel_degree: 1 ", "parallelism.expert_parallel_degree: 4 ")
    state, space = _stepping(text)
    exposed = Diagnosis(
        outcome="ok",
        tps=1000.0,
        mem_headroom_frac=0.2,
        breakdown={"compute": 0.52, "exposed_comm": 0.41, "bubble": 0.0, "recompute": 0.04, "other": 0.03},
    )
    ctx = lesson_context(state, exposed, space)
    assert (ctx["recipe.devices_per_node"], ctx["recipe.expert_parallel_groups_per_node"]) == (8, 2.0)
    assert ctx["levers.parallelism.expert_parallel_degree"] == 4
    wide = lesson_context(
        state, exposed, space, levers={**state.incumbent_levers, "parallelism.expert_parallel_degree": 8}
    )
    assert wide["recipe.expert_parallel_groups_per_node"] == 1.0
