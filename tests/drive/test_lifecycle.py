"""bot/drive/lifecycle.py and bot/drive/interrupt.py: one live process drives a campaign (a lock that dies with its
holder); the list rows; a signal outside a run waits for the transition in progress, a signal inside a run ends it
at once; crash points are off unless asked for."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from bot import campaign as cm
from bot.drive import crashpoints
from bot.drive.interrupt import GracefulStop, Interrupted
from bot.drive.lifecycle import CampaignBusy, CampaignLock, LaunchFacts, holder, list_campaigns, row_of

REPO = Path(__file__).resolve().parents[2]
HOLD = "import sys, time; from bot.drive.lifecycle import CampaignLock; lock = CampaignLock(sys.argv[1], 'c').acquire(); print('held', flush=True); time.sleep(600)"


def test_a_campaign_held_by_a_live_process_cannot_be_taken_and_its_lock_dies_with_that_process(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        assert proc.stdout.readline().strip() == "held"
        assert holder(tmp_path) == proc.pid
        with pytest.raises(CampaignBusy, match=f"being run by process {proc.pid}"):
            CampaignLock(tmp_path, "c").acquire()
    finally:
        proc.kill()  # SIGKILL: no cleanup code runs
        proc.wait()
    assert holder(tmp_path) is None
    CampaignLock(tmp_path, "c").acquire().release()  # free at once: no stale-lock clean-up is needed


def test_holder_names_the_pid_only_while_the_lock_is_held(tmp_path: Path) -> None:
    assert holder(tmp_path) is None  # no lock file at all
    lock = CampaignLock(tmp_path, "c").acquire()
    child = subprocess.run([sys.executable, "-c", "import sys; from bot.drive.lifecycle import holder; print(holder(sys.argv[1]))", str(tmp_path)],
                           capture_output=True, text=True, cwd=REPO)
    assert child.stdout.strip() == str(os.getpid())
    lock.release()
    assert holder(tmp_path) is None


def _state(**kw) -> cm.Campaign:
    return cm.Campaign(id="c", recipe_path="recipes/x.yaml", recipe_id="x", budget=10.0, **kw)


def test_list_rows_say_running_resumable_finished_or_unreadable(tmp_path: Path) -> None:
    assert row_of("c", _state(), 4242).status == "running (pid 4242)"
    assert row_of("c", _state(phase="stepping", spent=2.5), None).model_dump(include={"phase", "status", "spent", "budget"}) == {
        "phase": "stepping", "status": "resumable", "spent": 2.5, "budget": 10.0}
    assert row_of("c", _state(phase="finished", finish_reason="budget exhausted"), None).status == "finished"
    # killed while finishing: the summary is still to be committed, so it is resumable
    assert row_of("c", _state(phase="finished", pending=[cm.Finish(reason="x")]), None).status == "resumable"
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "state.json").write_text(_state().model_copy(update={"id": "a"}).model_dump_json())
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "state.json").write_text("{not json")
    (tmp_path / "c").mkdir()  # a lock or launch file only: no campaign was saved
    rows = list_campaigns(tmp_path)
    assert [(r.id, r.status.split(":")[0]) for r in rows] == [("a", "resumable"), ("b", "unreadable")]
    assert list_campaigns(tmp_path / "missing") == []


def test_launch_facts_round_trip_and_default_to_the_local_forge(tmp_path: Path) -> None:
    assert LaunchFacts.load(tmp_path) == LaunchFacts(forge="local", seed=0, cache_dir=None)
    LaunchFacts(forge="none", seed=3, cache_dir="/x").save(tmp_path)
    assert LaunchFacts.load(tmp_path) == LaunchFacts(forge="none", seed=3, cache_dir="/x")


def test_a_signal_outside_a_run_waits_for_the_safe_point_and_one_inside_a_run_raises_at_once() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with GracefulStop() as stopper:
        os.kill(os.getpid(), signal.SIGTERM)  # outside a run: remembered, nothing raised
        with pytest.raises(Interrupted) as exc:
            stopper.check()
        assert exc.value.exit_code == 143 and exc.value.signame == "SIGTERM"
    assert signal.getsignal(signal.SIGTERM) is before  # handlers restored
    with GracefulStop() as stopper, pytest.raises(Interrupted) as exc, stopper.run_zone():
        os.kill(os.getpid(), signal.SIGINT)
        signal.pause()  # the handler raises here, inside the run
    assert exc.value.exit_code == 130
    with GracefulStop() as stopper:  # after raising once, later signals do not interrupt the cleanup that follows
        with pytest.raises(Interrupted), stopper.run_zone():
            os.kill(os.getpid(), signal.SIGTERM)
            signal.pause()
        with stopper.run_zone():
            os.kill(os.getpid(), signal.SIGTERM)
        stopper.check()


def test_crash_points_stay_off_unless_the_environment_asks(tmp_path: Path) -> None:
    class Port:
        def save(self, state: object) -> str:
            return "saved"

    class Executor:
        states, records, runs, forge = Port(), Port(), Port(), Port()

    ex = Executor()
    assert crashpoints.arm(ex, env={}) is False and isinstance(ex.states, Port)
    trace = tmp_path / "trace"
    assert crashpoints.arm(ex, env={crashpoints.CRASH_TRACE: str(trace)}) is True
    assert ex.states.save(None) == "saved" and ex.states.save(None) == "saved"
    assert trace.read_text() == "1 states.save\n2 states.save\n"
