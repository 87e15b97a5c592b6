"""Campaign requests: the issue-form body GitHub renders, parsed and re-validated field by field."""

from __future__ import annotations

from pathlib import Path

import pytest
from ruamel.yaml import YAML

from bot.github.issue_form import parse_sections
from bot.github.request import (
    FIELDS,
    MAX_BUDGET_HOURS,
    POLICIES,
    CampaignRequest,
    RequestError,
    check_recipe_path,
    parse_runner_labels,
    runs_on,
    validate_request,
)

FORM = Path(__file__).resolve().parents[2] / ".github" / "ISSUE_TEMPLATE" / "campaign.yml"


def body(
    recipe: str = "recipes/llama3_8b/h100x8.yaml",
    budget: str = "8",
    policy: str = "heuristic",
    labels: str = "gpu, h100",
    steps: str = "_No response_",
) -> str:
    """A body exactly as GitHub renders the campaign form."""
    return (
        f"### Recipe path\n\n{recipe}\n\n### Budget (device-hours)\n\n{budget}\n\n### Policy\n\n{policy}\n\n"
        f"### Runner labels\n\n{labels}\n\n### Bench steps\n\n{steps}"
    )


def test_a_good_request() -> None:
    request = validate_request(body(steps="50"))
    assert request == CampaignRequest(
        recipe="recipes/llama3_8b/h100x8.yaml",
        budget_hours=8.0,
        policy="heuristic",
        runner_labels=["gpu", "h100"],
        bench_steps=50,
    )


def test_optional_bench_steps_and_windows_line_endings() -> None:
    request = validate_request(body(budget="2.5", policy="TPE", labels="gpu h100,gpu").replace("\n", "\r\n"))
    assert isinstance(request, CampaignRequest)
    assert (request.budget_hours, request.policy, request.runner_labels, request.bench_steps) == (
        2.5,
        "tpe",
        ["gpu", "h100"],
        None,
    )


def test_every_problem_is_listed_in_one_error() -> None:
    error = validate_request(
        body(recipe="../secrets.yaml", budget="lots", policy="yolo", labels="gpu;rm -rf /", steps="3")
    )
    assert isinstance(error, RequestError)
    fields = [p.split(":")[0] for p in error.problems]
    assert fields == list(FIELDS)
    assert error.message.startswith("This campaign request cannot start yet")
    assert all(f"- {p}" in error.message for p in error.problems)


@pytest.mark.parametrize(
    ("recipe", "problem"),
    [
        ("recipes/a/b.yaml", None),
        ("recipes/b.yaml", None),
        ("", "missing"),
        ("/recipes/a.yaml", "plain relative path"),
        ("recipes/../bot/cli.yaml", "plain relative path"),
        ("recipes/./a.yaml", "plain relative path"),
        ("recipes//a.yaml", "plain relative path"),
        ("configs/a.yaml", "under recipes/"),
        ("recipes/a.yml", "under recipes/"),
        ("recipes", "under recipes/"),
        ("recipes/a b.yaml", "only letters"),
        ("recipes/$(id).yaml", "only letters"),
        ("recipes\\a.yaml", "only letters"),
    ],
)
def test_recipe_paths(recipe: str, problem: str | None) -> None:
    found = check_recipe_path(recipe)
    assert found is None if problem is None else problem in found


@pytest.mark.parametrize(
    ("budget", "ok"),
    [
        ("8", True),
        ("0.5", True),
        (str(MAX_BUDGET_HOURS), True),
        ("0", False),
        ("-1", False),
        ("1e3", False),
        ("nan", False),
        ("inf", False),
        ("501", False),
        ("8h", False),
        ("", False),
    ],
)
def test_budget(budget: str, ok: bool) -> None:
    assert isinstance(validate_request(body(budget=budget)), CampaignRequest) is ok


@pytest.mark.parametrize("steps", ["4", "10001", "ten", "-5", "5.5"])
def test_bench_steps_out_of_range(steps: str) -> None:
    error = validate_request(body(steps=steps))
    assert isinstance(error, RequestError) and error.problems[0].startswith("Bench steps")


@pytest.mark.parametrize("steps", ["²", "1²", "٣٠", "５０", "50\u0660"])
def test_bench_steps_take_only_ascii_digits(steps: str) -> None:
    """``str.isdigit`` takes ``²`` (``int`` then raised) and other scripts' digits (``int`` read ``٣٠`` as 30)."""
    assert steps.isdigit()
    error = validate_request(body(steps=steps))
    assert isinstance(error, RequestError) and len(error.problems) == 1
    assert error.problems[0].startswith("Bench steps") and "digits 0-9" in error.problems[0]


def test_runner_labels() -> None:
    assert parse_runner_labels("gpu, h100\nlinux-x64") == (["gpu", "h100", "linux-x64"], None)
    assert "use only" in parse_runner_labels("gpu, ${{ secrets.X }}")[1]
    assert "at most 10" in parse_runner_labels(",".join(f"l{i}" for i in range(11)))[1]
    assert "missing" in parse_runner_labels(" , ")[1]


def test_a_body_without_the_form_is_rejected_plainly() -> None:
    for text in (None, "", "please tune my model"):
        error = validate_request(text)
        assert isinstance(error, RequestError) and "none of the campaign form's sections" in error.problems[0]


def test_untrusted_values_are_defused_when_quoted_back() -> None:
    error = validate_request(body(budget="<img src=x onerror=alert(1)> @everyone `rm`"))
    assert isinstance(error, RequestError)
    (problem,) = error.problems
    assert not any(ch in problem.split(":", 1)[1] for ch in "<>@`")


def test_sections_parser_keeps_the_first_answer_and_ignores_preamble() -> None:
    text = "intro\n### Policy\n\nrandom\n\n### Policy\n\nclaude\n### Empty\n\n_No response_\n"
    assert parse_sections(text) == {"Policy": "random", "Empty": ""}


def test_the_issue_form_matches_the_parser() -> None:
    form = YAML(typ="safe").load(FORM.read_text())
    fields = [item for item in form["body"] if item["type"] != "markdown"]
    assert [f["attributes"]["label"] for f in fields] == list(FIELDS)
    assert form["labels"] == ["attune:campaign"]
    (policy,) = [f for f in fields if f["id"] == "policy"]
    assert tuple(policy["attributes"]["options"]) == POLICIES
    required = {f["attributes"]["label"]: f.get("validations", {}).get("required", False) for f in fields}
    assert required == {label: label != "Bench steps" for label in FIELDS}


def test_runs_on_always_starts_with_self_hosted() -> None:
    assert runs_on('["gpu", "h100"]') == ["self-hosted", "gpu", "h100"]
    assert runs_on("gpu, self-hosted") == ["self-hosted", "gpu"]
    for bad in ('["gpu", 3]', '["gpu"', "[]", '["a b"]', "${{ github.token }}"):
        with pytest.raises(ValueError, match="Runner labels"):
            runs_on(bad)
