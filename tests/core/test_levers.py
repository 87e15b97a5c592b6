"""bot/core/levers.py: value parsing, tiers, prerequisites and the fix a prerequisite asks for."""

from __future__ import annotations

import pytest

from bot.core import levers
from bot.core.levers import (
    CATALOG,
    DEFAULTS,
    LeverError,
    ModelFacts,
    get,
    parse_value,
    prerequisite_for,
    prerequisite_problems,
)


def test_every_lever_has_a_default_and_a_flag() -> None:
    assert set(CATALOG) == set(DEFAULTS)
    for name, lever in CATALOG.items():
        assert lever.name == name
        assert lever.flag().startswith("--") and "_" not in lever.flag()
        lever.parse(DEFAULTS[name])  # every default is a legal value


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        (True, True),
        (False, False),
        ("true", True),
        ("Yes", True),
        (" on ", True),
        ("1", True),
        ("false", False),
        ("NO", False),
        ("off", False),
        ("0", False),
    ],
)
def test_bool_coercion(raw: object, want: bool) -> None:
    assert parse_value("compile.enable", raw) is want


@pytest.mark.parametrize("raw", ["maybe", "2", "", None, 1.5])
def test_bool_refusals(raw: object) -> None:
    with pytest.raises(LeverError, match=r"^compile\.enable: expected true or false; got "):
        parse_value("compile.enable", raw)


@pytest.mark.parametrize(("raw", "want"), [(4, 4), ("4", 4), (" 16 ", 16), (8.0, 8), ("-1", -1)])
def test_int_coercion(raw: object, want: int) -> None:
    value = parse_value("parallelism.data_parallel_shard_degree", raw)
    assert value == want and type(value) is int


@pytest.mark.parametrize("raw", ["four", "4.5", 4.5, True, False, "", None, [4], float("inf")])
def test_int_refusals(raw: object) -> None:
    with pytest.raises(LeverError, match=r"^training\.local_batch_size: expected an integer; got "):
        parse_value("training.local_batch_size", raw)


def test_int_range() -> None:
    with pytest.raises(LeverError, match=r"expected a value >= 1; got 0"):
        parse_value("training.local_batch_size", 0)
    with pytest.raises(LeverError, match=r"expected a value >= -1; got -2"):
        parse_value("parallelism.data_parallel_shard_degree", -2)


@pytest.mark.parametrize(("raw", "want"), [(0.3, 0.3), ("0.25", 0.25), (1, 1.0), ("1e-1", 0.1), (0, 0.0)])
def test_float_coercion(raw: object, want: float) -> None:
    value = parse_value("activation_checkpoint.memory_budget", raw)
    assert value == want and type(value) is float


@pytest.mark.parametrize("raw", ["lots", True, None, [0.3], {"a": 1}, "nan"])
def test_float_refusals(raw: object) -> None:
    with pytest.raises(LeverError, match=r"^activation_checkpoint\.memory_budget: expected a (finite )?number; got "):
        parse_value("activation_checkpoint.memory_budget", raw)


def test_float_range() -> None:
    with pytest.raises(LeverError, match=r"expected a value <= 1; got 1\.5"):
        parse_value("activation_checkpoint.memory_budget", 1.5)
    with pytest.raises(LeverError, match=r"expected a value >= 0"):
        parse_value("activation_checkpoint.memory_budget", -0.1)


def test_choice_coercion_returns_the_catalog_spelling() -> None:
    assert parse_value("activation_checkpoint", "FULL") == "full"
    assert parse_value("parallelism.pipeline_parallel_schedule", "zbvzerobubble") == "ZBVZeroBubble"
    assert parse_value("compile.components", " model ") == "model"
    with pytest.raises(
        LeverError,
        match=r"^activation_checkpoint: expected one of none, selective, full, memory_budget; got 'partial'$",
    ):
        parse_value("activation_checkpoint", "partial")


def test_unknown_lever() -> None:
    with pytest.raises(LeverError, match=r"unknown lever 'training\.steps'; known levers: .*compile\.enable"):
        get("training.steps")


def test_tier_of() -> None:
    assert get("activation_checkpoint").tier_of("full") == "B"
    assert get("activation_checkpoint").tier_of("memory_budget") == "R"
    assert get("optimizer.implementation").tier_of("fused") == "R"
    assert get("optimizer.implementation").tier_of("fused_opt_states_bf16") == "N"
    assert get("quantize.linear").tier_of("none") == "B"
    assert get("quantize.linear").tier_of("float8") == "N"
    assert get("training.local_batch_size").tier_of(4) == "B"
    assert get("training.mixed_precision_param").precision


def test_flag_spelling() -> None:
    assert get("training.local_batch_size").flag() == "--training.local-batch-size"
    assert get("activation_checkpoint.memory_budget").ac_flag
    assert not get("quantize.linear").cli


def test_defaults_are_legal() -> None:
    assert prerequisite_problems({}) == []


def test_async_tp_needs_compile() -> None:
    problems = prerequisite_problems({"compile.enable_async_tensor_parallel": True})
    assert problems == ["compile.enable_async_tensor_parallel needs compile.enable with 'model' in compile.components"]
    assert prerequisite_problems({"compile.enable_async_tensor_parallel": True, "compile.enable": True}) == []
    assert prerequisite_problems(
        {"compile.enable_async_tensor_parallel": True, "compile.enable": True, "compile.components": "loss"}
    )


def test_memory_budget_needs_compile() -> None:
    problems = prerequisite_problems({"activation_checkpoint": "memory_budget"})
    assert len(problems) == 1 and problems[0].startswith("activation_checkpoint memory_budget needs compile.enable")
    assert prerequisite_problems({"activation_checkpoint": "memory_budget", "compile.enable": True}) == []


def test_pp_needs_cuda_graphs_off() -> None:
    problems = prerequisite_problems({"parallelism.pipeline_parallel_degree": 2})
    assert problems == ["parallelism.pipeline_parallel_degree > 1 needs training.disable_cuda_graphs true"]
    assert (
        prerequisite_problems({"parallelism.pipeline_parallel_degree": 2, "training.disable_cuda_graphs": True}) == []
    )


def test_pp_microbatch_must_divide_local_batch() -> None:
    lv = {
        "parallelism.pipeline_parallel_degree": 2,
        "training.disable_cuda_graphs": True,
        "training.local_batch_size": 6,
        "parallelism.pipeline_parallel_microbatch_size": 4,
    }
    assert prerequisite_problems(lv) == [
        "training.local_batch_size must be divisible by parallelism.pipeline_parallel_microbatch_size"
    ]


def test_tp_must_divide_heads() -> None:
    model = ModelFacts(n_heads=6, n_kv_heads=2, n_layers=4)
    assert prerequisite_problems({"parallelism.tensor_parallel_degree": 2}, model) == []
    assert prerequisite_problems({"parallelism.tensor_parallel_degree": 3}, model) == [
        "parallelism.tensor_parallel_degree 3 must divide n_kv_heads 2"
    ]
    assert prerequisite_problems({"parallelism.tensor_parallel_degree": 4}, model) == [
        "parallelism.tensor_parallel_degree 4 must divide n_heads 6",
        "parallelism.tensor_parallel_degree 4 must divide n_kv_heads 2",
    ]
    # without model facts nothing can be said about heads
    assert prerequisite_problems({"parallelism.tensor_parallel_degree": 4}) == []


def test_pp_cannot_exceed_layers() -> None:
    lv = {"parallelism.pipeline_parallel_degree": 8, "training.disable_cuda_graphs": True}
    assert prerequisite_problems(lv, ModelFacts(n_layers=4)) == [
        "parallelism.pipeline_parallel_degree 8 exceeds the 4 layers"
    ]


def test_ep_must_divide_experts() -> None:
    base = {"training.disable_cuda_graphs": True}
    assert prerequisite_problems({**base, "parallelism.expert_parallel_degree": 4}, ModelFacts(num_experts=8)) == []
    assert prerequisite_problems({**base, "parallelism.expert_parallel_degree": 3}, ModelFacts(num_experts=8)) == [
        "parallelism.expert_parallel_degree 3 must divide num_experts 8"
    ]
    assert prerequisite_problems({**base, "parallelism.expert_parallel_degree": 2}, ModelFacts(n_heads=8)) == [
        "parallelism.expert_parallel_degree > 1 needs a MoE model"
    ]
    assert prerequisite_problems({"parallelism.expert_parallel_degree": 2}, ModelFacts(num_experts=8)) == [
        "parallelism.expert_parallel_degree > 1 with the standard dispatcher needs training.disable_cuda_graphs true"
    ]


def test_prerequisite_for_returns_the_fix() -> None:
    assert prerequisite_for({}, "compile.enable_async_tensor_parallel", True) == ("compile.enable", True)
    assert prerequisite_for({}, "activation_checkpoint", "memory_budget") == ("compile.enable", True)
    assert prerequisite_for({}, "parallelism.pipeline_parallel_degree", 2) == ("training.disable_cuda_graphs", True)
    assert prerequisite_for({}, "parallelism.expert_parallel_degree", 2, ModelFacts(num_experts=8)) == (
        "training.disable_cuda_graphs",
        True,
    )


def test_prerequisite_for_none_when_legal_or_unfixable() -> None:
    assert prerequisite_for({"compile.enable": True}, "compile.enable_async_tensor_parallel", True) is None
    assert prerequisite_for({}, "training.local_batch_size", 4) is None
    # a head-divisibility problem has no lever that fixes it
    assert prerequisite_for({}, "parallelism.tensor_parallel_degree", 3, ModelFacts(n_heads=4, n_kv_heads=4)) is None


def test_prerequisite_for_ignores_problems_that_were_already_there() -> None:
    already = {"parallelism.pipeline_parallel_degree": 2}  # already needs cuda graphs off
    assert prerequisite_for(already, "training.local_batch_size", 4) is None


def test_effective_fills_defaults() -> None:
    eff = levers.effective({"training.local_batch_size": 2})
    assert eff["training.local_batch_size"] == 2
    assert eff["activation_checkpoint"] == "selective"


@pytest.mark.parametrize(
    "lever, depends",
    [
        ("parallelism.pipeline_parallel_microbatch_size", "parallelism.pipeline_parallel_degree"),
        ("parallelism.pipeline_parallel_schedule", "parallelism.pipeline_parallel_degree"),
        ("compile.enable_async_tensor_parallel", "parallelism.tensor_parallel_degree"),
        ("parallelism.enable_sequence_parallel", "parallelism.tensor_parallel_degree"),
    ],
)
def test_a_lever_is_inert_only_while_the_feature_it_tunes_is_off(lever: str, depends: str) -> None:
    why = levers.inert({depends: 1}, lever)
    assert why is not None and depends in why and ("torchtitan" in why)
    assert levers.inert({depends: 2}, lever) is None
    assert levers.inert({depends: 1}, "training.local_batch_size") is None


@pytest.mark.parametrize("schedule", ["ZBVZeroBubble", "DualPipeV"])
def test_a_v_shaped_schedule_under_compile_is_a_problem_whose_fix_is_the_compile_safe_zero_bubble_schedule(
    schedule: str,
) -> None:
    """pytorch#161904: the V-shaped schedules crash under torch.compile. Turning compile on over one of them needs the
    zero-bubble schedule without the V first; choosing the V schedule under compile has no fix (it would undo itself)."""
    pp = {
        "parallelism.pipeline_parallel_degree": 2,
        "training.disable_cuda_graphs": True,
        "parallelism.pipeline_parallel_schedule": schedule,
    }
    assert prerequisite_problems(pp) == []
    problems = prerequisite_problems({**pp, "compile.enable": True})
    assert len(problems) == 1 and "pytorch#161904" in problems[0]
    assert prerequisite_for(pp, "compile.enable", True) == (
        "parallelism.pipeline_parallel_schedule",
        "InterleavedZeroBubble",
    )
    assert (
        prerequisite_problems(
            {**pp, "compile.enable": True, "parallelism.pipeline_parallel_schedule": "InterleavedZeroBubble"}
        )
        == []
    )
    compiled = {**pp, "parallelism.pipeline_parallel_schedule": "1F1B", "compile.enable": True}
    assert prerequisite_for(compiled, "parallelism.pipeline_parallel_schedule", schedule) is None
    assert (
        prerequisite_problems({**pp, "parallelism.pipeline_parallel_degree": 1, "compile.enable": True}) == []
    )  # no pipeline: no schedule
