"""Shared fixtures for the runner tests: the shipped CPU recipe, as text and as a Recipe."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.core.recipe import Recipe, parse_recipe_text

REPO = Path(__file__).resolve().parents[2]
CPU_RECIPE = REPO / "recipes" / "llama3-tiny" / "cpu.yaml"


@pytest.fixture(scope="session")
def cpu_text() -> str:
    return CPU_RECIPE.read_text()


@pytest.fixture
def cpu_recipe(cpu_text: str) -> Recipe:
    return parse_recipe_text(cpu_text, str(CPU_RECIPE))
