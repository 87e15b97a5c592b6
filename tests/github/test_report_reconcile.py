"""bot/github/trial_results.py: a trial's report job is one of the runs that come next, so it applies every writer's
unhandled ``/attune`` command (whose own campaign.yml run GitHub replaced in the group) before the result, oldest
first, each once (against the spec-validated fake)."""

from __future__ import annotations

import pytest
from forge_helpers import require

require("responses", "openapi_core")
from fake_github import FakeGitHub  # noqa: E402
from test_trial_scenarios import Flow, Scripted, forge, gh, record  # noqa: E402,F401 - the fixtures and the flow

from bot.forge.github import GitHubForge  # noqa: E402
from bot.github.github_ports import load_state  # noqa: E402


def test_the_report_job_applies_unhandled_commands_before_the_result(
    gh: FakeGitHub,  # noqa: F811 - the fixture imported above
    forge: GitHubForge,  # noqa: F811
    tmp_path,
) -> None:
    flow = Flow(gh, forge, tmp_path, Scripted())
    assert flow.start().endswith("started")
    budget_before = flow.state().budget
    # comments whose own campaign.yml runs never came: a writer's budget and stop, an outsider's stop
    budget = gh.add_comment(flow.issue, "/attune budget +2", user="alice")
    gh.add_comment(flow.issue, "/attune stop", user="mallory")
    stop = gh.add_comment(flow.issue, "/attune stop", user="alice")

    said = flow.answer(record(flow.recipe, 1000.0, run_id="b1"))

    assert said.endswith(
        f"; unhandled commands applied first, in order: budget (comment {budget}), stop (comment {stop})"
    ), said
    stored = load_state(forge, flow.issue)
    assert stored is not None and stored.handled[-2:] == [budget, stop]
    state = stored.campaign
    assert state.budget == pytest.approx(budget_before + 2.0)
    # the stop landed as if on time: the campaign ended there (a stop does not wait for the run in flight), so this
    # result is not taken and no second baseline run is dispatched
    assert said.startswith("ignored: the campaign is not waiting for a run"), said
    assert state.phase == "finished" and state.stop_requested and state.finish_reason == "stopped by @alice"
    assert [d["kind"] for d in flow.trials()] == ["baseline"]
    # the report job run again: nothing is applied twice
    assert flow.answer(record(flow.recipe, 1000.0, run_id="b1"), flow.trials()[0]).startswith("ignored")
    assert load_state(forge, flow.issue).handled[-2:] == [budget, stop]
