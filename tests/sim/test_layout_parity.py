"""Simulator and lever-catalog legality against the real-run matrix of 2-rank CPU layouts.

The matrix (``tests/data/cpu2_layout_matrix.json``) holds what real torchtitan 0.3.0 did with each layout of
``bot.core.layouts.LAYOUTS_2`` on 2 CPU ranks (made by ``python -m tests.runner.layout_matrix``, with the runner's
layout pre-flight off). Each legality answer is checked against those observed outcomes, not against the other.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bot.core import levers as catalog
from bot.core.recipe import parse_recipe_text
from bot.facts.legality import LayoutError, resolve_layout
from bot.sim.hardware import get_hardware
from bot.sim.zoo import get_model

REPO = Path(__file__).resolve().parents[2]
MATRIX = json.loads((REPO / "tests" / "data" / "cpu2_layout_matrix.json").read_text())["layouts"]
RECIPE = REPO / "recipes" / "llama3-tiny" / "cpu-2rank.yaml"


def _recipe(levers: dict):
    from bot.bench.gate_faults import edit_recipe_text

    return parse_recipe_text(edit_recipe_text(RECIPE.read_text(), levers=levers, source="layout"), "layout")


def _sim_legal(levers: dict) -> tuple[bool, str]:
    r = _recipe(levers)
    try:
        resolve_layout(
            get_model(r.workload.model or ""),
            get_hardware(r.cluster.hardware),
            r.cluster.nodes,
            r.cluster.devices_per_node,
            dict(r.levers),
            dict(r.pinned),
        )
    except LayoutError as exc:
        return False, str(exc)
    return True, ""


def _catalog_legal(levers: dict) -> tuple[bool, str]:
    m = get_model("llama3-tiny")
    facts = catalog.ModelFacts(n_heads=m.n_heads, n_kv_heads=m.n_kv_heads, n_layers=m.n_layers)
    problems = catalog.prerequisite_problems(_recipe(levers).levers, facts, "cpu")
    return not problems, "; ".join(problems)


def test_cpu_profile_and_tiny_model_are_known_to_the_simulator() -> None:
    hw, m = get_hardware("cpu"), get_model("llama3-tiny")
    assert hw.kind == "cpu" and hw.gpus_per_node == 2
    assert (m.n_layers, m.hidden, m.n_heads, m.n_kv_heads, m.vocab) == (4, 128, 4, 2, 48)


def test_the_matrix_has_both_outcomes() -> None:
    outcomes = {row["outcome"] for row in MATRIX}
    assert "ok" in outcomes and outcomes - {"ok"}, outcomes


@pytest.mark.parametrize("row", MATRIX, ids=[row["layout"] for row in MATRIX])
def test_simulator_legality_matches_the_real_run(row: dict) -> None:
    legal, why = _sim_legal(row["levers"])
    assert legal == (row["outcome"] == "ok"), (
        f"{row['layout']}: real run {row['outcome']} ({row['reason'][:200]}); simulator: {why or 'legal'}"
    )


@pytest.mark.parametrize("row", MATRIX, ids=[row["layout"] for row in MATRIX])
def test_catalog_legality_matches_the_real_run(row: dict) -> None:
    legal, why = _catalog_legal(row["levers"])
    assert legal == (row["outcome"] == "ok"), (
        f"{row['layout']}: real run {row['outcome']} ({row['reason'][:200]}); catalog: {why or 'legal'}"
    )
