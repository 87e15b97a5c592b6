"""bot/drive/lifecycle.py and bot/drive/interrupt.py: one live process drives a campaign, and one campaign a checkout
(locks that die with their holder); a lock file that cannot be opened is one line; the list rows and statuses; a
signal outside a run waits for the transition in progress, a signal inside a run ends it at once; crash points are
off unless asked for."""

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
from bot.drive.lifecycle import (
    CampaignBusy,
    CampaignLock,
    CheckoutBusy,
    CheckoutLock,
    LaunchFacts,
    LockError,
    checkout_holder,
    holder,
    list_campaigns,
    row_of,
    status_of,
)

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
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from bot.drive.lifecycle import holder; print(holder(sys.argv[1]))",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert child.stdout.strip() == str(os.getpid())
    lock.release()
    assert holder(tmp_path) is None


HOLD_CHECKOUT = (
    "import sys, time; from bot.drive.lifecycle import CheckoutLock; lock = CheckoutLock(sys.argv[1], 'c7').acquire(); "
    "print('held', flush=True); time.sleep(600)"
)


def test_a_checkout_held_by_a_live_process_names_its_campaign_and_dies_with_that_process(tmp_path: Path) -> None:
    work = tmp_path / ".attune"
    assert checkout_holder(work) is None
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD_CHECKOUT, str(work)], stdout=subprocess.PIPE, text=True, cwd=REPO
    )
    try:
        assert proc.stdout.readline().strip() == "held"
        assert checkout_holder(work) == (proc.pid, "c7")
        with pytest.raises(
            CheckoutBusy, match=rf"^{tmp_path}: campaign c7 \(process {proc.pid}\) is running in this checkout"
        ):
            CheckoutLock(work, "c8").acquire()
    finally:
        proc.kill()
        proc.wait()
    assert checkout_holder(work) is None
    lock = CheckoutLock(work, "c8").acquire()
    assert (work / "checkout.lock").read_text() == f"{os.getpid()} c8\n"
    lock.release()


def test_a_lock_file_that_is_a_folder_or_unreadable_is_one_line_naming_it(tmp_path: Path) -> None:
    (tmp_path / "lock").mkdir()
    (tmp_path / "checkout.lock").mkdir()
    expected = "cannot open this lock file (Is a directory); expected a regular file this user can read and write"
    for call in (
        lambda: holder(tmp_path),
        lambda: CampaignLock(tmp_path, "c").acquire(),
        lambda: CampaignLock(tmp_path, "c").check(),
        lambda: checkout_holder(tmp_path),
        lambda: CheckoutLock(tmp_path, "c").acquire(),
    ):
        with pytest.raises(LockError) as exc:
            call()
        assert str(exc.value).startswith(f"{tmp_path}/") and expected in str(exc.value) and "\n" not in str(exc.value)


def test_a_lock_file_this_user_cannot_open_is_one_line_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Permission denied, as a user other than the file's owner gets it (root opens any file, so the tests, which may
    run as root, have the open refuse as the kernel would for that user)."""
    import builtins

    (tmp_path / "lock").write_text("")
    real_open = builtins.open

    def refusing(file, *args, **kwargs):
        if Path(file) == tmp_path / "lock":
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", refusing)
    with pytest.raises(LockError, match=r"cannot open this lock file \(Permission denied\)"):
        holder(tmp_path)
    with pytest.raises(LockError, match=r"cannot open this lock file \(Permission denied\)"):
        CampaignLock(tmp_path, "c").check()


def _state(**kw) -> cm.Campaign:
    return cm.Campaign(id="c", recipe_path="recipes/x.yaml", recipe_id="x", budget=10.0, **kw)


def test_list_rows_say_running_resumable_finished_or_unreadable(tmp_path: Path) -> None:
    assert row_of("c", _state(), 4242).status == "running (pid 4242)"
    assert row_of("c", _state(phase="stepping", spent=2.5), None).model_dump(
        include={"phase", "status", "spent", "budget"}
    ) == {"phase": "stepping", "status": "resumable", "spent": 2.5, "budget": 10.0}
    assert row_of("c", _state(phase="finished", finish_reason="budget exhausted"), None).status == "finished"
    # killed while finishing: the summary is still to be committed, which resume does
    finishing = _state(phase="finished", pending=[cm.Finish(reason="x")])
    assert row_of("c", finishing, None).status == "finishing (1 action pending; run `attune campaign resume c`)"
    assert status_of(
        finishing.model_copy(update={"pending": [cm.Comment(n=0, kind="summary"), cm.Finish(reason="x")]}), None
    ) == ("finishing (2 actions pending; run `attune campaign resume c`)")
    # an in-memory forge's steps died with its process: nothing to resume, but stop ends it
    assert row_of("c", _state(phase="stepping"), None, forge="none").status == (
        "interrupted (cannot resume: --forge none kept its steps in memory; `attune campaign stop c` ends it)"
    )
    assert status_of(_state(phase="finished"), None, "none") == "finished"
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "state.json").write_text(_state().model_copy(update={"id": "a"}).model_dump_json())
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "state.json").write_text("{not json")
    (tmp_path / "c").mkdir()  # a lock or launch file only: no campaign was saved
    (tmp_path / "d").mkdir()  # an in-memory forge's campaign
    (tmp_path / "d" / "state.json").write_text(_state().model_copy(update={"id": "d"}).model_dump_json())
    LaunchFacts(forge="none").save(tmp_path / "d")
    (tmp_path / "e").mkdir()  # a lock file that cannot be opened: the other campaigns are still listed
    (tmp_path / "e" / "state.json").write_text(_state().model_copy(update={"id": "e"}).model_dump_json())
    (tmp_path / "e" / "lock").mkdir()
    rows = list_campaigns(tmp_path)
    assert [(r.id, r.status.split(" ")[0].rstrip(":")) for r in rows] == [
        ("a", "resumable"),
        ("b", "unreadable"),
        ("d", "interrupted"),
        ("e", "unknown"),
    ]
    assert rows[3].status.startswith(f"unknown: {tmp_path / 'e' / 'lock'}: cannot open this lock file (Is a directory)")
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
