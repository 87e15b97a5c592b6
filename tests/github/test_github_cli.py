"""``attune github check-trial`` and ``attune github calibrate`` as trial.yml calls them (check-trial against the
spec-validated GitHub fake)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "forge"))
from forge_helpers import TOKEN, require  # noqa: E402

from bot import campaign as cm  # noqa: E402
from bot.cli import github as cli  # noqa: E402

RECIPE = "recipes/llama3-tiny/cpu.yaml"
SIM_RECIPE = "bot/bench/tasks/llama3.1-405b/h200x128.yaml"


@pytest.fixture
def gh(monkeypatch: pytest.MonkeyPatch):
    require("responses", "openapi_core")
    from fake_github import FakeGitHub
    from openapi_contract import Contract, spec_missing_reason

    reason = spec_missing_reason()
    if reason:
        pytest.skip(reason)
    fake = FakeGitHub(Contract()).start()
    fake.seed({RECIPE: (ROOT / RECIPE).read_text()})
    monkeypatch.setenv("GITHUB_REPOSITORY", fake.full_name)
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    monkeypatch.setenv("ATTUNE_BOT_LOGIN", fake.actor)  # whose commits are the bot's (a merge checks every one)
    monkeypatch.delenv("ATTUNE_GITHUB_TOKEN", raising=False)
    monkeypatch.delenv("GITHUB_API_URL", raising=False)
    try:
        yield fake
    finally:
        fake.stop()
    fake.assert_contract_kept()


def check(tmp_path: Path, capsys: pytest.CaptureFixture[str], **kw: object) -> dict[str, str]:
    out = tmp_path / "github_output"
    out.unlink(missing_ok=True)
    args = {
        "pr": 0,
        "sha": "",
        "campaign": "llama3-tiny-cpu-i1",
        "runner_labels": '["gpu"]',
        "recipe": RECIPE,
        "kind": "",
        "repo": None,
        "token_env": "GITHUB_TOKEN",
        "github_output": str(out),
        "limits": "{}",
        "issue": None,
        "order": "",
    } | kw
    assert cli.cmd_check_trial(argparse.Namespace(**args)) == 0
    values = dict(line.split("=", 1) for line in out.read_text().splitlines())
    values["reason"] = capsys.readouterr().out.strip()
    return values


def test_check_trial_for_a_baseline_names_the_recipe(gh, tmp_path, capsys) -> None:
    got = check(tmp_path, capsys, sha=gh.head("main"), kind="baseline")
    assert got["ok"] == "true" and got["kind"] == "baseline" and got["recipe"] == RECIPE
    assert (
        got["runs_on"] == '["self-hosted", "gpu"]'
        and got["campaign"] == "llama3-tiny-cpu-i1"
        and got["records_sha"] == ""
    )
    # what used to reach the runner as an empty recipe is now refused before it
    got = check(tmp_path, capsys, sha=gh.head("main"), kind="baseline", recipe="")
    assert got["ok"] == "false" and got["recipe"] == "" and "under recipes/" in got["reason"]


def test_check_trial_passes_only_checked_numbers_to_the_runner(gh, tmp_path, capsys) -> None:
    got = check(tmp_path, capsys, sha=gh.head("main"), kind="baseline", limits='{"max_wall_s": 5400.5}')
    assert got["ok"] == "true" and got["max_wall_s"] == "5400.5" and got["stop_below"] == ""
    got = check(tmp_path, capsys, sha=gh.head("main"), kind="baseline")
    assert got["ok"] == "true" and got["max_wall_s"] == "" and got["stop_below"] == ""  # a manual dispatch: no limits


def test_check_trial_for_a_calibration_pins_the_records_branch(gh, tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("ATTUNE_BOT_LOGIN", gh.actor)
    got = check(tmp_path, capsys, sha=gh.head("main"), kind="calibrate")
    assert got["ok"] == "false" and "no records branch attune/llama3-tiny-cpu-i1/records" in got["reason"]
    gh.create_branch("attune/llama3-tiny-cpu-i1/records")
    records = gh.seed(
        {
            "campaigns/llama3-tiny-cpu-i1/baseline-1.json": "{}",
            "campaigns/llama3-tiny-cpu-i1/baseline-recipe.yaml": (ROOT / RECIPE).read_text(),
        },
        "attune: record",
        branch="attune/llama3-tiny-cpu-i1/records",
        by_bot=True,
    )
    got = check(tmp_path, capsys, sha=gh.head("main"), kind="calibrate")
    assert got["ok"] == "true" and got["kind"] == "calibrate" and got["records_sha"] == records
    # the same check without the bot's login trusts no records commit
    monkeypatch.delenv("ATTUNE_BOT_LOGIN")
    got = check(tmp_path, capsys, sha=gh.head("main"), kind="calibrate")
    assert got["ok"] == "false" and "is not the bot's commit" in got["reason"] and "the bot is unknown" in got["reason"]


@pytest.mark.parametrize(
    ("kw", "why"),
    [
        ({"kind": "trial"}, "a trial run needs a step PR"),
        ({"kind": "rm -rf"}, "expected one of"),
        ({"campaign": "../x"}, "expected letters"),
        ({"runner_labels": '["gpu", "a b"]'}, "Runner labels"),
        ({"sha": "0" * 40}, "is not the head of main"),
        ({"limits": "[1]"}, "expected a JSON object"),
        ({"limits": '{"max_wall_s": -1}'}, "limits.max_wall_s: expected a positive number"),
        ({"limits": '{"max_wall_s": "$(id)"}'}, "limits.max_wall_s: expected a positive number"),
        ({"limits": '{"rm": 1}'}, "expected a JSON object with max_wall_s"),
        ({"limits": '{"stop_below_tps": 100}'}, "only a trial may stop early"),
    ],
)
def test_check_trial_refuses_bad_dispatches(gh, tmp_path, capsys, kw, why) -> None:
    got = check(tmp_path, capsys, **({"sha": gh.head("main"), "kind": "baseline"} | kw))
    assert got["ok"] == "false" and got["kind"] == "" and got["campaign"] == "" and why in got["reason"]


def test_calibrate_writes_the_calibrated_event(tmp_path, capsys) -> None:
    from test_trial_scenarios import record

    from bot.core.recipe import parse_recipe_text

    recipe = parse_recipe_text((ROOT / SIM_RECIPE).read_text(), SIM_RECIPE)
    steps = recipe.bench.steps
    reference = tmp_path / "baseline-1.json"
    reference.write_text(
        record(recipe, 500.0, simulated=True, losses=[4.0 - 0.01 * i for i in range(steps)]).model_dump_json()
    )
    out = tmp_path / "run" / "calibrated.json"
    args = argparse.Namespace(
        recipe=str(ROOT / SIM_RECIPE),
        reference=str(reference),
        out=str(out),
        cache_dir=str(tmp_path / "cache"),
        jobs=1,
        max_wall_s=None,
    )
    assert cli.cmd_calibrate(args) == 0
    event = cm.Calibrated.model_validate_json(out.read_text())
    assert event.band is not None and "SIMULATED" in event.note and event.note in capsys.readouterr().out

    args.reference = str(tmp_path / "missing.json")
    assert cli.cmd_calibrate(args) == 2
    assert "calibrate:" in capsys.readouterr().err


def test_calibrate_caps_its_runs_at_what_is_left_of_the_budget(tmp_path, monkeypatch) -> None:
    """The self-hosted calibration job passes the budget left (trial.yml's limits) to the calibration runs."""
    from test_trial_scenarios import record

    from bot.campaign import gate_calls
    from bot.core.recipe import parse_recipe_text

    seen = {}

    def calibrate(text, reference, **kw):
        seen.update(kw)
        return cm.Calibrated(band=None, device_hours=0.0, note="capped")

    monkeypatch.setattr(gate_calls, "calibrate_loss_band", calibrate)
    recipe = parse_recipe_text((ROOT / SIM_RECIPE).read_text(), SIM_RECIPE)
    reference = tmp_path / "baseline-1.json"
    reference.write_text(record(recipe, 500.0, simulated=True).model_dump_json())
    args = argparse.Namespace(
        recipe=str(ROOT / SIM_RECIPE),
        reference=str(reference),
        out=str(tmp_path / "c.json"),
        cache_dir=str(tmp_path / "cache"),
        jobs=1,
        max_wall_s=1234.5,
    )
    assert cli.cmd_calibrate(args) == 0
    assert seen["max_wall_s"] == 1234.5


def test_the_report_job_reads_the_run_jobs_wall_time_from_the_actions_api(gh) -> None:
    from bot.cli.github import RUN_JOB, _run_job_wall
    from bot.forge.github import GitHubForge

    forge = GitHubForge(gh.full_name, TOKEN, seconds_between_requests=None, seconds_between_writes=None, retry=None)
    gh.record_job(
        77, "check", started_at="2026-01-01T00:00:00Z", completed_at="2026-01-01T00:00:20Z", conclusion="success"
    )
    gh.record_job(
        77, RUN_JOB, started_at="2026-01-01T00:00:30Z", completed_at="2026-01-01T00:10:30Z", conclusion="success"
    )
    assert _run_job_wall(forge, "77") == 600.0
    assert _run_job_wall(forge, "78") is None  # no such run: unknown, so a real record is refused
    assert _run_job_wall(forge, "") is None


def test_publish_leaderboard_regenerates_from_the_checkout_and_merges_it_through_a_pr(
    gh, tmp_path, monkeypatch, capsys
) -> None:
    from bot.campaign.leaderboard import collect, render

    checkout = tmp_path / "checkout"
    for folder in ("recipes", "results"):
        (checkout / folder).mkdir(parents=True)
    monkeypatch.setenv("ATTUNE_REPO", str(checkout))
    gh.seed({"leaderboard.md": "stale\n"})
    args = argparse.Namespace(run_id="31-2", repo=None, token_env="GITHUB_TOKEN")
    assert cli.cmd_publish_leaderboard(args) == 0
    (pull,) = gh.pulls.values()
    assert pull.head_ref == "attune/leaderboard/31-2" and pull.merged_at is not None
    assert gh.file("leaderboard.md") == render(collect(checkout)) and "through PR #" in capsys.readouterr().out
    # again: nothing to do; a run id that is no run id: one line, exit 2
    assert cli.cmd_publish_leaderboard(argparse.Namespace(run_id="32-1", repo=None, token_env="GITHUB_TOKEN")) == 0
    assert "up to date" in capsys.readouterr().out and len(gh.pulls) == 1
    gh.seed({"leaderboard.md": "stale again\n"})
    assert cli.cmd_publish_leaderboard(argparse.Namespace(run_id="$(id)", repo=None, token_env="GITHUB_TOKEN")) == 2
    assert capsys.readouterr().err.strip().startswith("attune github: run '$(id)': expected the workflow run id")


def test_calibrate_refuses_bad_flags_before_any_run(tmp_path, capsys) -> None:
    """Each is one line naming the flag, and no calibration run starts (the runs take minutes on a runner)."""
    from test_trial_scenarios import record

    from bot.core.recipe import parse_recipe_text

    recipe = parse_recipe_text((ROOT / SIM_RECIPE).read_text(), SIM_RECIPE)
    reference = tmp_path / "baseline-1.json"
    reference.write_text(record(recipe, 500.0, simulated=True).model_dump_json())
    other = tmp_path / "other-1.json"
    other.write_text(record(parse_recipe_text((ROOT / RECIPE).read_text(), RECIPE), 500.0).model_dump_json())
    (tmp_path / "a-file").write_text("")
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("workload: [\n")
    good = {
        "recipe": str(ROOT / SIM_RECIPE),
        "reference": str(reference),
        "out": str(tmp_path / "run" / "calibrated.json"),
        "cache_dir": str(tmp_path / "cache"),
        "jobs": 1,
        "max_wall_s": None,
    }
    cases = [
        ({"jobs": 0}, "calibrate: --jobs: expected at least 1; got 0"),
        ({"max_wall_s": 0.0}, "calibrate: --max-wall-s: expected a positive number of seconds; got 0.0"),
        ({"out": str(tmp_path)}, f"calibrate: --out {tmp_path}: is a folder; expected a file"),
        ({"out": str(tmp_path / "a-file" / "x.json")}, f"{tmp_path / 'a-file'} is a file; expected a folder there"),
        ({"recipe": str(bad_yaml)}, f"calibrate: --recipe: {bad_yaml}:"),
        ({"reference": str(other)}, "a run record of llama3-tiny/cpu, not of the --recipe llama3.1-405b/h200x128"),
    ]
    for change, needle in cases:
        assert cli.cmd_calibrate(argparse.Namespace(**(good | change))) == 2, change
        err = capsys.readouterr().err
        assert needle in err and len(err.strip().splitlines()) == 1, (change, err)
    assert not (tmp_path / "run").exists() and not (tmp_path / "cache").exists()


def test_check_trial_refuses_an_output_it_cannot_write_and_a_repository_not_named_owner_name(
    tmp_path, capsys, monkeypatch
) -> None:
    args = {
        "pr": 0,
        "sha": "",
        "campaign": "c",
        "runner_labels": '["gpu"]',
        "recipe": RECIPE,
        "kind": "",
        "repo": None,
        "token_env": "GITHUB_TOKEN",
        "github_output": str(tmp_path),
        "limits": "{}",
        "issue": None,
        "order": "",
    }
    assert cli.cmd_check_trial(argparse.Namespace(**args)) == 2
    assert f"--github-output {tmp_path}: is a folder" in capsys.readouterr().err
    monkeypatch.setenv("GITHUB_REPOSITORY", "foo")
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    assert cli.cmd_check_trial(argparse.Namespace(**(args | {"github_output": str(tmp_path / "out")}))) == 2
    assert "'foo'" in capsys.readouterr().err and not (tmp_path / "out").exists()
    monkeypatch.delenv("GITHUB_REPOSITORY")
    monkeypatch.delenv("GITHUB_TOKEN")
    monkeypatch.delenv("ATTUNE_GITHUB_TOKEN", raising=False)
    assert cli.cmd_check_trial(argparse.Namespace(**(args | {"github_output": str(tmp_path / "out")}))) == 2
    assert "GITHUB_REPOSITORY" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("name", "payload", "needle"),
    [
        ("workflow_dispatch", {"inputs": "x"}, "bad payload: "),
        (
            "issue_comment",
            {
                "action": "created",
                "issue": {"number": 1, "body": ""},
                "comment": {"id": 1, "body": 7, "user": {"login": "a"}},
            },
            "bad payload: ",
        ),
    ],
)
def test_handle_names_a_payload_field_of_the_wrong_kind_in_one_line(
    gh, tmp_path, capsys, name, payload, needle
) -> None:
    """A field of the wrong kind was an AttributeError traceback (``comment.body: 7`` has no ``splitlines``)."""
    import json

    event = tmp_path / "event.json"
    event.write_text(json.dumps(payload))
    args = argparse.Namespace(
        trial_result=None, event_path=str(event), event_name=name, issue=None, repo=None, token_env="GITHUB_TOKEN"
    )
    assert cli.cmd_handle(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"attune github: {needle}") and len(err.strip().splitlines()) == 1, err


def test_handle_without_an_event_payload_says_which_flag_gives_one(monkeypatch, capsys) -> None:
    """No --event-path and no $GITHUB_EVENT_PATH read the working directory: ``[Errno 21] Is a directory: '.'``."""
    monkeypatch.delenv("GITHUB_EVENT_PATH", raising=False)
    args = argparse.Namespace(
        trial_result=None, event_path=None, event_name=None, issue=None, repo=None, token_env="GITHUB_TOKEN"
    )
    assert cli.cmd_handle(args) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("attune github: no event payload: give --event-path FILE") and len(err.strip().splitlines()) == 1
    ), err


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"\xff\xfe{}", "not UTF-8 text (byte 0)"),
        (b"[1]", "not a JSON object"),
        (b"{x", "not JSON ("),
        (None, "no such file"),
    ],
)
def test_handle_says_what_is_wrong_with_the_event_file_in_words(tmp_path, capsys, content, says) -> None:
    """Were Python's own texts ('utf-8' codec can't decode byte 0xff ..., [Errno 2] No such file ...)."""
    event = tmp_path / "event.json"
    if content is not None:
        event.write_bytes(content)
    args = argparse.Namespace(
        trial_result=None, event_path=str(event), event_name="issues", issue=None, repo=None, token_env="GITHUB_TOKEN"
    )
    assert cli.cmd_handle(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"attune github: --event-path {event}: {says}") and len(err.strip().splitlines()) == 1, err


def test_an_unreachable_github_api_is_one_line_naming_it_not_a_traceback(tmp_path) -> None:
    """check-trial as trial.yml runs it, with the API on a port nothing listens on: was a requests ConnectionError
    traceback. Exit 1 (the environment failed), the API named; $GITHUB_OUTPUT not written."""
    import socket
    import subprocess

    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {
        **os.environ,
        "GITHUB_REPOSITORY": "octo/repo",
        "GITHUB_TOKEN": "t",
        "GITHUB_API_URL": f"http://127.0.0.1:{port}",
    }
    out = tmp_path / "github_output"
    run = subprocess.run(
        [sys.executable, "-m", "bot.cli", "github", "check-trial", "--runner-labels", "gpu", "--pr", "1"]
        + ["--sha", "a" * 40, "--campaign", "c", "--github-output", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 1, run.stderr
    assert (
        run.stderr.strip()
        == f"attune github: GitHub's API at http://127.0.0.1:{port} could not be reached (ConnectionError)"
    )
    assert not out.exists()


# ------------------------------------------------------------------ attune github handle --trial-result, as trial.yml's report job
def started_campaign(gh, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A campaign started on the fake (its first baseline run dispatched), and the environment the report job has."""
    from test_trial_scenarios import Flow, Scripted

    from bot.forge.github import GitHubForge

    gh.workflows.update({"trial.yml", "leaderboard.yml"})
    gh.permissions["alice"] = "write"
    for name, value in (("ATTUNE_BOT_LOGIN", gh.actor), ("ATTUNE_GITHUB_PACING", "0")):
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("GITHUB_RUN_ID", raising=False)
    forge = GitHubForge(
        gh.full_name, TOKEN, seconds_between_requests=None, seconds_between_writes=None, retry=None, bot_login=gh.actor
    )
    flow = Flow(gh, forge, tmp_path, Scripted())
    assert flow.start().endswith("started")
    return flow


def report_args(inputs: dict[str, str], artifact: Path, **kw: object) -> argparse.Namespace:
    """``attune github handle --trial-result`` as trial.yml's report job calls it for the dispatch ``inputs``."""
    args = {
        "trial_result": str(artifact),
        "campaign": inputs["campaign"],
        "issue": int(inputs["issue"]),
        "pr": int(inputs["pr"]),
        "sha": inputs["sha"],
        "base_sha": "",
        "run_job_result": "success",
        "kind": inputs["kind"],
        "attempt": int(inputs["attempt"]),
        "check_refused": "",
        "run_id": "",
        "repo": None,
        "token_env": "GITHUB_TOKEN",
        "event_path": None,
        "event_name": None,
    }
    return argparse.Namespace(**(args | kw))


def uploaded(flow, tmp_path: Path, tps: float) -> Path:
    """The artifact the run job leaves for the latest dispatch: its record, stamped as the runner stamps it."""
    from test_trial_scenarios import record, stamped

    inputs = flow.last
    artifact = tmp_path / f"artifact-{inputs['kind']}-{inputs['attempt']}"
    artifact.mkdir()
    rec = stamped(record(flow.recipe, tps, run_id="b1"), flow.gh.file(inputs["recipe"], inputs["sha"]), inputs["sha"])
    (artifact / "record.json").write_text(rec.model_dump_json())
    return artifact


def test_a_baseline_reported_without_a_run_id_is_kept_and_the_campaign_goes_on(
    gh, tmp_path, capsys, monkeypatch
) -> None:
    """The run job's wall time unreadable (here: no --run-id, no $GITHUB_RUN_ID) was fed as a crash, which ended the
    campaign at its first baseline run. Now one line says so and the record's device-hours are bounded by the job's
    timeout instead."""
    flow = started_campaign(gh, tmp_path, monkeypatch)
    baseline = flow.last
    assert cli.cmd_handle(report_args(baseline, uploaded(flow, tmp_path, 1000.0))) == 0
    out, err = capsys.readouterr()
    assert "baseline run ok" in out
    assert err.strip() == (
        "attune github: the run job's wall time is unknown (no --run-id or $GITHUB_RUN_ID); a record's "
        "device-hours are bounded by the job's timeout (360 min) instead"
    )
    state = flow.state()
    assert state.phase != "finished" and state.baseline[0].outcome == "ok" and flow.last["attempt"] == "2"


def test_an_actions_api_failure_is_one_line_and_leaves_the_wall_time_unknown(gh, capsys) -> None:
    from github import GithubException

    from bot.forge.github import GitHubForge

    forge = GitHubForge(gh.full_name, TOKEN, seconds_between_requests=None, seconds_between_writes=None, retry=None)

    def unavailable(run_id: int, job: str) -> float:
        raise GithubException(502, {"message": "Server Error\nupstream timed out"}, None)

    forge.job_wall_seconds = unavailable  # type: ignore[method-assign]
    assert cli._run_job_wall(forge, "77") is None
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(
        "attune github: the run job's wall time is unknown (the Actions API call failed, perhaps only "
        "for now: GithubException: 502"
    ) and line.endswith("bounded by the job's timeout (360 min) instead")


@pytest.mark.parametrize(
    ("flag", "value", "needle"),
    [
        ("sha", "zz", "--sha 'zz': expected a commit sha (40 lower-case hex digits)"),
        ("sha", "main", "--sha 'main': expected a commit sha"),
        ("sha", "A" * 40, "--sha 'AAAA"),
        ("sha", "a" * 39, "--sha 'aaaa"),
        ("sha", "a" * 40 + "\n", "--sha 'aaaa"),
        ("sha", "é" * 40, "--sha 'éééé"),
        ("base_sha", "main", "--base-sha 'main': expected a commit sha"),
        ("base_sha", "0" * 41, "--base-sha '0000"),
        ("run_id", "²", "--run-id '²': expected a workflow run id (digits 0-9)"),
    ],
)
def test_handle_refuses_a_sha_that_is_no_commit_sha_before_any_work(
    gh, tmp_path, capsys, monkeypatch, flag, value, needle
) -> None:
    """``--sha zz`` was a GithubException traceback, ``--sha main`` read the recipe on the branch and ended the campaign
    with a crashed baseline run; now: one line naming the flag, exit 2, and not one call to GitHub."""
    flow = started_campaign(gh, tmp_path, monkeypatch)
    before, calls = flow.state(), len(gh.calls)
    assert cli.cmd_handle(report_args(flow.last, uploaded(flow, tmp_path, 1000.0), **{flag: value})) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"attune github: {needle}") and len(err.strip().splitlines()) == 1, err
    assert len(gh.calls) == calls and flow.state() == before


@pytest.mark.parametrize("flag", ["sha", "base_sha"])
def test_handle_refuses_a_sha_that_is_no_commit_of_the_repository_and_changes_nothing(
    gh, tmp_path, capsys, monkeypatch, flag
) -> None:
    flow = started_campaign(gh, tmp_path, monkeypatch)
    before, writes = flow.state(), [c for c in gh.calls if c.method != "GET"]
    missing = "0123456789abcdef" * 2 + "01234567"
    assert cli.cmd_handle(report_args(flow.last, uploaded(flow, tmp_path, 1000.0), **{flag: missing})) == 2
    err = capsys.readouterr().err
    name = flag.replace("_", "-")
    assert (
        err
        == f"attune github: --{name} {missing}: no such commit in {gh.full_name}; expected the commit the run measured\n"
    )
    assert [c for c in gh.calls if c.method != "GET"] == writes and flow.state() == before


def test_publish_leaderboard_without_a_run_id_never_collides_and_a_rerun_changes_nothing(
    gh, tmp_path, monkeypatch, capsys
) -> None:
    """Without ``GITHUB_RUN_ID`` every run named its branch ``attune/leaderboard/0``: the second one failed on it."""
    checkout = tmp_path / "checkout"
    for folder in ("recipes", "results"):
        (checkout / folder).mkdir(parents=True)
    monkeypatch.setenv("ATTUNE_REPO", str(checkout))
    monkeypatch.setenv("ATTUNE_GITHUB_PACING", "0")
    monkeypatch.delenv("GITHUB_RUN_ID", raising=False)
    args = argparse.Namespace(run_id="", repo=None, token_env="GITHUB_TOKEN")
    for stale in ("stale\n", "stale again\n"):  # leaderboard.md edited by hand on main after each run
        gh.seed({"leaderboard.md": stale})
        assert cli.cmd_publish_leaderboard(args) == 0
        assert "through PR #" in capsys.readouterr().out
    first, second = gh.pulls.values()
    assert first.head_ref != second.head_ref and first.head_ref.startswith("attune/leaderboard/")
    assert first.merged_at is not None and second.merged_at is not None
    assert cli.cmd_publish_leaderboard(args) == 0  # again on the same content: up to date, nothing opened
    assert "up to date" in capsys.readouterr().out and len(gh.pulls) == 2
