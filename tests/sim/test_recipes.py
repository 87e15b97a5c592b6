"""The four task recipes: valid for the project's recipe loader, runnable in the simulator, with headroom."""

from pathlib import Path

import pytest

from bot.core.recipe import load_recipe
from bot.sim.explore import one_lever_neighbours
from bot.sim.recipes import load_recipe_yaml, simulate_recipe

ROOT = Path(__file__).resolve().parents[2]
RECIPES = [
    "bot/bench/tasks/llama3.1-405b/h200x128.yaml",
    "bot/bench/tasks/glm-4.5/h100x128.yaml",
    "bot/bench/tasks/mixtral-8x22b/h100x64.yaml",
    "bot/bench/tasks/minimax-m2/h200x64.yaml",
]


@pytest.mark.parametrize("path", RECIPES)
def test_recipe_starts_valid_with_headroom(path):
    path = ROOT / path
    recipe = load_recipe(path)
    assert recipe.source and recipe.source.startswith("https://")
    assert recipe.cluster.launcher == "sim" and 64 <= recipe.devices <= 128
    raw = load_recipe_yaml(path)
    start = simulate_recipe(raw)
    assert start.outcome == "ok", start.reason
    assert start.peak_memory_gib < start.memory_capacity_gib
    # every recipe can be improved, by some margin, but not absurdly, by one lever
    domains = {
        "training.local_batch_size": [8, 64, 128, 256],
        "activation_checkpoint": ["selective", "none"],
        "parallelism.pipeline_parallel_microbatch_size": [2],
        "compile.enable": [True],
        "parallelism.tensor_parallel_degree": [1, 4],
    }
    c = raw["cluster"]
    moves = one_lever_neighbours(
        raw["workload"]["model"],
        c["hardware"],
        c["nodes"],
        c["devices_per_node"],
        raw["levers"],
        raw["pinned"],
        domains,
    )
    best = moves[0].result.tokens_per_s_per_device / start.tokens_per_s_per_device
    assert 1.02 < best < 1.5
