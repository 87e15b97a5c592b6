"""bot/agent/heuristic/: the registry of moves, and the structured fields a proposal states (enables, probe)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import bot.agent.heuristic as heuristic
from bot.agent.heuristic import MOVES, OBLIGATIONS
from bot.agent.history import EXPLORING, enabled_settings, is_probe
from bot.core.records import Change, Setting

TP, LBS, SCHED = (
    "parallelism.tensor_parallel_degree",
    "training.local_batch_size",
    "parallelism.pipeline_parallel_schedule",
)
TASK_OR_SCORE = re.compile(r"deepseek|glm-|llama3|minimax|mixtral|qwen|of the oracle", re.I)


def test_the_registry_asks_the_obligations_in_their_fixed_order_and_each_move_once() -> None:
    ids = [m.id for m in MOVES]
    assert len(ids) == len(set(ids))
    assert OBLIGATIONS == ("reaimed-jump", "oom-retry", "enabled-change", "follow-up", "restore-schedule")
    assert ids[:2] == ["reaimed-jump", "oom-retry"] and ids[-1] == "explore"


def test_agent_docstrings_are_short_and_name_no_benchmark_task() -> None:
    """Every docstring under bot/agent (module, class, function, nested ones too) is at most 8 lines."""
    checked = 0
    for path in sorted(Path(heuristic.__file__).parents[1].rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            doc = ast.get_docstring(node) or ""
            checked += bool(doc)
            where = (path.name, getattr(node, "name", "module"))
            assert len(doc.splitlines()) <= 8, where
            if path.parent.name == "heuristic":
                assert not TASK_OR_SCORE.search(doc), where
    assert checked > 100


def test_what_an_enabler_enables_is_its_field_and_the_why_only_for_older_records() -> None:
    legacy = Change(lever=TP, before=2, after=4, enabler=True, why=f"enabler of {LBS}=8, then {SCHED}=DualPipeV: t")
    assert enabled_settings(legacy) == [Setting(lever=LBS, value=8), Setting(lever=SCHED, value="DualPipeV")]
    # a record stored before the field loads, its why read as before
    stored = Change.model_validate_json(legacy.model_dump_json(by_alias=True, exclude={"enables", "probe"}))
    assert stored.enables is None and enabled_settings(stored) == enabled_settings(legacy)
    # once stated, the field decides: rewording the why changes nothing, and [] enables nothing
    stated = legacy.model_copy(update={"why": "reworded", "enables": [Setting(lever=LBS, value=8)]})
    assert enabled_settings(stated) == [Setting(lever=LBS, value=8)]
    assert enabled_settings(legacy.model_copy(update={"enables": []})) == []


def test_a_blind_probe_is_its_field_and_the_phrase_only_for_older_records() -> None:
    assert is_probe(Change(lever=LBS, before=2, after=4, why=EXPLORING))  # stored before the field
    assert not is_probe(Change(lever=LBS, before=2, after=4, why=EXPLORING, probe=False))
    assert is_probe(Change(lever=LBS, before=2, after=4, why="reworded", probe=True))
