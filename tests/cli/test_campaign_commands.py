"""``attune campaign list|show|resume|stop`` on simulated campaigns (real ``attune`` processes, real git): what
``list`` and ``show`` say (running, resumable, finishing, finished, or interrupted with an in-memory forge), ``stop``
closing the open step of a killed campaign and committing its summary once, ``--json`` as one object however a
command ends, and one-line errors (exit 2, nothing written) for unknown or malformed ids, a taken id, a campaign that
cannot be resumed, a checkout another campaign is running in, a branch other than the campaign's base, and a lock
file that cannot be opened."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from crash_helpers import REPO, attune, campaign_trace, git, scratch_clone

from bot import campaign as cm

RECIPE = "bot/bench/tasks/glm-4.5/h100x128.yaml"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return scratch_clone(tmp_path / "repo")


def one_line_error(proc) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    lines = proc.stderr.strip("\n").splitlines()
    assert len(lines) == 1 and lines[0].startswith("attune: ") and "Traceback" not in proc.stdout + proc.stderr, (
        proc.stderr
    )
    return lines[0]


def killed_with_an_open_step(repo: Path, cid: str, tmp_path: Path, forge: str = "local") -> None:
    """Campaign ``cid`` SIGKILLed right after its first step was opened on the forge."""
    probe = scratch_clone(tmp_path / f"probe-{cid}")
    trace = tmp_path / f"{cid}.trace"
    done = attune(
        probe,
        "campaign",
        "run",
        RECIPE,
        "--budget",
        "350",
        "--id",
        cid,
        "--json",
        env={"ATTUNE_CRASH_TRACE": str(trace)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    k = 1 + [line.split()[1] for line in trace.read_text().splitlines()].index("forge.open_step")
    killed = attune(
        repo,
        "campaign",
        "run",
        RECIPE,
        "--budget",
        "350",
        "--id",
        cid,
        "--forge",
        forge,
        "--json",
        env={"ATTUNE_CRASH_AFTER": str(k)},
    )
    assert killed.returncode == -9, killed.stderr[-2000:]


def test_stop_closes_the_open_step_of_a_killed_campaign_and_list_shows_it_finished(repo: Path, tmp_path: Path) -> None:
    start = git(repo, "rev-parse", "HEAD").strip()
    killed_with_an_open_step(repo, "c1", tmp_path)
    listed = attune(repo, "campaign", "list")
    assert listed.returncode == 0
    header, row = listed.stdout.strip().splitlines()
    assert header.split() == ["id", "recipe", "phase", "steps", "gain", "spent/budget", "dh", "status"]
    assert row.split()[:4] == ["c1", RECIPE, "stepping", "1"] and row.endswith("resumable"), row

    stop = attune(repo, "campaign", "stop", "c1", "--json")
    assert stop.returncode == 0, stop.stderr[-2000:]
    assert json.loads(stop.stdout.strip().splitlines()[-1])["finish_reason"] == "stopped by `attune campaign stop`"
    trace = campaign_trace(repo, "c1", start)
    (step,) = trace["steps"]
    assert step[3] == "closed" and step[6] == "stopped by `attune campaign stop`" and step[7] == []  # never run
    (branch,) = trace["branches"]
    assert trace["branch_commits"][branch][1].count(f"attune: close step {step[0]}") == 1
    assert trace["base_commits"][0].count("attune: campaign c1 finished (+0.0%)") == 1
    rows = json.loads(attune(repo, "campaign", "list", "--json").stdout.strip().splitlines()[-1])["campaigns"]
    assert [(r["id"], r["phase"], r["status"], r["steps"]) for r in rows] == [("c1", "finished", "finished", 1)]

    again = attune(repo, "campaign", "stop", "c1")
    assert again.returncode == 0 and "already finished: stopped by" in again.stdout
    resumed = attune(repo, "campaign", "resume", "c1")
    assert resumed.returncode == 0 and "already finished" in resumed.stdout
    assert campaign_trace(repo, "c1", start) == trace  # nothing more was done


def test_unknown_or_malformed_ids_and_a_taken_id_are_one_line_errors_that_write_nothing(repo: Path) -> None:
    for cmd in ("resume", "stop", "show"):
        line = one_line_error(attune(repo, "campaign", cmd, "nope"))
        assert "nope: no such campaign under" in line and "attune campaign list" in line
    assert "not a campaign id" in one_line_error(attune(repo, "campaign", "resume", "../x"))
    assert "--id" in one_line_error(attune(repo, "campaign", "run", RECIPE, "--budget", "10", "--id", "a/b"))
    assert not (repo / ".attune").exists()
    assert attune(repo, "campaign", "list").stdout.startswith("no campaigns under")
    ok = attune(repo, "campaign", "run", RECIPE, "--budget", "250", "--max-steps", "1", "--id", "taken", "--json")
    assert ok.returncode == 0, ok.stderr[-2000:]
    state = (repo / ".attune" / "campaigns" / "taken" / "state.json").read_text()
    line = one_line_error(attune(repo, "campaign", "run", RECIPE, "--budget", "250", "--id", "taken"))
    assert "that campaign exists" in line and "attune campaign resume taken" in line
    assert (repo / ".attune" / "campaigns" / "taken" / "state.json").read_text() == state


def test_a_campaign_whose_steps_were_kept_in_memory_is_listed_as_such_and_can_be_stopped_not_resumed(
    repo: Path, tmp_path: Path
) -> None:
    killed_with_an_open_step(repo, "mem", tmp_path, forge="none")
    line = one_line_error(attune(repo, "campaign", "resume", "mem"))
    assert "--forge none" in line and "cannot be resumed" in line and "attune campaign stop mem" in line
    (row,) = listed(repo)
    assert (
        row["status"]
        == "interrupted (cannot resume: --forge none kept its steps in memory; `attune campaign stop mem` ends it)"
    )
    assert attune(repo, "campaign", "show", "mem").stdout.startswith(f"status: {row['status']}\n")
    stop = attune(repo, "campaign", "stop", "mem", "--json")
    assert stop.returncode == 0, stop.stderr[-2000:]
    assert json.loads(stop.stdout)["status"] == "finished"
    state = cm.Campaign.model_validate_json((repo / ".attune" / "campaigns" / "mem" / "state.json").read_text())
    assert state.phase == "finished" and not state.pending and [s.state for s in state.steps] == ["closed"]
    assert [r["status"] for r in listed(repo)] == ["finished"]


# ----------------------------------------------------------------------------- the helpers of the tests below
def listed(repo: Path) -> list[dict]:
    proc = attune(repo, "campaign", "list", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])["campaigns"]


def interrupted(repo: Path, cid: str, *more: str, after: int = 6) -> subprocess.CompletedProcess[str]:
    """Campaign ``cid`` run until it gets SIGTERM right after its ``after``-th side effect (by default its first
    baseline run's record: the campaign stops at the next safe point, resumable)."""
    proc = attune(
        repo, "campaign", "run", RECIPE, "--budget", "350", "--id", cid, *more, env={"ATTUNE_SIGNAL_AFTER": str(after)}
    )
    assert proc.returncode == 143, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    return proc


def folder_files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def one_json_object(proc: subprocess.CompletedProcess[str]) -> dict:
    """stdout is one JSON object, on one line."""
    lines = proc.stdout.strip("\n").splitlines()
    assert len(lines) == 1, proc.stdout[-2000:]
    return json.loads(lines[0])


def stored(repo: Path, cid: str, **fields) -> Path:
    """A campaign's folder with a state (``fields`` over a resumable one) and local launch facts, written by hand."""
    folder = repo / ".attune" / "campaigns" / cid
    folder.mkdir(parents=True)
    state = cm.Campaign(id=cid, recipe_path=RECIPE, recipe_id="glm-4.5/h100x128", budget=350.0, **fields)
    (folder / "state.json").write_text(state.model_dump_json(indent=1))
    (folder / "launch.json").write_text('{"forge": "local", "seed": 0}')
    return folder


HOLD_CHECKOUT = (
    "import sys, time; from bot.drive.lifecycle import CheckoutLock; "
    "lock = CheckoutLock(sys.argv[1], 'other').acquire(); print('held', flush=True); time.sleep(600)"
)


# ----------------------------------------------------------------------------- one campaign at a time in a checkout
def test_a_second_campaign_in_a_checkout_another_one_runs_in_is_refused_naming_it(repo: Path) -> None:
    interrupted(repo, "waiting")
    before = folder_files(repo / ".attune" / "campaigns")
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_CHECKOUT, str(repo / ".attune")], stdout=subprocess.PIPE, text=True, cwd=REPO
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        busy = f"{repo}: campaign other (process {holder.pid}) is running in this checkout"
        for args in (["run", RECIPE, "--budget", "350", "--id", "second"], ["resume", "waiting"], ["stop", "waiting"]):
            line = one_line_error(attune(repo, "campaign", *args))
            assert line.startswith(f"attune: {busy}") and "attune campaign stop other" in line, (args, line)
        assert folder_files(repo / ".attune" / "campaigns") == before  # no new campaign, the waiting one untouched
    finally:
        holder.kill()
        holder.wait()
    resumed = attune(repo, "campaign", "resume", "waiting", "--json")  # the kernel dropped the lock with its holder
    assert resumed.returncode == 0 and one_json_object(resumed)["status"] == "finished", resumed.stderr[-2000:]


# ----------------------------------------------------------------------------- the base branch
def test_resume_and_stop_refuse_a_branch_other_than_the_one_the_campaign_started_on(repo: Path) -> None:
    base = git(repo, "rev-parse", "--abbrev-ref", "HEAD").strip()
    interrupted(repo, "b")
    path = repo / ".attune" / "campaigns" / "b" / "state.json"
    assert json.loads(path.read_text())["base_branch"] == base
    git(repo, "checkout", "-q", "-b", "elsewhere")
    before = folder_files(path.parent)
    for command in ("resume", "stop"):
        line = one_line_error(attune(repo, "campaign", command, "b"))
        assert line.startswith(f"attune: b: started on branch {base}, but elsewhere is checked out in {repo}"), line
        assert f"git -C {repo} checkout {base}" in line
    assert folder_files(path.parent) == before and git(repo, "rev-parse", "--abbrev-ref", "HEAD").strip() == "elsewhere"
    # a state written before the base branch was recorded goes on with the branch checked out, as it always did
    old = json.loads(path.read_text())
    del old["base_branch"]
    path.write_text(json.dumps(old))
    resumed = attune(repo, "campaign", "resume", "b", "--json")
    assert resumed.returncode == 0 and one_json_object(resumed)["status"] == "finished", resumed.stderr[-2000:]
    assert any(
        s.startswith("attune: campaign b finished") for s in git(repo, "log", "--format=%s", "elsewhere").splitlines()
    )


# ----------------------------------------------------------------------------- --json however a command ends
def test_json_is_one_object_with_status_and_message_when_interrupted_resumed_or_already_finished(repo: Path) -> None:
    run = interrupted(repo, "j", "--json")
    out = one_json_object(run)
    assert (out["campaign"], out["status"], out["repo"]) == ("j", "interrupted", str(repo))
    assert "interrupted (SIGTERM)" in out["message"] and "attune campaign resume j" in out["message"]
    resumed = attune(repo, "campaign", "resume", "j", "--json")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    done = one_json_object(resumed)
    assert (done["campaign"], done["status"]) == ("j", "finished") and done[
        "message"
    ] == f"campaign j finished: {done['finish_reason']}"
    assert set(out) == set(done)  # the same shape as a campaign that ran to its end
    for command in ("resume", "stop"):
        again = attune(repo, "campaign", command, "j", "--json")
        assert again.returncode == 0, again.stderr[-2000:]
        answer = one_json_object(again)
        assert set(answer) == set(done) and answer["status"] == "finished", answer
        assert answer["message"] == f"campaign j already finished: {done['finish_reason']}"


# ----------------------------------------------------------------------------- finishing is not finished
def test_show_and_list_say_finishing_while_the_finish_actions_are_pending(repo: Path) -> None:
    stored(
        repo,
        "f",
        phase="finished",
        finish_reason="budget exhausted",
        pending=[cm.Comment(n=0, kind="summary"), cm.Finish(reason="budget exhausted")],
    )
    status = "finishing (2 actions pending; run `attune campaign resume f`)"
    shown = attune(repo, "campaign", "show", "f")
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert shown.stdout.startswith(f"status: {status}\n") and f"policy `heuristic`, {status}." in shown.stdout
    assert ", finished." not in shown.stdout and "\n| finished " not in shown.stdout
    assert "\n| finishing " in shown.stdout and "budget exhausted" in shown.stdout  # the reason is still shown
    assert [r["status"] for r in listed(repo)] == [status]
    assert attune(repo, "campaign", "resume", "f").returncode == 0
    shown = attune(repo, "campaign", "show", "f")
    assert shown.stdout.startswith("status: finished\n") and ", finished." in shown.stdout


# ----------------------------------------------------------------------------- a lock file that cannot be opened
@pytest.mark.parametrize("where", ["campaign", "checkout"])
def test_a_lock_file_that_is_a_folder_is_one_line_naming_it_in_every_command(repo: Path, where: str) -> None:
    folder = stored(repo, "c1")
    lock = folder / "lock" if where == "campaign" else repo / ".attune" / "checkout.lock"
    lock.mkdir()
    before = folder_files(repo / ".attune")
    expected = f"attune: {lock}: cannot open this lock file (Is a directory); expected a regular file this user can read and write"
    commands = [["resume", "c1"], ["stop", "c1"]] + ([["show", "c1"]] if where == "campaign" else [])
    if where == "checkout":
        commands.append(["run", RECIPE, "--budget", "350", "--id", "c2"])
    for args in commands:
        line = one_line_error(attune(repo, "campaign", *args))
        assert line.startswith(expected), (args, line)
    assert folder_files(repo / ".attune") == before and lock.is_dir()
    (row,) = listed(repo)  # list still lists every campaign: the one it cannot tell about says why
    assert (
        row["status"].startswith(f"unknown: {expected.removeprefix('attune: ')}")
        if where == "campaign"
        else row["status"] == "resumable"
    )


def test_the_progress_lines_of_a_simulated_campaign_label_every_number_simulated(repo: Path) -> None:
    done = attune(repo, "campaign", "run", RECIPE, "--budget", "350", "--max-steps", "1")
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line for line in done.stdout.splitlines() if "tok/s/device" in line]
    assert lines and all("tok/s/device SIMULATED" in line for line in lines), lines
    assert "TrainingThroughputBench" not in done.stdout  # it filed nothing there: the board is not reprinted


def test_without_repo_the_campaign_commands_find_the_repository_as_every_command_does(
    repo: Path, tmp_path: Path
) -> None:
    """``$ATTUNE_REPO``, else the repository at or above the working directory; outside any, one line (it used to
    list ``no campaigns under /tmp/.attune/campaigns`` with exit 0)."""
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    line = one_line_error(attune(outside, "campaign", "list"))
    assert "no ATTUNE repository there or above" in line and "give --repo" in line
    named = attune(outside, "campaign", "list", "--json", env={"ATTUNE_REPO": str(repo)})
    assert named.returncode == 0 and json.loads(named.stdout) == {"repo": str(repo), "campaigns": []}, named.stderr
    missing = one_line_error(attune(outside, "campaign", "list", env={"ATTUNE_REPO": str(tmp_path / "none")}))
    assert missing.startswith(f"attune: $ATTUNE_REPO={tmp_path / 'none'}: no ATTUNE repository there or above")
    below = attune(repo / "recipes", "campaign", "list", "--json")  # from a folder inside it
    assert below.returncode == 0 and json.loads(below.stdout)["repo"] == str(repo), below.stderr
    given = one_line_error(attune(repo, "campaign", "list", "--repo", str(outside)))  # as `attune leaderboard` says
    assert given.startswith(f"attune: --repo {outside}: not an ATTUNE repository"), given


def test_stop_json_is_one_object_when_the_running_process_does_not_let_go(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A process that holds the campaign and ignores SIGTERM: ``stop`` gives up after its wait, exit 3, and with
    ``--json`` says so in one object (it printed only to stderr)."""
    import bot.cli.campaign as campaign_cli
    from bot.cli import main

    killed_with_an_open_step(repo, "c4", tmp_path)
    folder = repo / ".attune" / "campaigns" / "c4"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal, sys, time\n"
            "from pathlib import Path\nfrom bot.drive.lifecycle import CampaignLock\n"
            "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            f"lock = CampaignLock(Path({str(folder)!r}), 'c4').acquire()\nprint('held', flush=True)\ntime.sleep(60)\n",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        monkeypatch.setattr(campaign_cli, "STOP_WAIT_S", 1.0)
        assert main(["campaign", "stop", "c4", "--repo", str(repo), "--json"]) == 3
        out = capsys.readouterr()
        result = json.loads(out.out)
        assert result["status"] == f"running (pid {holder.pid})" and result["campaign"] == "c4"
        assert result["message"] == f"process {holder.pid} still runs campaign c4 after 1s; not stopped"
        assert f"attune: {result['message']}" in out.err
    finally:
        holder.kill()
        holder.wait()
