"""Property-based fuzzing of what crosses a trust boundary: uploaded run records, recipes, issue forms, ``/attune``
comments, the records branch's state and the Markdown the bot renders from runner text.

Each property: nothing crashes (only the documented error types), nothing unescaped reaches Markdown, nothing a
check should refuse is accepted. The default suite runs each with a few dozen examples (``BOUNDED``: seconds in all);
the ``slow`` variants run the same properties under the ``attune-fuzz-slow`` profile (``SLOW_EXAMPLES`` each).
"""

from __future__ import annotations

import base64
import contextlib
import re
import sys
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "github"))

from bot.core.mdtext import md_inline  # noqa: E402
from bot.core.recipe import RecipeError, parse_recipe_text  # noqa: E402
from bot.core.records import LaunchShape, RunRecord, RunSummary, StackFingerprint, StepMetric, content_hash  # noqa: E402
from bot.github.commands import Command, CommandError, parse_command  # noqa: E402
from bot.github.github_ports import GitHubForgeError, parse_state  # noqa: E402
from bot.github.request import CampaignRequest, RequestError, validate_request  # noqa: E402
from bot.github.trial_results import REASON_CAP, capped  # noqa: E402
from bot.github.uploads import CEILINGS, STRING_CAP, Expected, record_problem  # noqa: E402

RECIPE_PATH = "recipes/llama3-tiny/cpu.yaml"
RECIPE_TEXT = (ROOT / RECIPE_PATH).read_text()
RECIPE = parse_recipe_text(RECIPE_TEXT, RECIPE_PATH)
SHA = "a" * 40
KNOWN = Expected(sha=SHA, recipe_text=RECIPE_TEXT, recipe=RECIPE, job_wall_s=3600.0)

SLOW_EXAMPLES = 2000
settings.register_profile(
    "attune-fuzz-slow",
    max_examples=SLOW_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
BOUNDED = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(settings.get_profile("attune-fuzz-slow"))

# what Markdown would read in runner text: an image or link, HTML, a mention, a heading, a table cell, emphasis, code
UNSAFE = re.compile(r"(?<!\\)!(?<!\\)\[|<[A-Za-z/!]|@(?!&#8203;)\w|^\s*#|(?<!\\)\||(?<!\\)`|(?<!\\)\*|\n", re.M)
texts = st.text(alphabet=st.characters(codec="utf-8"), max_size=300) | st.sampled_from(
    [
        "![x](https://evil.example/p.png)",
        "@acme/team please look",
        "<img src=x onerror=alert(1)>",
        "\n## gate passed\n",
        "| a | b |",
        "**bold** `code` ~~s~~",
        "<!-- attune:state -->",
        "```\n# fence\n```",
    ]
)


def honest() -> RunRecord:
    """A record the report job believes for ``KNOWN``."""
    steps = [StepMetric(step=i + 1, loss=3.0 - i * 0.1, tps=1000.0, mfu=20.0) for i in range(5)]
    c = RECIPE.cluster
    return RunRecord(
        run_id="r1",
        recipe_id=RECIPE.name,
        recipe_hash=content_hash(RECIPE_TEXT),
        model=RECIPE.workload.model,
        hardware=c.hardware,
        levers=RECIPE.levers,
        pinned=RECIPE.pinned,
        git_commit=SHA,
        stack=StackFingerprint(python="3.11.9", torch="2.9.0+cpu", torchtitan="0.3.0"),
        launch=LaunchShape(
            launcher=c.launcher, nodes=c.nodes, devices_per_node=c.devices_per_node, world_size=RECIPE.devices
        ),
        outcome="ok",
        steps=steps,
        summary=RunSummary(
            steps_completed=5,
            tps_median=1000.0,
            tps_cv=0.01,
            mfu=20.0,
            wall_s=60.0,
            device_hours=RECIPE.devices * 60.0 / 3600.0,
        ),
        usd_per_device_hour=c.usd_per_device_hour,
        simulated=c.launcher == "sim",
    )


def test_an_honest_record_is_believed() -> None:
    assert record_problem(honest(), KNOWN) is None


@pytest.mark.parametrize(
    ("change", "expect"),
    [
        ({"summary.tps_median": 1e300}, "summary.tps_median"),
        ({"summary.mfu": 5000.0}, "summary.mfu"),
        ({"launch.world_size": 999_999}, "world_size"),
        ({"stack.torch": "![x](http://e/p.png)"}, "stack.torch"),
        ({"stack.device_name": "@acme/team"}, "stack.device_name"),
    ],
)
def test_absurd_or_markdown_values_are_refused(change: dict, expect: str) -> None:
    ((where, value),) = change.items()
    head, _, field = where.partition(".")
    rec = honest()
    rec = rec.model_copy(update={head: getattr(rec, head).model_copy(update={field: value})})
    problem = record_problem(rec, KNOWN)
    assert problem is not None and expect in problem and len(problem) < 300


def test_a_huge_dict_key_gives_a_short_problem_and_a_capped_reason() -> None:
    rec = honest().model_copy(update={"levers": {**RECIPE.levers, "k" * 100_000: 1}})
    problem = record_problem(rec, KNOWN)
    assert problem is not None and len(problem) < 400
    numbers = (
        honest().model_copy(update={"breakdown": {"k" * 100_000: float("nan")}})
        if "breakdown" in RunRecord.model_fields
        else None
    )
    if numbers is not None:
        assert len(record_problem(numbers, KNOWN) or "") < 400
    assert len(capped("x" * 100_000)) == REASON_CAP


# -- uploaded records ---------------------------------------------------------------------------------------------

numbers = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([1e300, 5000.0, -1.0, 0.0, 1e8 + 1])


def _record_property(tps: float, mfu: float, world: int, reason: str, torch: str, key: str) -> None:
    rec = honest()
    rec = rec.model_copy(
        update={
            "summary": rec.summary.model_copy(update={"tps_median": tps, "mfu": mfu}),
            "launch": rec.launch.model_copy(update={"world_size": world}),
            "stack": rec.stack.model_copy(update={"torch": torch}),
            "reason": reason,
            "pinned": {**rec.pinned, key: 1} if key else rec.pinned,
        }
    )
    problem = record_problem(rec, KNOWN)  # never raises
    must_refuse = (
        not (0 <= tps <= CEILINGS["tps_median"])
        or not (0 <= mfu <= CEILINGS["mfu"])
        or world != RECIPE.devices
        or not re.fullmatch(r"[A-Za-z0-9 ._+()/,:-]{0,120}", torch)
        or bool(key)
        or len(reason) > STRING_CAP
    )
    if must_refuse:
        assert problem is not None
    assert problem is None or len(problem) < 600


RECORD_ARGS = (numbers, numbers, st.integers(-5, 2_000_000), texts, texts, st.text(max_size=50))


@BOUNDED
@given(*RECORD_ARGS)
def test_fuzzed_records_are_refused_when_absurd(tps, mfu, world, reason, torch, key) -> None:
    _record_property(tps, mfu, world, reason, torch, key)


@pytest.mark.slow
@SLOW
@given(*RECORD_ARGS)
def test_fuzzed_records_are_refused_when_absurd_long(tps, mfu, world, reason, torch, key) -> None:
    _record_property(tps, mfu, world, reason, torch, key)


# -- recipes ------------------------------------------------------------------------------------------------------

yaml_like = st.lists(
    st.sampled_from(list("ab:-&*[]{}<>!|#'\" \n\t0123456789.") + ["<<: *a", "&a ", "*a", "levers:"]), max_size=80
).map("".join)


def _recipe_property(text: str) -> None:
    try:
        parse_recipe_text(text, "recipes/f.yaml")
    except RecipeError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("recipes/f.yaml")


def _anchored(text: str) -> None:
    with pytest.raises(RecipeError, match="YAML (anchor|alias)"):
        parse_recipe_text(RECIPE_TEXT + f"\nextra: &x {text!r}\nmore: *x\n", "recipes/f.yaml")


@BOUNDED
@given(yaml_like | texts)
def test_fuzzed_recipes_raise_only_recipe_errors(text) -> None:
    _recipe_property(text)


@BOUNDED
@given(st.text(alphabet="abc xyz", max_size=30))
def test_an_anchor_anywhere_is_refused(text) -> None:
    _anchored(text)


@pytest.mark.slow
@SLOW
@given(yaml_like | texts)
def test_fuzzed_recipes_raise_only_recipe_errors_long(text) -> None:
    _recipe_property(text)


# -- issue forms and /attune comments ------------------------------------------------------------------------------


def _form(body: str) -> None:
    out = validate_request(body)
    assert isinstance(out, CampaignRequest | RequestError)
    if isinstance(out, CampaignRequest):
        assert out.budget_hours > 0 and out.recipe.startswith("recipes/")


def _comment(body: str) -> None:
    out = parse_command(body)
    assert out is None or isinstance(out, Command | CommandError)
    if isinstance(out, CommandError):
        assert len(out.message) < 400


form_bodies = (
    st.builds(
        lambda r, b, p, lab: (
            f"### Recipe path\n\n{r}\n\n### Budget (device-hours)\n\n{b}\n\n### Policy\n\n{p}\n\n"
            f"### Runner labels\n\n{lab}\n\n### Bench steps\n\n_No response_"
        ),
        texts,
        texts,
        texts,
        texts,
    )
    | texts
)
comment_bodies = (
    st.builds(lambda verb, arg: f"/attune {verb} {arg}", st.sampled_from(["stop", "resume", "budget", "x", ""]), texts)
    | texts
)


@BOUNDED
@given(form_bodies, comment_bodies)
def test_fuzzed_forms_and_commands_never_crash(form, comment) -> None:
    _form(form)
    _comment(comment)


@pytest.mark.slow
@SLOW
@given(form_bodies, comment_bodies)
def test_fuzzed_forms_and_commands_never_crash_long(form, comment) -> None:
    _form(form)
    _comment(comment)


# -- records-branch state (the state comment's block) ---------------------------------------------------------------


def _state(body: str) -> None:
    with contextlib.suppress(ValueError):  # pydantic's ValidationError and a block that is not a state
        parse_state(body)


state_bodies = (
    texts.map(lambda t: f"```json\n{t}\n```")
    | st.binary(max_size=200).map(lambda b: f"```attune-state-zlib-base64\n{base64.b64encode(b).decode()}\n```")
    | st.just(
        "```attune-state-zlib-base64\n" + base64.b64encode(zlib.compress(b"\0" * (64 << 20), 9)).decode() + "\n```"
    )
)


@BOUNDED
@given(state_bodies)
def test_fuzzed_state_blocks_raise_only_value_errors(body) -> None:
    _state(body)


@pytest.mark.slow
@SLOW
@given(state_bodies)
def test_fuzzed_state_blocks_raise_only_value_errors_long(body) -> None:
    _state(body)


def test_a_state_block_that_inflates_too_far_is_refused() -> None:
    bomb = base64.b64encode(zlib.compress(b"\0" * (64 << 20), 9)).decode()
    with pytest.raises(ValueError, match="inflates to more than"):
        parse_state(f"```attune-state-zlib-base64\n{bomb}\n```")
    assert issubclass(GitHubForgeError, RuntimeError)


# -- Markdown ------------------------------------------------------------------------------------------------------


def _markdown(text: str) -> None:
    out = md_inline(text)
    assert not UNSAFE.search(out), out
    assert len(out) <= 300 * 10


@BOUNDED
@given(texts)
def test_fuzzed_runner_text_is_escaped(text) -> None:
    _markdown(text)


@pytest.mark.slow
@SLOW
@given(texts)
def test_fuzzed_runner_text_is_escaped_long(text) -> None:
    _markdown(text)


def test_a_runner_reason_reaches_the_step_report_escaped() -> None:
    sys.path.insert(0, str(ROOT / "tests" / "campaign"))
    from test_report import campaign  # the campaign tests' played campaign

    from bot.campaign.report import render_step_report

    state = campaign()
    step = state.step(1).model_copy(deep=True)
    evil = "![p](https://evil.example/p.png) @acme/team <img src=x>\n## gate passed | ok"
    step.runs = [r.model_copy(update={"reason": evil}) if r.kind == "trial" else r for r in step.runs] or step.runs
    step.close_reason = evil
    report = render_step_report(state, step, None, None)
    for line in report.splitlines():
        if "evil.example" in line:
            assert not UNSAFE.search(line.strip().strip("|").replace(" | ", " ")), line
    assert "## gate passed" not in report and "<img" not in report and "@acme" not in report
