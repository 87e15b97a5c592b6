"""Seed checkpoints (bot/runner/seed.py): made once per objective and stack by real torchtitan, then reused."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from bot.bench.gate_faults import edit_recipe_text
from bot.core.recipe import load_recipe, parse_recipe_text
from bot.runner.command import titan_args
from bot.runner.seed import ensure_seed_checkpoint, load_args, seed_key, seed_recipe, wants_seed

from .conftest import CPU2_RECIPE


def _recipe(**edits):
    text = CPU2_RECIPE.read_text()
    return parse_recipe_text(edit_recipe_text(text, **edits) if edits else text, "cpu-2rank")


def test_seed_key_ignores_levers_and_follows_the_objective() -> None:
    base = _recipe()
    assert seed_key(base) == seed_key(
        _recipe(levers={"parallelism.tensor_parallel_degree": 2, "activation_checkpoint": "none"})
    )
    assert seed_key(base) != seed_key(_recipe(pinned={"debug.seed": 43}))
    assert seed_key(base) != seed_key(_recipe(pinned={"training.seq_len": 128}))


def test_seed_recipe_is_one_rank_with_every_degree_one() -> None:
    seed = seed_recipe(
        _recipe(levers={"parallelism.pipeline_parallel_degree": 2, "parallelism.data_parallel_shard_degree": 1})
    )
    assert seed.devices == 1
    assert all(v == 1 for k, v in seed.levers.items() if k.startswith("parallelism."))
    assert seed.levers["training.local_batch_size"] == 8  # the pinned global batch: any divisor resolves


def test_recipe_with_its_own_initial_weights_wants_no_seed() -> None:
    assert wants_seed(_recipe())
    assert not wants_seed(_recipe(pinned={"checkpoint.initial_load_path": "/weights"}))


def test_load_flags_come_before_the_activation_checkpoint_subcommand() -> None:
    from bot.runner.seed import SeedCheckpoint

    args = titan_args(
        _recipe(), steps=2, dump_folder="/tmp/x", extra=load_args(SeedCheckpoint(key="k", path="/s/step-0"))
    )
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


@pytest.mark.torchtitan
def test_an_interrupted_seed_checkpoint_leaves_no_process(tmp_path: Path) -> None:
    """Ctrl-C / SIGTERM (an exception in the waiting thread) while the seed is made ends its torchrun and rank."""
    import threading

    from bot.runner import seed as seed_mod
    from bot.runner.procs import descendants

    recipe = load_recipe(Path(__file__).resolve().parents[2] / "recipes" / "llama3-tiny" / "cpu.yaml")
    started: list[int] = []
    real_popen = seed_mod.subprocess.Popen

    def popen(*a, **kw):
        proc = real_popen(*a, **kw)
        started.append(proc.pid)
        threading.Timer(3.0, lambda: signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)).start()
        return proc

    seed_mod.subprocess.Popen = popen
    try:
        with pytest.raises(KeyboardInterrupt):
            seed_mod.ensure_seed_checkpoint(recipe, tmp_path / "fresh-cache")
    finally:
        seed_mod.subprocess.Popen = real_popen
    assert started and descendants(started[0]) == []
    from bot.runner.procs import alive

    assert not any(alive(pid) for pid in started)  # torchrun ended (and was reaped), not orphaned
