"""bot.core.matcher: every op, missing-field semantics, combinators, explain, validation errors."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from bot.core.matcher import (
    Leaf,
    describe,
    explain,
    fields,
    flatten,
    matched_leaves,
    matches,
    parse_condition,
    positive_fields,
    to_data,
    version_matches,
)

CTX = {
    "parallelism.tensor_parallel_degree": 2,
    "training.max_norm": 1.0,
    "compile.enable": True,
    "workload.module": "gpt_oss",
    "parallelism.pipeline_parallel_schedule": "Interleaved1F1B",
    "stack.torch": "2.13.0+cpu",
    "stack.torchtitan": "0.3.0",
    "levers.env.OMP_NUM_THREADS": 1,
    "nothing": None,
}


def leaf(field: str, op: str, value: object = ..., **extra: object) -> dict[str, object]:
    data: dict[str, object] = {"field": field, "op": op, **extra}
    if value is not ...:
        data["value"] = value
    return data


@pytest.mark.parametrize(
    ("cond", "expected"),
    [
        (leaf("parallelism.tensor_parallel_degree", "eq", 2), True),
        (leaf("parallelism.tensor_parallel_degree", "eq", 2.0), True),
        (leaf("parallelism.tensor_parallel_degree", "ne", 2), False),
        (leaf("parallelism.tensor_parallel_degree", "in", [1, 2, 4]), True),
        (leaf("parallelism.tensor_parallel_degree", "not_in", [1, 2]), False),
        (leaf("parallelism.tensor_parallel_degree", "lt", 2), False),
        (leaf("parallelism.tensor_parallel_degree", "le", 2), True),
        (leaf("parallelism.tensor_parallel_degree", "gt", 1), True),
        (leaf("parallelism.tensor_parallel_degree", "ge", 3), False),
        (leaf("training.max_norm", "gt", 0), True),
        (leaf("compile.enable", "eq", True), True),
        (leaf("compile.enable", "eq", 1), False),  # a bool is not a number
        (leaf("compile.enable", "gt", 0), False),  # nor ordered like one
        (leaf("levers.env.OMP_NUM_THREADS", "eq", True), False),
        (leaf("workload.module", "eq", "gpt_oss"), True),
        (leaf("workload.module", "lt", 3), False),  # strings are not ordered against numbers
        (leaf("parallelism.pipeline_parallel_schedule", "eq", "interleaved1f1b"), False),
        (leaf("parallelism.pipeline_parallel_schedule", "eq", "interleaved1f1b", icase=True), True),
        (leaf("parallelism.pipeline_parallel_schedule", "in", ["1f1b", "INTERLEAVED1F1B"], icase=True), True),
        (leaf("nothing", "exists"), True),
        (leaf("nothing", "eq", None), True),
        (leaf("stack.torch", "version_in", ">=2.10,<2.14"), True),
        (leaf("stack.torch", "version_in", ">=2.14"), False),
        (leaf("stack.torch", "version_in", ""), True),
        (leaf("stack.torchtitan", "version_in", ">=0.3.0rc1,<0.4"), True),
        (leaf("stack.torchtitan", "version_in", "<0.3.0rc1"), False),
        (leaf("workload.module", "version_in", ">=1"), False),  # not a version
    ],
)
def test_leaf_ops(cond: dict[str, object], expected: bool) -> None:
    assert matches(parse_condition(cond), CTX) is expected


@pytest.mark.parametrize("op", ["eq", "ne", "in", "not_in", "lt", "le", "gt", "ge", "version_in", "exists"])
def test_missing_field_is_false_except_absent(op: str) -> None:
    value = {"in": [1], "not_in": [1], "version_in": ">=1", "exists": ...}.get(op, 1)
    assert matches(parse_condition(leaf("no.such.field", op, value)), CTX) is False
    assert matches(parse_condition(leaf("no.such.field", "absent")), CTX) is True
    assert matches(parse_condition(leaf("training.max_norm", "absent")), CTX) is False


def test_not_of_missing_field_is_true() -> None:
    cond = parse_condition({"not": leaf("runtime.shim", "eq", True)})
    assert matches(cond, CTX) is True
    assert matches(cond, {"runtime.shim": True}) is False


@pytest.mark.parametrize(
    ("version", "spec", "expected"),
    [
        ("2.13.0+cpu", ">=2.10,<2.14", True),
        ("2.13.0+cu130", "==2.13.0", True),
        ("2.13.0.dev20260614+cu130", ">=2.13.0.dev20260614", True),
        ("2.13.0.dev20260613", ">=2.13.0.dev20260614", False),
        ("2.13.0", ">=2.13.0.dev20260614", True),
        ("2.14.0.dev20260801", "<2.14.0.dev0", False),
        ("2.14.0.dev20260801", "<2.14", False),
        ("0.3.0", "<0.3.0rc1", False),
        ("0.3.0rc1", ">=0.3.0rc1,<0.4", True),
        ("not-a-version", ">=0", False),
    ],
)
def test_version_matches(version: str, spec: str, expected: bool) -> None:
    assert version_matches(spec, version) is expected


def test_version_matches_rejects_non_strings() -> None:
    assert version_matches(">=2", 2.13) is False
    assert version_matches(">=2", None) is False


def test_combinators() -> None:
    yes = leaf("compile.enable", "eq", True)
    no = leaf("compile.enable", "eq", False)
    assert matches(parse_condition({"all": [yes, yes]}), CTX)
    assert not matches(parse_condition({"all": [yes, no]}), CTX)
    assert matches(parse_condition({"any": [no, yes]}), CTX)
    assert not matches(parse_condition({"any": [no, no]}), CTX)
    assert matches(parse_condition({"all": []}), CTX)
    assert not matches(parse_condition({"any": []}), CTX)
    assert matches(parse_condition({"not": {"all": [yes, no]}}), CTX)
    nested = parse_condition({"any": [{"not": no}, {"all": [no]}]})
    assert matches(nested, CTX)


def test_explain_marks_matches_and_shows_actual_values() -> None:
    cond = parse_condition(
        {
            "all": [
                leaf("parallelism.tensor_parallel_degree", "gt", 1),
                leaf("compile.enable", "eq", False),
                {"not": leaf("runtime.shim", "eq", True)},
            ]
        }
    )
    text = explain(cond, CTX)
    lines = text.splitlines()
    assert lines[0] == "[ ] all"
    assert "[x] parallelism.tensor_parallel_degree > 1  (actual: 2)" in text
    assert "[ ] compile.enable == false  (actual: true)" in text
    assert "[x] not" in text
    assert "runtime.shim == true  (actual: missing)" in text


def test_describe_fields_matched_leaves() -> None:
    cond = parse_condition({"any": [leaf("a.b", "in", [1, 2]), {"not": leaf("c", "absent")}]})
    assert describe(cond) == "any(a.b in [1, 2], not(c is absent))"
    assert fields(cond) == {"a.b", "c"}
    hit = matched_leaves(cond, {"a.b": 1})
    assert [leaf_.field for leaf_ in hit] == ["a.b", "c"]


def test_flatten() -> None:
    nested = {"levers": {"training.local_batch_size": 4, "compile": {"enable": True}}, "x": [1, {"y": 2}]}
    assert flatten(nested) == {
        "levers.training.local_batch_size": 4,
        "levers.compile.enable": True,
        "x": [1, {"y": 2}],
    }


@pytest.mark.parametrize(
    ("bad", "where", "needle"),
    [
        (leaf("a", "equals", 1), ("<leaf>", "op"), "Input should be"),
        (leaf("a b", "eq", 1), ("<leaf>", "field"), "dotted name"),
        (leaf("a", "eq"), ("<leaf>", "value"), "needs a value"),
        (leaf("a", "exists", 3), ("<leaf>", "value"), "takes no value"),
        (leaf("a", "in", 3), ("<leaf>", "value"), "list value"),
        (leaf("a", "lt", "x"), ("<leaf>", "value"), "number value"),
        (leaf("a", "gt", True), ("<leaf>", "value"), "number value"),
        (leaf("a", "version_in", ">>2"), ("<leaf>", "value"), "PEP 440"),
        (leaf("a", "version_in", 2), ("<leaf>", "value"), "specifier string"),
        ({"field": "a", "op": "eq", "value": 1, "vlaue": 2}, ("<leaf>", "vlaue"), "Extra inputs"),
        ({"every": []}, (), "expected a condition"),
        (5, (), "expected a condition"),
        ({"all": {"field": "a"}}, ("<all>", "all"), "valid list"),
    ],
)
def test_malformed_conditions(bad: object, where: tuple[object, ...], needle: str) -> None:
    with pytest.raises(ValidationError) as info:
        parse_condition(bad)
    err = info.value.errors()[0]
    assert tuple(err["loc"]) == where
    assert needle in err["msg"]


def test_to_data_round_trips() -> None:
    raw = {
        "all": [
            leaf("a", "eq", None),
            leaf("b", "exists"),
            leaf("c", "in", ["X"], icase=True),
            {"not": {"any": [leaf("d", "version_in", ">=1")]}},
        ]
    }
    cond = parse_condition(raw)
    assert to_data(cond) == raw
    assert parse_condition(to_data(cond)) == cond


scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.floats(allow_nan=False), st.text(max_size=3))


@given(value=scalars, probe=scalars)
def test_eq_ne_complementary_when_present(value: object, probe: object) -> None:
    ctx = {"f": value}
    eq = matches(Leaf(field="f", op="eq", value=probe), ctx)
    ne = matches(Leaf(field="f", op="ne", value=probe), ctx)
    assert eq != ne


@given(value=st.one_of(scalars, st.lists(scalars, max_size=3), st.dictionaries(st.text(max_size=2), scalars)))
def test_matching_never_raises(value: object) -> None:
    ctx = {"f": value}
    for op, arg in [("lt", 1), ("ge", 0.5), ("in", [1, "a"]), ("version_in", ">=1"), ("eq", [1])]:
        matches(Leaf(field="f", op=op, value=arg), ctx)
    cond = parse_condition({"not": {"not": leaf("f", "eq", 1)}})
    assert matches(cond, ctx) == matches(parse_condition(leaf("f", "eq", 1)), ctx)


def test_positive_fields_leave_out_what_is_read_under_not() -> None:
    """A lesson held back by a cost's share reads it under ``not``: it is not aimed at that cost."""
    cond = parse_condition(
        {
            "all": [
                {"field": "a", "op": "gt", "value": 1},
                {"any": [{"field": "b", "op": "eq", "value": 2}]},
                {"not": {"field": "c", "op": "ge", "value": 0.15}},
            ]
        }
    )
    assert fields(cond) == {"a", "b", "c"}
    assert positive_fields(cond) == {"a", "b"}
