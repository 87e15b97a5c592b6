"""gate.rules: the real rule files load, malformed files fail clearly, defects fire where they should."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.core.matcher import fields
from gate.rules import (
    FAIL_CLOSED,
    DefectRule,
    RuleFileError,
    TierRule,
    classify,
    defect_matches,
    explain_defect,
    load_defects,
    load_tiers,
    matching_defects,
    missing_context,
    strictest,
)

DEFECTS = load_defects()
BY_ID = {rule.id: rule for rule in DEFECTS}

# Context prefixes the rules may read (documented in defects.yaml `about`).
KNOWN_PREFIXES = (
    "parallelism.",
    "training.",
    "compile.",
    "metrics.",
    "loss.",
    "optimizer.",
    "activation_checkpoint.",
    "stack.",
    "workload.",
    "model.",
    "derived.",
    "runtime.",
    "env.",
    "recipe.",
)

STACK_030_H100 = {
    "stack.torch": "2.14.0.dev20260815+cu130",  # torchtitan releases pin a nightly
    "stack.torchtitan": "0.3.0",
    "stack.torchao": "0.18.0",
    "stack.device_family": "cuda",
    "stack.device_sm": 90,
}


def llama3_8b_defaults(**over: object) -> dict[str, object]:
    """torchtitan 0.3.0 llama3_8b resolved defaults on 8 H100 (the parts the rules read)."""
    ctx: dict[str, object] = {
        **STACK_030_H100,
        "workload.module": "llama3",
        "workload.config": "llama3_8b",
        "model.moe": False,
        "model.attn_backend": "flex",
        "model.float8": False,
        "model.has_frozen_params": False,
        "parallelism.data_parallel_replicate_degree": 1,
        "parallelism.data_parallel_shard_degree": -1,
        "parallelism.tensor_parallel_degree": 1,
        "parallelism.pipeline_parallel_degree": 1,
        "parallelism.pipeline_parallel_schedule": "1F1B",
        "parallelism.context_parallel_degree": 1,
        "parallelism.expert_parallel_degree": 1,
        "parallelism.spmd_backend": "spmd_types",
        "parallelism.fsdp_reshard_after_forward": "default",
        "training.max_norm": 1.0,
        "training.dtype": "float32",
        "training.disable_cuda_graphs": False,
        "training.local_batch_size": 1,
        "training.global_batch_size": 8,
        "training.seq_len": 8192,
        "compile.enable": False,
        "compile.enable_async_tensor_parallel": False,
        "metrics.log_freq": 10,
        "optimizer.implementation": "fused",
        "activation_checkpoint.mode": "selective",
        "derived.dp_degree": 8,
        "derived.dp_shard_degree": 8,
        "derived.grad_accum_steps": 1,
        "derived.seq_len_mod_128": 0,
        "derived.seed_checkpoint": False,
    }
    ctx.update(over)
    return ctx


def cpu_recipe(**over: object) -> dict[str, object]:
    """The project's local CPU recipe: 1 rank, fp32, shims on, torch 2.13.0+cpu."""
    ctx = llama3_8b_defaults(
        **{
            "stack.torch": "2.13.0+cpu",
            "stack.device_family": "cpu",
            "stack.device_sm": None,
            "workload.config": "llama3_cpu_fast",
            "activation_checkpoint.mode": "none",
            "training.disable_cuda_graphs": True,
            "training.seq_len": 256,
            "derived.dp_degree": 1,
            "derived.dp_shard_degree": 1,
            "runtime.set_timeout_shim": True,
            "runtime.force_sum_reduction": True,
            "runtime.sdpa_attention_shim": True,
        }
    )
    ctx.update(over)
    return ctx


# --------------------------------------------------------------------------- the real files


def test_defects_file_loads_with_at_least_15_cited_rules() -> None:
    assert len(DEFECTS) >= 15
    assert len(BY_ID) == len(DEFECTS)
    for rule in DEFECTS:
        assert rule.source.startswith("https://"), rule.id
        assert all(ref.startswith("https://") for ref in rule.refs), rule.id
        assert rule.symptom and rule.title


def test_defect_conditions_read_documented_keys_only() -> None:
    for rule in DEFECTS:
        for name in fields(rule.when):
            assert name.startswith(KNOWN_PREFIXES), f"{rule.id} reads undocumented key {name}"


def test_both_actions_are_used() -> None:
    assert {rule.action for rule in DEFECTS} == {"reject", "require_convergence"}


def test_tiers_file_loads_and_ends_fail_closed() -> None:
    tiers = load_tiers()
    assert len(tiers) >= 30
    assert tiers[-1].pattern == "*" and tiers[-1].tier == "X"
    assert all(t.source.startswith("https://") for t in tiers)
    assert all(t.tier in ("N", "X") for t in tiers if t.precision)


# --------------------------------------------------------------------------- classification


@pytest.mark.parametrize(
    ("field", "values", "tier"),
    [
        ("optimizer.param_groups.0.optimizer_kwargs", (), "X"),
        ("optimizer.param_groups.0.pattern", (), "X"),
        ("optimizer.implementation", ("fused", "foreach"), "R"),
        ("optimizer.implementation", ("fused", "fused_opt_states_bf16"), "N"),
        ("optimizer.implementation", (), "N"),  # conservative without values
        ("lr_scheduler.warmup_steps", (), "X"),
        ("training.max_norm", (), "X"),
        ("training.seq_len", (), "X"),
        ("training.global_batch_size", (), "X"),
        ("training.steps", (), "X"),
        ("training.local_batch_size", (), "R"),
        ("training.dtype", (), "N"),
        ("training.mixed_precision_param", (), "N"),
        ("training.mixed_precision_reduce", (), "N"),
        ("training.enable_cpu_offload", (), "R"),
        ("training.gc_freq", (), "B"),
        ("dataloader.dataset", (), "X"),
        ("dataloader.dataset_path", (), "X"),
        ("dataloader.num_workers", (), "X"),
        ("dataloader.pin_memory", (), "B"),
        ("hf_assets_path", (), "X"),
        ("debug.seed", (), "X"),
        ("model_spec.model.dim", (), "X"),
        ("model_spec", (), "X"),
        ("loss.num_chunks", (), "R"),
        ("loss.loss_fn.global_vocab_size", (), "X"),
        ("parallelism.tensor_parallel_degree", (), "R"),
        ("parallelism.data_parallel_shard_degree", (), "R"),
        ("parallelism.pipeline_parallel_schedule", (), "R"),
        ("parallelism.fsdp_reshard_after_forward", (), "B"),
        ("activation_checkpoint.mode", ("selective", "full"), "B"),
        ("activation_checkpoint.mode", ("selective", "memory_budget"), "R"),
        ("activation_checkpoint.memory_budget", (), "R"),
        ("compile.enable", (), "R"),
        ("compile.enable_async_tensor_parallel", (), "R"),
        ("metrics.log_freq", (), "B"),
        ("profiler.enable_profiling", (), "B"),
        ("checkpoint.interval", (), "B"),
        ("checkpoint.initial_load_path", (), "X"),
        ("debug.enable_structured_logging", (), "B"),
        ("comm.mode", (), "X"),
        ("comm.train_timeout_seconds", (), "B"),
        ("env.NCCL_ALGO", (), "R"),
        ("something.nobody.classified", (), "X"),
    ],
)
def test_classify_sample_fields(field: str, values: tuple[str, ...], tier: str) -> None:
    assert classify(field, values=values).tier == tier


def test_classify_flags_precision_and_invariants() -> None:
    assert classify("training.dtype").precision
    assert not classify("compile.enable").precision
    assert classify("training.local_batch_size").requires == ["global_batch_pinned"]
    assert "seed_checkpoint" in classify("parallelism.pipeline_parallel_degree").requires
    assert classify("not.a.field").pattern == "*"


def test_first_match_wins_and_default_fails_closed() -> None:
    src = "https://example.org/doc"
    rules = [
        TierRule(pattern="a.special", tier="B", why="first", source=src),
        TierRule(pattern="a.*", tier="R", why="second", source=src),
    ]
    assert classify("a.special", rules=rules).why == "first"
    assert classify("a.other", rules=rules).why == "second"
    assert classify("b.x", rules=rules) is FAIL_CLOSED
    assert strictest([rules[0], rules[1]]).tier == "R"
    assert strictest([]).tier == "X"


# --------------------------------------------------------------------------- defects fire


def fired(ctx: dict[str, object]) -> set[str]:
    return {rule.id for rule in matching_defects(DEFECTS, ctx)}


def test_no_reject_on_llama3_8b_defaults_on_030() -> None:
    ctx = llama3_8b_defaults()
    rejects = [r.id for r in matching_defects(DEFECTS, ctx) if r.action == "reject"]
    assert rejects == []


def test_no_reject_on_the_local_cpu_recipe() -> None:
    assert [r.id for r in matching_defects(DEFECTS, cpu_recipe()) if r.action == "reject"] == []


@pytest.mark.parametrize(
    ("rule_id", "ctx"),
    [
        (
            "gpt-oss-tp-bias-times-tp",
            llama3_8b_defaults(**{"workload.module": "gpt_oss", "parallelism.tensor_parallel_degree": 2}),
        ),
        ("spmd-types-frozen-params-trained", llama3_8b_defaults(**{"model.has_frozen_params": True})),
        (
            "minimal-async-ep-tp-cuda-graphs",
            llama3_8b_defaults(
                **{
                    "workload.config": "deepseek_v3_16b_minimal_async_ep",
                    "parallelism.tensor_parallel_degree": 2,
                }
            ),
        ),
        (
            "zbv-dualpipev-with-compile",
            llama3_8b_defaults(
                **{
                    "parallelism.pipeline_parallel_degree": 2,
                    "parallelism.pipeline_parallel_schedule": "zbvzerobubble",
                    "compile.enable": True,
                }
            ),
        ),
        (
            "interleaved-zero-bubble-with-ac",
            llama3_8b_defaults(
                **{
                    "parallelism.pipeline_parallel_degree": 4,
                    "parallelism.pipeline_parallel_schedule": "InterleavedZeroBubble",
                }
            ),
        ),
        (
            "ep-degree-not-dividing",
            llama3_8b_defaults(**{"parallelism.expert_parallel_degree": 3, "derived.ep_divides_mesh": False}),
        ),
        (
            "ep-degree-not-dividing",
            llama3_8b_defaults(**{"parallelism.expert_parallel_degree": 4, "derived.num_experts_mod_ep": 2}),
        ),
        (
            "blackwell-grouped-mm-padding-nan",
            llama3_8b_defaults(
                **{
                    "stack.torch": "2.13.0+cu130",
                    "stack.device_sm": 100,
                    "model.moe": True,
                    "parallelism.expert_parallel_degree": 8,
                }
            ),
        ),
        (
            "compiled-float8-triton-store-miscompile",
            llama3_8b_defaults(
                **{"compile.enable": True, "model.float8": True, "stack.torchao": "0.17.0.dev20260701+cu130"}
            ),
        ),
        (
            "hybridep-capacity-factor-drops-tokens",
            llama3_8b_defaults(**{"model.hybridep_capacity_factor": 0.8}),
        ),
        (
            "torch213-spmd-types-fsdp-dense-mesh",
            cpu_recipe(**{"derived.dp_degree": 2, "derived.dp_shard_degree": 2}),
        ),
        (
            "gloo-premul-sum-unsupported",
            cpu_recipe(**{"derived.dp_degree": 2, "runtime.force_sum_reduction": False}),
        ),
        ("torch213-missing-dist-set-timeout", cpu_recipe(**{"runtime.set_timeout_shim": False})),
        ("flex-attention-no-cpu-backward", cpu_recipe(**{"runtime.sdpa_attention_shim": False})),
        (
            "cpu-dtensor-rng-identical-shards",
            cpu_recipe(**{"derived.dp_shard_degree": 2, "parallelism.spmd_backend": "partial_dtensor"}),
        ),
        (
            "inductor-mix-order-reduction-wrong-grads",
            llama3_8b_defaults(**{"workload.module": "flux", "compile.enable": True}),
        ),
        (
            "cudnn-sdpa-backward-seq-mod-128",
            llama3_8b_defaults(
                **{"model.attn_backend": "sdpa", "training.seq_len": 8256, "derived.seq_len_mod_128": 64}
            ),
        ),
    ],
)
def test_defect_fires_on_a_context_built_to_trigger_it(rule_id: str, ctx: dict[str, object]) -> None:
    assert rule_id in fired(ctx), explain_defect(BY_ID[rule_id], ctx)


def test_workarounds_silence_the_defects() -> None:
    assert "inductor-mix-order-reduction-wrong-grads" not in fired(
        llama3_8b_defaults(
            **{
                "workload.module": "flux",
                "compile.enable": True,
                "env.TORCHINDUCTOR_MIX_ORDER_REDUCTION": "0",
            }
        )
    )
    assert "cpu-dtensor-rng-identical-shards" not in fired(
        cpu_recipe(**{"derived.dp_shard_degree": 2, "derived.seed_checkpoint": True})
    )
    assert "minimal-async-ep-tp-cuda-graphs" not in fired(
        llama3_8b_defaults(
            **{
                "model.moe_comm_backend": "minimal_async_ep",
                "parallelism.tensor_parallel_degree": 2,
                "training.disable_cuda_graphs": True,
            }
        )
    )
    # a torch nightly that has FSDP spmd_types support
    assert "torch213-spmd-types-fsdp-dense-mesh" not in fired(
        cpu_recipe(**{"derived.dp_degree": 2, "stack.torch": "2.14.0.dev20260801+cpu"})
    )


def test_device_family_scopes_rules() -> None:
    cuda = llama3_8b_defaults(**{"derived.dp_degree": 2, "runtime.force_sum_reduction": False})
    assert "gloo-premul-sum-unsupported" not in fired(cuda)
    assert "flex-attention-no-cpu-backward" not in fired(cuda)


# every condition of the pre-0.3.0 rules is true here; only the version keeps them quiet
EVERYTHING_ON = llama3_8b_defaults(
    **{
        "parallelism.tensor_parallel_degree": 2,
        "parallelism.pipeline_parallel_degree": 2,
        "parallelism.context_parallel_degree": 2,
        "parallelism.expert_parallel_degree": 4,
        "parallelism.data_parallel_replicate_degree": 2,
        "derived.grad_accum_steps": 4,
        "derived.efsdp_degree": 1,
        "model.moe": True,
        "model.float8_recipe": "rowwise",
        "compile.enable": True,
        "compile.enable_async_tensor_parallel": True,
        "model.attn_backend": "sdpa",
    }
)
OLD_RULES = {
    "chunked-ce-tp-wrong-grads": "0.3.0.dev20260501",
    "pp-grad-accum-scale-grads": "0.1.0",
    "per-microbatch-loss-normalisation": "0.2.1",
    "ddp-hsdp-grads-divided-twice": "0.2.2",
    "ep-expert-grads-too-large": "0.1.0",
    "ep-world-size-divide-factor-ignored": "0.2.1",
    "float8-rowwise-compile-rmsnorm-nan": "0.0.2",
    "pp-cp-rope-positions": "0.0.2",
    "pp-grad-clip-per-stage": "0.0.2",
}


@pytest.mark.parametrize(("rule_id", "old_version"), sorted(OLD_RULES.items()))
def test_old_defects_stay_quiet_on_030_and_fire_on_their_versions(rule_id: str, old_version: str) -> None:
    rule = BY_ID[rule_id]
    assert not defect_matches(rule, EVERYTHING_ON), explain_defect(rule, EVERYTHING_ON)
    old = {**EVERYTHING_ON, "stack.torchtitan": old_version, "stack.torch": "2.8.0+cu128"}
    assert defect_matches(rule, old), explain_defect(rule, old)


def test_unknown_stack_version_never_fires_and_is_reported() -> None:
    ctx = llama3_8b_defaults(**{"workload.module": "gpt_oss", "parallelism.tensor_parallel_degree": 2})
    del ctx["stack.torchtitan"]
    rule = BY_ID["gpt-oss-tp-bias-times-tp"]
    assert not defect_matches(rule, ctx)
    assert missing_context(rule, ctx) == ["stack.torchtitan"]


def test_explain_defect_shows_stack_and_condition() -> None:
    ctx = llama3_8b_defaults(**{"workload.module": "gpt_oss", "parallelism.tensor_parallel_degree": 2})
    text = explain_defect(BY_ID["gpt-oss-tp-bias-times-tp"], ctx)
    assert text.splitlines()[0].endswith("-> reject")
    assert "[x] stack.torchtitan version in '>=0.3.0rc1,<0.4'  (actual: '0.3.0')" in text
    assert "[x] parallelism.tensor_parallel_degree > 1  (actual: 2)" in text
    assert "source: https://github.com/pytorch/torchtitan/pull/4245" in text


# --------------------------------------------------------------------------- malformed files

GOOD_ENTRY = """\
  - id: example-defect
    title: An example
    source: https://github.com/pytorch/torchtitan/issues/1
    affects: {torch: ">=2.10", torchtitan: "", devices: [cuda]}
    when: {field: parallelism.tensor_parallel_degree, op: gt, value: 1}
    symptom: Something breaks.
    action: reject
"""


def write(tmp_path: Path, body: str, name: str = "defects.yaml") -> Path:
    path = tmp_path / name
    path.write_text(body, encoding="utf-8")
    return path


def load_error(path: Path) -> str:
    with pytest.raises(RuleFileError) as info:
        load_defects(path)
    return str(info.value)


def test_good_entry_loads(tmp_path: Path) -> None:
    rules = load_defects(write(tmp_path, "defects:\n" + GOOD_ENTRY))
    assert [r.id for r in rules] == ["example-defect"]
    assert isinstance(rules[0], DefectRule)


def test_missing_field_names_file_entry_and_field(tmp_path: Path) -> None:
    body = (
        "defects:\n"
        + GOOD_ENTRY
        + GOOD_ENTRY.replace("example-defect", "second").replace(
            "    source: https://github.com/pytorch/torchtitan/issues/1\n", ""
        )
    )
    path = write(tmp_path, body)
    msg = load_error(path)
    assert str(path) in msg
    assert "entry 1 (id 'second')" in msg
    assert "field 'source'" in msg
    assert "required field is missing" in msg
    assert ", line 9:" in msg  # the entry starts on line 9


def test_bad_op_names_the_nested_field_and_the_choices(tmp_path: Path) -> None:
    path = write(tmp_path, "defects:\n" + GOOD_ENTRY.replace("op: gt", "op: greater"))
    msg = load_error(path)
    assert "entry 0 (id 'example-defect')" in msg
    assert "field 'when.op'" in msg
    assert "expected 'eq', 'ne'" in msg and "got 'greater'" in msg
    assert ", line 6:" in msg


def test_bad_nested_op_inside_combinators(tmp_path: Path) -> None:
    entry = GOOD_ENTRY.replace(
        "    when: {field: parallelism.tensor_parallel_degree, op: gt, value: 1}\n",
        "    when:\n      all:\n        - {field: a, op: eq, value: 1}\n        - not: {field: b, op: lt, value: x}\n",
    )
    msg = load_error(write(tmp_path, "defects:\n" + entry))
    assert "field 'when.all.1.not.value'" in msg
    assert "needs a number value; got 'x'" in msg
    assert ", line 9:" in msg


def test_bad_version_specifier(tmp_path: Path) -> None:
    msg = load_error(write(tmp_path, "defects:\n" + GOOD_ENTRY.replace('">=2.10"', '">>2.10"')))
    assert "field 'affects.torch'" in msg
    assert "PEP 440" in msg and "'>>2.10'" in msg


def test_bad_version_specifier_in_condition(tmp_path: Path) -> None:
    entry = GOOD_ENTRY.replace(
        "{field: parallelism.tensor_parallel_degree, op: gt, value: 1}",
        '{field: stack.torch, op: version_in, value: "2.13 or later"}',
    )
    msg = load_error(write(tmp_path, "defects:\n" + entry))
    assert "field 'when.value'" in msg and "PEP 440" in msg


@pytest.mark.parametrize(
    ("old", "new", "field", "needle"),
    [
        ("action: reject", "action: 5", "action", "expected 'reject' or 'require_convergence'"),
        ("action: reject", "action: reject\n    silent: maybe", "silent", "valid boolean"),
        ("devices: [cuda]", "devices: cuda", "affects.devices", "valid list"),
        (
            "devices: [cuda]",
            "devices: [tpu]",
            "affects.devices.0",
            "expected 'cuda', 'rocm', 'xpu', 'cpu' or 'any'",
        ),
        ("https://github.com/pytorch/torchtitan/issues/1", "http://example.org", "source", "https://"),
        ("id: example-defect", "id: Example Defect", "id", "should match pattern"),
        (
            "action: reject",
            "action: reject\n    severity: high",
            "severity",
            "unknown field (allowed: action, affects",
        ),
    ],
)
def test_wrong_types_and_values(tmp_path: Path, old: str, new: str, field: str, needle: str) -> None:
    msg = load_error(write(tmp_path, "defects:\n" + GOOD_ENTRY.replace(old, new)))
    assert f"field '{field}'" in msg, msg
    assert needle in msg, msg
    assert "entry 0" in msg


def test_duplicate_ids(tmp_path: Path) -> None:
    msg = load_error(write(tmp_path, "defects:\n" + GOOD_ENTRY + GOOD_ENTRY))
    assert "entry 1 (id 'example-defect')" in msg and "duplicate id, already used by entry 0" in msg


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ("defects: {}\n", "expected a mapping with a 'defects' list"),
        ("- 1\n", "expected a mapping with a 'defects' list"),
        ("defects: []\nextra: 1\n", "unknown top-level key(s) ['extra']"),
        ("defects:\n  - id: [unclosed\n", "YAML syntax error"),
        ("defects:\n  - !!python/object:os.system {}\n", "YAML tags"),
        ("defects:\n  - 7\n", "field '(the entry itself)'"),
    ],
)
def test_file_level_errors(tmp_path: Path, body: str, needle: str) -> None:
    path = write(tmp_path, body)
    msg = load_error(path)
    assert str(path) in msg and needle in msg, msg


def test_duplicate_yaml_keys_are_an_error(tmp_path: Path) -> None:
    msg = load_error(write(tmp_path, "defects:\n" + GOOD_ENTRY + "    action: reject\n"))
    assert "line" in msg and "YAML" in msg


def test_missing_file(tmp_path: Path) -> None:
    msg = load_error(tmp_path / "nope.yaml")
    assert "cannot read file" in msg


def test_malformed_tier_file(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "tiers:\n  - {pattern: 'a.*', tier: Q, why: x, source: 'https://e.org'}\n",
        name="objective.yaml",
    )
    with pytest.raises(RuleFileError) as info:
        load_tiers(path)
    msg = str(info.value)
    assert str(path) in msg and "entry 0" in msg and "field 'tier'" in msg and "expected 'B', 'R', 'N' or 'X'" in msg


def test_precision_tier_must_be_n_or_x(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "tiers:\n  - {pattern: a, tier: B, precision: true, why: x, source: 'https://e.org'}\n",
        name="objective.yaml",
    )
    with pytest.raises(RuleFileError, match="precision field must be tier N or X"):
        load_tiers(path)


@pytest.mark.parametrize(
    "body", ["defects:\n  - !foo 3\n", "defects:\n  - id: !!str x\n", "defects:\n  - !!binary aGVsbG8=\n"]
)
def test_tags_and_exotic_values_are_refused(tmp_path: Path, body: str) -> None:
    msg = load_error(write(tmp_path, body))
    assert "line 2" in msg and ("YAML tags" in msg or "unsupported YAML value" in msg), msg
