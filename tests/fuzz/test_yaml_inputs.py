"""Recipes and data files refuse YAML anchors and aliases and inputs over 1 MiB, each with one clear line."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.core.datafile import DataFileError, load_yaml
from bot.core.recipe import RecipeError, parse_recipe_text
from bot.core.yamlguard import MAX_YAML_BYTES

ROOT = Path(__file__).resolve().parents[2]
RECIPE = (ROOT / "recipes" / "llama3-tiny" / "cpu.yaml").read_text()

# the "billion laughs" shape: each line doubles the last; 2.4 KB of it expanded into megabytes of error text
LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8)
)


def test_a_recipe_with_aliases_is_refused_in_one_short_line() -> None:
    with pytest.raises(RecipeError) as err:
        parse_recipe_text(LAUGHS, "recipes/x.yaml")
    text = str(err.value)
    assert "\n" not in text and len(text) < 200
    assert text.startswith("recipes/x.yaml:1: YAML anchor &a is not accepted")


def test_a_merge_key_is_an_alias_too() -> None:
    text = "workload: &w {model: m}\nbench: {<<: *w}\n"
    with pytest.raises(RecipeError, match=r"recipes/y.yaml:1: YAML anchor &w"):
        parse_recipe_text(text, "recipes/y.yaml")
    with pytest.raises(RecipeError, match=r"recipes/y.yaml:1: YAML alias \*w"):
        parse_recipe_text("a: *w\n", "recipes/y.yaml")


def test_an_oversized_recipe_is_refused_before_parsing() -> None:
    text = "# " + "x" * MAX_YAML_BYTES + "\n"
    with pytest.raises(RecipeError, match=r"^recipes/big.yaml: 1,048,579 bytes; a YAML input holds at most"):
        parse_recipe_text(text, "recipes/big.yaml")


def test_a_quoted_ampersand_or_star_is_just_text() -> None:
    parse_recipe_text(RECIPE.replace("\n", "\n# a & b * c\n", 1), "recipes/ok.yaml")


def test_a_data_file_with_aliases_or_too_large_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "lessons.yaml"
    path.write_text(LAUGHS)
    with pytest.raises(DataFileError, match=r"lessons.yaml:1: YAML anchor &a is not accepted"):
        load_yaml(path)
    path.write_text("a: 1\n" + "#" * MAX_YAML_BYTES + "\n")
    with pytest.raises(DataFileError, match=r"bytes; a YAML input holds at most 1,048,576 bytes"):
        load_yaml(path)
