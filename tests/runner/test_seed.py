"""Seed checkpoints (bot/runner/seed.py): made once per objective and stack by real torchtitan, then reused."""

from __future__ import annotations

import json
from pathlib import Path

from bot.bench.gate import edit_recipe_text
from bot.core.recipe import parse_recipe_text
from bot.runner.command import titan_args
from bot.runner.seed import ensure_seed_checkpoint, load_args, seed_key, seed_recipe, wants_seed

from .conftest import CPU2_RECIPE


def _recipe(**edits):
    text = CPU2_RECIPE.read_text()
    return parse_recipe_text(edit_recipe_text(text, **edits) if edits else text, "cpu-2rank")


def test_seed_key_ignores_levers_and_follows_the_objective() -> None:
    base = _recipe()
    assert seed_key(base) == seed_key(_recipe(levers={"parallelism.tensor_parallel_degree": 2, "activation_checkpoint": "none"}))
    assert seed_key(base) != seed_key(_recipe(pinned={"debug.seed": 43}))
    assert seed_key(base) != seed_key(_recipe(pinned={"training.seq_len": 128}))


def test_seed_recipe_is_one_rank_with_every_degree_one() -> None:
    seed = seed_recipe(_recipe(levers={"parallelism.pipeline_parallel_degree": 2, "parallelism.data_parallel_shard_degree": 1}))
    assert seed.devices == 1
    assert all(v == 1 for k, v in seed.levers.items() if k.startswith("parallelism."))
    assert seed.levers["training.local_batch_size"] == 8  # the pinned global batch: any divisor resolves


def test_recipe_with_its_own_initial_weights_wants_no_seed() -> None:
    assert wants_seed(_recipe())
    assert not wants_seed(_recipe(pinned={"checkpoint.initial_load_path": "/weights"}))


def test_load_flags_come_before_the_activation_checkpoint_subcommand() -> None:
    from bot.runner.seed import SeedCheckpoint

    args = titan_args(_recipe(), steps=2, dump_folder="/tmp/x", extra=load_args(SeedCheckpoint(key="k", path="/s/step-0")))
    assert args[-1] == "activation-checkpoint:full"
    i = args.index("--checkpoint.initial-load-path")
    assert args[i + 1] == "/s/step-0" and "--checkpoint.load-only" in args and i < len(args) - 1


def test_seed_checkpoint_is_made_once_then_found_in_the_cache(seed_cache: Path) -> None:
    recipe = _recipe()
    first = ensure_seed_checkpoint(recipe, seed_cache)
    again = ensure_seed_checkpoint(_recipe(levers={"parallelism.tensor_parallel_degree": 2}), seed_cache)
    assert again.path == first.path and not again.created
    step0 = Path(first.path)
    assert step0.name == "step-0" and any(step0.iterdir()), "torchtitan wrote no DCP files"
    meta = json.loads((step0.parent / "seed.json").read_text())
    assert meta["key"] == first.key == seed_key(recipe)
    assert "--checkpoint.create-seed-checkpoint" in meta["command"] and "--nproc_per_node=1" in meta["command"]
