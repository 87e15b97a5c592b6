"""Seed checkpoints: one set of initial weights per recipe objective and stack, loaded by every run that compares.

Why: torchtitan draws the initial weights *inside* its parallel layout. On a CPU mesh DTensor's RNG is unsupported,
so 2-rank FSDP draws identical shards on both ranks (26 random tensors with byte-identical halves), and PP seeds each
stage differently (``torchtitan/distributed/utils.py`` ``set_determinism``). Layouts then start from different
weights and the gate cannot compare them. torchtitan's own answer is a seed checkpoint made on one rank with every
degree 1 (``--checkpoint.create_seed_checkpoint``) and loaded by every run (torchtitan's
https://github.com/pytorch/torchtitan/blob/release/0.3/docs/debugging.md "Seed-Checkpoint-based Reproducibility";
measured here: FSDP from a seed checkpoint matches replicate to 1.9e-6, docs/reference/cpu-torchtitan.md §3).

Interface (small on purpose; other workloads reuse it):

- :func:`seed_key` ``(recipe) -> str`` — the content key: workload, pins, hardware, stack, in-rank code. Levers are
  not in it, so every candidate of a campaign (one lever changed) shares its baseline's seed checkpoint.
- :func:`ensure_seed_checkpoint` ``(recipe, cache_dir) -> SeedCheckpoint`` — the cached checkpoint, made now
  (one rank, all degrees 1, about 15 s on the CPU) when absent. Safe when several processes ask at once (file lock).
- :func:`load_args` ``(seed) -> list[str]`` — the torchtitan flags that load it (model only, no saves):
  ``--checkpoint.enable --checkpoint.initial-load-path <dir>/step-0 --checkpoint.load-only``.
- :func:`wants_seed` ``(recipe) -> bool`` — False for simulated recipes and for recipes that pin their own initial
  weights (``checkpoint.initial_load_path``).

Layout on disk: ``<cache_dir>/seed/<recipe-id>/<key>/`` holding ``step-0/`` (torchtitan's DCP folder) and
``seed.json`` (written last: its presence means the checkpoint is complete).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from pydantic import BaseModel

from bot.core.recipe import Recipe
from bot.inrank import HERE, code_files
from bot.runner.command import titan_args
from bot.runner.procs import die_with_parent, end_tree
from bot.runner.workdir import rank_pythonpath

SEED_LEVERS_ONE = (
    "parallelism.data_parallel_shard_degree",
    "parallelism.data_parallel_replicate_degree",
    "parallelism.tensor_parallel_degree",
    "parallelism.pipeline_parallel_degree",
    "parallelism.context_parallel_degree",
    "parallelism.expert_parallel_degree",
)
CREATE_TIMEOUT_S = 900.0


class SeedError(RuntimeError):
    """The seed checkpoint could not be made (torchtitan's own error in the message)."""


class SeedCheckpoint(BaseModel):
    key: str
    path: str  # the DCP folder to load (``.../step-0``)
    created: bool = False  # made by this call (False: found in the cache)
    wall_s: float = 0.0


def wants_seed(recipe: Recipe) -> bool:
    return recipe.cluster.launcher != "sim" and "checkpoint.initial_load_path" not in recipe.pinned


def _code_hash() -> str:
    h = hashlib.sha256()
    for f in code_files():
        h.update(str(f.relative_to(HERE)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def seed_key(recipe: Recipe) -> str:
    from bot.runner.base import stack_fingerprint

    payload = {
        "workload": recipe.workload.model_dump(),
        "pinned": recipe.pinned,
        "hardware": recipe.cluster.hardware,
        "stack": stack_fingerprint().key(),
        "code": _code_hash(),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:20]


def seed_recipe(recipe: Recipe) -> Recipe:
    """The recipe that makes the seed: one rank, every parallel degree 1, no other levers (they do not change init)."""
    gbs = int(recipe.pinned.get("training.global_batch_size", -1))
    levers = {k: 1 for k in SEED_LEVERS_ONE}
    if gbs > 0:
        levers["training.local_batch_size"] = gbs  # any divisor works; the seed run takes no step
    cluster = recipe.cluster.model_copy(update={"nodes": 1, "devices_per_node": 1, "launcher": "local"})
    return recipe.model_copy(update={"levers": levers, "cluster": cluster})


def seed_dir(cache_dir: Path, recipe: Recipe) -> Path:
    parts = [re.sub(r"[^A-Za-z0-9._+-]+", "_", p) for p in recipe.name.split("/") if p]
    return Path(cache_dir).resolve().joinpath("seed", *parts, seed_key(recipe))


def load_args(seed: SeedCheckpoint) -> list[str]:
    """torchtitan flags that load the seed's model weights at start-up and save nothing."""
    return ["--checkpoint.enable", "--checkpoint.initial-load-path", seed.path, "--checkpoint.load-only"]


def _find(final: Path) -> SeedCheckpoint | None:
    meta = final / "seed.json"
    if not meta.exists():
        return None
    try:
        data = json.loads(meta.read_text())
    except (OSError, ValueError):
        return None
    return SeedCheckpoint(key=data["key"], path=str(final / "step-0"), wall_s=float(data.get("wall_s", 0.0)))


def _create(recipe: Recipe, final: Path, workdir: Path) -> SeedCheckpoint:
    work = final.parent / f".{final.name}.{os.getpid()}.tmp"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    seed = seed_recipe(recipe)
    args = titan_args(
        seed,
        steps=1,
        dump_folder=str(work / "titan"),
        extra=["--checkpoint.enable", "--checkpoint.create-seed-checkpoint", "--checkpoint.folder", str(work / "ckpt")],
    )
    argv = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nnodes=1",
        "--nproc_per_node=1",
        "-m",
        "torchtitan.train",
        *args,
    ]
    env = {**os.environ, **seed.env, "ATTUNE_CPU_COMPAT": "1", "PYTHONUNBUFFERED": "1"}
    env.pop("ATTUNE_HOOK", None)  # a seed is never made under a test hook
    env["PYTHONPATH"] = rank_pythonpath(workdir, env.get("PYTHONPATH"))
    t0 = time.monotonic()
    with (work / "seed.log").open("w") as log:
        # its own process group, ended with its caller: SIGKILL of attune (the kernel's parent-death signal) or a
        # Ctrl-C / SIGTERM / timeout here (the group is terminated before the exception goes on) leaves no rank
        proc = subprocess.Popen(
            argv,
            env=env,
            cwd=workdir,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent(),
        )
        try:
            proc.wait(timeout=CREATE_TIMEOUT_S)
        except BaseException:
            end_tree(proc)
            raise
    wall = time.monotonic() - t0
    made = work / "ckpt" / "step-0"
    if proc.returncode != 0 or not made.is_dir():
        tail = (work / "seed.log").read_text(errors="replace").strip().splitlines()[-6:]
        raise SeedError(f"seed checkpoint for {recipe.name} failed (exit {proc.returncode}): {' | '.join(tail)[-600:]}")
    final.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(final / "step-0", ignore_errors=True)
    os.replace(made, final / "step-0")
    shutil.copy(work / "seed.log", final / "seed.log")
    meta = {
        "key": final.name,
        "recipe": recipe.name,
        "wall_s": round(wall, 1),
        "command": argv,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (final / "seed.json").write_text(json.dumps(meta, indent=1) + "\n")  # last: marks the checkpoint complete
    shutil.rmtree(work, ignore_errors=True)
    return SeedCheckpoint(key=final.name, path=str(final / "step-0"), created=True, wall_s=wall)


def ensure_seed_checkpoint(recipe: Recipe, cache_dir: Path, workdir: Path | None = None) -> SeedCheckpoint:
    """The seed checkpoint of ``recipe``'s objective on this stack: from the cache, or made now (one rank, started in
    ``workdir``, the recipe's repository root as every run's ranks are: :mod:`.workdir`; default the working
    directory)."""
    final = seed_dir(cache_dir, recipe)
    found = _find(final)
    if found is not None:
        return found
    final.parent.mkdir(parents=True, exist_ok=True)
    with open(final.parent / f"{final.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be making the same seed: wait for it
        try:
            found = _find(final)
            return found if found is not None else _create(recipe, final, Path(workdir or Path.cwd()).resolve())
        finally:
            with contextlib.suppress(OSError):
                fcntl.flock(lock, fcntl.LOCK_UN)
