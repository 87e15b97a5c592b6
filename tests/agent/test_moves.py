"""bot/agent/heuristic/: the registry of moves, and the structured fields a proposal states (enables, probe)."""

from __future__ import annotations

import inspect
import re

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


def test_move_docstrings_are_short_and_name_no_benchmark_task() -> None:
    import pkgutil

    for info in pkgutil.iter_modules(heuristic.__path__, heuristic.__name__ + "."):
        module = __import__(info.name, fromlist=["_"])
        for _, obj in [
            ("module", module),
            *inspect.getmembers(module, lambda o: inspect.isfunction(o) or inspect.isclass(o)),
        ]:
            if getattr(obj, "__module__", module.__name__) != module.__name__:
                continue
            doc = inspect.getdoc(obj) or ""
            assert len(doc.splitlines()) <= 8, (info.name, obj)
            assert not TASK_OR_SCORE.search(doc), (info.name, obj)


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
