"""2-rank layouts on the CPU: the catalog's legality answers agree with real torchtitan runs.

The default suite runs one layout per family for real (FSDP, TP, PP: 2 steps each; HSDP in the slow matrix) and
checks the layout the catalog refuses (CP) is refused before any launch; the full matrix of
``bot.core.layouts.LAYOUTS_2`` runs under ``-m slow`` and is compared with the recorded one
(``tests/data/cpu2_layout_matrix.json``, made by ``python -m tests.runner.layout_matrix``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bot.core import levers as catalog
from bot.core.layouts import FAMILIES, LAYOUTS_2
from bot.core.recipe import parse_recipe_text

from .conftest import CPU2_RECIPE
from .layout_matrix import OUT as MATRIX
from .layout_matrix import layout_text, run_layout


def _catalog_legal(name: str) -> bool:
    recipe = parse_recipe_text(layout_text(LAYOUTS_2[name]), name)
    return not catalog.prerequisite_problems(
        recipe.levers, catalog.ModelFacts(n_heads=4, n_kv_heads=2, n_layers=4), "cpu"
    )


@pytest.fixture(scope="module")
def family_runs(tmp_path_factory, seed_cache: Path) -> dict[str, dict]:
    work = tmp_path_factory.mktemp("layouts")
    return {
        fam: run_layout(FAMILIES[fam], LAYOUTS_2[FAMILIES[fam]], steps=2, work=work, seed_cache=seed_cache)
        for fam in ("fsdp", "tp", "pp")
    }


@pytest.mark.parametrize("family", ["fsdp", "tp", "pp"])
def test_layout_the_catalog_allows_runs_for_real(family: str, family_runs: dict[str, dict]) -> None:
    assert _catalog_legal(FAMILIES[family])
    row = family_runs[family]
    assert row["outcome"] == "ok", row["reason"]
    assert len(row["losses"]) == 2 and row["losses"][1] < row["losses"][0]
    assert row["seed_checkpoint"], "a 2-rank run must load the seed checkpoint"


def test_layouts_start_from_the_same_weights_with_the_seed_checkpoint(family_runs: dict[str, dict]) -> None:
    first = {fam: row["losses"][0] for fam, row in family_runs.items()}
    assert max(first.values()) - min(first.values()) < 1e-4, first


def test_context_parallel_is_refused_on_the_cpu_before_any_launch(tmp_path: Path) -> None:
    from bot.runner.local import LocalRunner

    assert not _catalog_legal(FAMILIES["cp"])
    text = layout_text(LAYOUTS_2["cp2"])
    rec = LocalRunner().run(parse_recipe_text(text, "cp2"), steps=2, out_dir=tmp_path, recipe_text=text)
    assert rec.outcome == "invalid" and "FlexAttention" in rec.reason and "cp_shard" in rec.reason
    assert not (tmp_path / "train.log").exists(), "nothing may be launched for a layout the catalog refuses"


def test_recorded_matrix_covers_every_layout_with_how_it_was_measured() -> None:
    doc = json.loads(MATRIX.read_text())
    assert {row["layout"] for row in doc["layouts"]} == set(LAYOUTS_2)
    assert "tests.runner.layout_matrix" in doc["how"] and doc["stack"]["torchtitan"]
    assert CPU2_RECIPE.exists()


@pytest.mark.slow
def test_full_matrix_matches_the_catalog_and_the_recorded_outcomes(tmp_path: Path, seed_cache: Path) -> None:
    recorded = {row["layout"]: row["outcome"] for row in json.loads(MATRIX.read_text())["layouts"]}
    for name, levers in LAYOUTS_2.items():
        row = run_layout(name, levers, steps=3, work=tmp_path, seed_cache=seed_cache)
        assert (row["outcome"] == "ok") == _catalog_legal(name), (name, row["outcome"], row["reason"])
        assert row["outcome"] == recorded[name], (name, row["outcome"], recorded[name])
