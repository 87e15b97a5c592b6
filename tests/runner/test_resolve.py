"""bot/runner/resolve.py: the CPU recipe resolves with torchtitan's ConfigManager; refusals name the problem."""

from __future__ import annotations

import pytest

from bot.core.recipe import Recipe
from bot.runner.resolve import (
    ResolveError,
    batch_problems,
    dp_degree,
    flatten,
    pin_mismatches,
    resolve_recipe,
)


def test_resolve_the_cpu_recipe(cpu_recipe: Recipe) -> None:
    flat = resolve_recipe(cpu_recipe)
    assert flat["activation_checkpoint.mode"] == "full"
    assert flat["training.local_batch_size"] == 1
    assert flat["training.global_batch_size"] == 8
    assert flat["training.seq_len"] == 256
    assert flat["training.steps"] == cpu_recipe.bench.steps
    assert flat["training.mixed_precision_param"] == "float32"  # fixed by the workload's config function
    assert flat["parallelism.spmd_backend"] == "partial_dtensor"
    assert flat["optimizer.param_groups.0.optimizer_kwargs.lr"] == pytest.approx(0.003)
    assert flat["debug.seed"] == 42
    assert flat["compile.enable"] is False
    # flat keys only: nested configs are flattened, lists of configs indexed
    assert not any(isinstance(v, dict) for v in flat.values())


def test_steps_override(cpu_recipe: Recipe) -> None:
    assert resolve_recipe(cpu_recipe, steps=3)["training.steps"] == 3


def test_async_tp_without_compile_is_refused(cpu_recipe: Recipe) -> None:
    with pytest.raises(ResolveError, match=r"Async TP requires .*compile\.enable"):
        resolve_recipe(cpu_recipe.with_lever("compile.enable_async_tensor_parallel", True))


def test_an_unknown_pinned_setting_is_named_without_the_noise_around_it(cpu_recipe: Recipe) -> None:
    """The refusal read "Failed to load .../torchao/_C_mxfp8...so: Could not load this library ... Unrecognized options
    Unrecognized options: --foo.bar, 1 For full helptext, run ...": what else wrote to stderr, a repeated title and
    a help pointer that is not ATTUNE's."""
    with pytest.raises(ResolveError) as caught:
        resolve_recipe(cpu_recipe.model_copy(update={"pinned": {**cpu_recipe.pinned, "foo.bar": 1}}))
    assert str(caught.value).startswith("torchtitan refused the arguments: Unrecognized options: --foo.bar, 1")
    assert "Failed to load" not in str(caught.value) and "helptext" not in str(caught.value)


def test_memory_budget_ac_without_compile_is_refused(cpu_recipe: Recipe) -> None:
    recipe = cpu_recipe.with_lever("activation_checkpoint", "memory_budget").with_lever(
        "activation_checkpoint.memory_budget", 0.5
    )
    with pytest.raises(ResolveError, match=r"Memory budget activation checkpointing requires the model to be compiled"):
        resolve_recipe(recipe)


def test_global_batch_not_divisible_is_refused(cpu_recipe: Recipe) -> None:
    with pytest.raises(
        ResolveError,
        match=r"^training\.global_batch_size 8 is not divisible by local batch 3 x data-parallel degree 1$",
    ):
        resolve_recipe(cpu_recipe.with_lever("training.local_batch_size", 3))


def test_degrees_not_multiplying_to_the_world_size_are_refused(cpu_recipe: Recipe) -> None:
    with pytest.raises(
        ResolveError, match=r"parallel degrees \(dp 1 x tp 2 x pp 1 x cp 1\) must multiply to the 1 devices"
    ):
        resolve_recipe(cpu_recipe.with_lever("parallelism.tensor_parallel_degree", 2))


def test_a_pin_that_does_not_hold_is_refused(cpu_recipe: Recipe) -> None:
    recipe = cpu_recipe.model_copy(update={"pinned": {**cpu_recipe.pinned, "optimizer.lr": 0.001}})
    with pytest.raises(ResolveError, match=r"pinned optimizer\.lr: recipe says 0\.001, the resolved config has 0\.003"):
        resolve_recipe(recipe)


def test_aliased_pins_are_checked_on_the_resolved_config(cpu_recipe: Recipe) -> None:
    ok = cpu_recipe.model_copy(
        update={"pinned": {**cpu_recipe.pinned, "optimizer.eps": 1e-8, "optimizer.weight_decay": 0.1}}
    )
    resolve_recipe(ok)
    bad = cpu_recipe.model_copy(update={"pinned": {**cpu_recipe.pinned, "optimizer.weight_decay": 0.0}})
    with pytest.raises(
        ResolveError, match=r"^pinned optimizer\.weight_decay: recipe says 0\.0, the resolved config has 0\.1$"
    ):
        resolve_recipe(bad)


def test_config_only_quantization_is_refused(cpu_recipe: Recipe) -> None:
    with pytest.raises(ResolveError, match=r"quantize\.linear is set by a config function only"):
        resolve_recipe(cpu_recipe.with_lever("quantize.linear", "float8"))


def test_a_simulated_recipe_has_nothing_to_resolve(cpu_recipe: Recipe) -> None:
    cluster = cpu_recipe.cluster.model_copy(update={"launcher": "sim"})
    with pytest.raises(ResolveError, match="simulated"):
        resolve_recipe(cpu_recipe.model_copy(update={"cluster": cluster}))


# ---------------------------------------------------------------- pure helpers
def _flat(**kw: int) -> dict[str, int]:
    base = {
        "parallelism.data_parallel_replicate_degree": 1,
        "parallelism.data_parallel_shard_degree": -1,
        "parallelism.tensor_parallel_degree": 1,
        "parallelism.pipeline_parallel_degree": 1,
        "parallelism.context_parallel_degree": 1,
        "training.global_batch_size": 32,
        "training.local_batch_size": 2,
    }
    return {**base, **{f"parallelism.{k}" if "degree" in k else f"training.{k}": v for k, v in kw.items()}}


def test_dp_degree_resolves_leftover_shard() -> None:
    assert dp_degree(_flat(), 8) == 8
    assert dp_degree(_flat(tensor_parallel_degree=2), 8) == 4
    assert dp_degree(_flat(tensor_parallel_degree=2, pipeline_parallel_degree=2, context_parallel_degree=2), 8) == 1
    assert dp_degree(_flat(data_parallel_replicate_degree=2), 8) == 8
    assert dp_degree(_flat(data_parallel_replicate_degree=2, data_parallel_shard_degree=2), 8) == 4


def test_batch_problems(cpu_recipe: Recipe) -> None:
    cluster = cpu_recipe.cluster.model_copy(update={"devices_per_node": 8})
    recipe = cpu_recipe.model_copy(update={"cluster": cluster})
    assert batch_problems(recipe, _flat()) == []  # 32 = 2 x 8 x 2 accumulation steps
    assert batch_problems(recipe, _flat(local_batch_size=3)) == [
        "training.global_batch_size 32 is not divisible by local batch 3 x data-parallel degree 8"
    ]
    assert batch_problems(recipe, _flat(data_parallel_shard_degree=2)) == [
        "parallel degrees (dp 2 x tp 1 x pp 1 x cp 1) must multiply to the 8 devices"
    ]
    assert batch_problems(recipe, _flat(global_batch_size=-1)) == []  # -1: local batch x dp


def test_pin_mismatches() -> None:
    flat = {
        "training.seq_len": 256,
        "optimizer.param_groups.0.optimizer_kwargs.lr": 0.003,
        "debug.deterministic": False,
    }
    assert pin_mismatches({"training.seq_len": 256, "optimizer.lr": 0.003, "debug.deterministic": False}, flat) == []
    assert pin_mismatches({"training.seq_len": 256.0}, flat) == []
    assert pin_mismatches({"debug.deterministic": True}, flat) == [
        "pinned debug.deterministic: recipe says True, the resolved config has False"
    ]
    assert pin_mismatches({"training.nope": 1}, flat) == [
        "pinned training.nope: no such field in the resolved torchtitan config"
    ]


def test_flatten() -> None:
    nested = {"a": {"b": 1, "c": [1, 2], "d": [{"e": 3}]}, "f": (1, 2)}
    assert flatten(nested) == {"a.b": 1, "a.c": [1, 2], "a.d.0.e": 3, "f": [1, 2]}


@pytest.mark.parametrize("mode", ["none", "selective", "full"])
def test_every_ac_mode_resolves_to_its_catalog_name(cpu_recipe: Recipe, mode: str) -> None:
    recipe = cpu_recipe.model_copy(update={"levers": {**cpu_recipe.levers, "activation_checkpoint": mode}})
    assert resolve_recipe(recipe)["activation_checkpoint.mode"] == mode  # never a class name such as "NoneType"
