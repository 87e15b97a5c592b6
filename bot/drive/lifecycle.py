"""What a local campaign keeps beside its state to be listed, resumed and stopped from the command line.

Under ``<repo>/.attune/campaigns/<id>/``, next to ``state.json``:

- ``lock``: held (``flock``) by the one process driving the campaign, with its pid inside. The kernel drops the lock
  when that process dies, however it dies, so a SIGKILLed campaign is resumable at once and a running one is never
  driven by two processes.
- ``launch.json``: how the campaign was started (:class:`LaunchFacts`: forge, policy seed, the gate's calibration
  cache), so ``attune campaign resume`` rebuilds the same executor.

and under ``<repo>/.attune/``, ``checkout.lock``: held (``flock``, ``<pid> <campaign>`` inside) by the process driving
any local-forge campaign of the checkout (:class:`CheckoutLock`). Such a campaign merges its kept steps into the
checked-out branch and commits its summary there: two at once would merge into one branch and corrupt each other.

A campaign's status (:func:`status_of`, what ``attune campaign list`` and ``show`` say) is ``running (pid N)``,
``resumable``, ``finishing`` (it finished, but its summary/finish actions are still pending: ``resume`` carries them
out), ``finished``, or ``interrupted (cannot resume ...)`` for a ``--forge none`` campaign that did not finish: its
steps, their recipes and every merge lived in the memory of the process that died, so nothing is left to continue
from (``resume`` refuses it); ``stop`` still ends it, because ending one needs only its state (its open step is
closed on a forge that no longer holds it, and an in-memory forge commits no summary).

A lock file that cannot be opened (a folder where the file should be, no permission) is a :class:`LockError`: one
line naming the path and what was expected, never a traceback.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path
from typing import IO

from pydantic import BaseModel

from bot import campaign as cm
from bot.core.records import atomic_write_text
from bot.core.state import read_campaign

LOCK, LAUNCH, STATE, CHECKOUT_LOCK = "lock", "launch.json", "state.json", "checkout.lock"


class LockError(ValueError):
    """A lock file that cannot be opened (a folder, no permission): one line naming it and what was expected."""

    def __init__(self, path: Path, exc: OSError) -> None:
        super().__init__(
            f"{path}: cannot open this lock file ({exc.strerror or exc}); expected a regular file this user "
            "can read and write (remove whatever is there when no attune process runs a campaign here)"
        )


class CampaignBusy(Exception):
    """Another live process drives the campaign."""

    def __init__(self, cid: str, pid: int | None) -> None:
        self.cid, self.pid = cid, pid
        super().__init__(f"campaign {cid} is being run by process {pid if pid else '(unknown)'}")


class CheckoutBusy(Exception):
    """Another live process drives a local-forge campaign in this checkout."""

    def __init__(self, root: Path, cid: str, pid: int | None) -> None:
        self.root, self.cid, self.pid = root, cid, pid
        super().__init__(
            f"{root}: campaign {cid or '(unknown)'} (process {pid if pid else '(unknown)'}) is running in this "
            "checkout; one campaign at a time merges into a checkout"
        )


class LaunchFacts(BaseModel):
    """How a local campaign was started (what ``resume`` needs that the campaign state does not hold)."""

    forge: str = "local"
    seed: int = 0
    cache_dir: str | None = None  # the gate's calibration cache (None: the repository's .attune/)

    @classmethod
    def load(cls, folder: Path) -> LaunchFacts:
        path = Path(folder) / LAUNCH
        return cls.model_validate_json(path.read_text()) if path.exists() else cls()

    def save(self, folder: Path) -> None:
        atomic_write_text(Path(folder) / LAUNCH, self.model_dump_json(indent=1))


def _open(path: Path, mode: str) -> IO[str]:
    """``path`` opened (its folder made first when it is to be written); :class:`LockError` when it cannot be."""
    try:
        if "a" in mode:
            path.parent.mkdir(parents=True, exist_ok=True)
        return open(path, mode)  # noqa: SIM115 - the caller holds it
    except OSError as exc:  # a folder where the file should be, no permission, a file where a folder should be
        raise LockError(path, exc) from None


class _Flock:
    """An exclusive ``flock`` on one file, taken without waiting, with a line about its holder inside."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._fh: IO[str] | None = None

    def check(self) -> None:
        """:class:`LockError` now when the file is there but cannot be opened (before any lock is taken: a command
        refused for it leaves no other lock file behind)."""
        if self.path.exists() or self.path.is_symlink():
            _open(self.path, "a+").close()

    def take(self, text: str) -> bool:
        """Take the lock and write ``text`` into the file; False when another process holds it."""
        fh = _open(self.path, "a+")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.close()
            return False
        fh.truncate(0)
        fh.write(text)
        fh.flush()
        self._fh = fh
        return True

    def release(self) -> None:
        if self._fh is not None:
            self._fh.truncate(0)
            fcntl.flock(self._fh, fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None


def _held_by(path: Path) -> str | None:
    """What the live process holding the lock on ``path`` wrote there ("" before it has), or None when none holds it."""
    if not path.exists() and not path.is_symlink():
        return None
    with _open(path, "r") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return fh.read().strip()
        fcntl.flock(fh, fcntl.LOCK_UN)
    return None


class CampaignLock:
    """The ``flock`` on ``<folder>/lock`` (see the module docstring)."""

    def __init__(self, folder: Path, cid: str) -> None:
        self.path, self.cid = Path(folder) / LOCK, cid
        self._lock = _Flock(self.path)

    def check(self) -> CampaignLock:
        self._lock.check()
        return self

    def acquire(self) -> CampaignLock:
        if not self._lock.take(f"{os.getpid()}\n"):
            raise CampaignBusy(self.cid, holder(self.path.parent))
        return self

    def release(self) -> None:
        self._lock.release()

    def wait(self, timeout_s: float) -> CampaignLock:
        """Acquire, waiting up to ``timeout_s`` for the process that holds the lock to let go."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return self.acquire()
            except CampaignBusy:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)


def holder(folder: Path) -> int | None:
    """The pid of the live process holding ``<folder>/lock`` (0: not yet written), or None when no process holds it."""
    text = _held_by(Path(folder) / LOCK)
    if text is None:
        return None
    return int(text) if text.isdigit() else 0


class CheckoutLock:
    """The ``flock`` on ``<work>/checkout.lock`` (``work``: the checkout's ``.attune/``), held by the process driving
    a local-forge campaign of the checkout (see the module docstring)."""

    def __init__(self, work: Path, cid: str) -> None:
        self.work, self.cid = Path(work), cid
        self._lock = _Flock(self.work / CHECKOUT_LOCK)

    def check(self) -> CheckoutLock:
        self._lock.check()
        return self

    def acquire(self) -> CheckoutLock:
        if not self._lock.take(f"{os.getpid()} {self.cid}\n"):
            pid, cid = checkout_holder(self.work) or (0, "")
            raise CheckoutBusy(self.work.parent, cid, pid)
        return self

    def release(self) -> None:
        self._lock.release()


def checkout_holder(work: Path) -> tuple[int, str] | None:
    """(pid, campaign id) of the live process holding ``<work>/checkout.lock`` (0 and "" where it has not written
    them yet), or None when no process holds it."""
    text = _held_by(Path(work) / CHECKOUT_LOCK)
    if text is None:
        return None
    pid, _, cid = text.partition(" ")
    return (int(pid) if pid.isdigit() else 0), cid.strip()


class CampaignRow(BaseModel):
    """One line of ``attune campaign list``."""

    id: str
    recipe: str = ""
    phase: str  # baseline, stepping, finished; "unreadable" for a state file that does not parse
    status: str  # running (pid N), resumable, finishing (...), finished, interrupted (cannot resume ...), unreadable
    steps: int = 0
    kept: int = 0
    gain: float = 0.0
    spent: float = 0.0
    budget: float = 0.0
    finish_reason: str = ""


def status_of(state: cm.Campaign, running_pid: int | None, forge: str = "local") -> str:
    """What a stored campaign is now (see the module docstring): pure, the lock holder and the forge it ran with
    (:class:`LaunchFacts`) are read by the caller."""
    if running_pid is not None:
        return f"running (pid {running_pid})"
    if state.phase == "finished" and not state.pending:
        return "finished"
    if forge != "local":
        return (
            f"interrupted (cannot resume: --forge {forge} kept its steps in memory; "
            f"`attune campaign stop {state.id}` ends it)"
        )
    if state.phase == "finished":
        n = len(state.pending)
        return f"finishing ({n} action{'' if n == 1 else 's'} pending; run `attune campaign resume {state.id}`)"
    return "resumable"


def row_of(
    cid: str, state: cm.Campaign | None, running_pid: int | None, error: str = "", *, forge: str = "local"
) -> CampaignRow:
    """The list row of a stored campaign (pure: the state, the lock holder and the forge are read by the caller)."""
    if state is None:
        return CampaignRow(id=cid, phase="unreadable", status=f"unreadable: {error}"[:200])
    return CampaignRow(
        id=cid,
        recipe=state.recipe_path,
        phase=state.phase,
        status=status_of(state, running_pid, forge),
        steps=len(state.steps),
        kept=sum(1 for s in state.steps if s.kept),
        gain=state.gain,
        spent=state.spent,
        budget=state.budget,
        finish_reason=state.finish_reason,
    )


def forge_of(folder: Path) -> str:
    """The forge the campaign in ``folder`` ran with; "local" where its launch facts are missing or damaged (``resume``
    and ``stop`` name a damaged file)."""
    try:
        return LaunchFacts.load(folder).forge
    except (OSError, ValueError):
        return "local"


def _row(folder: Path) -> CampaignRow:
    try:
        state = read_campaign(folder / STATE)
    except (OSError, ValueError) as exc:  # ValueError: one line naming the file and its first wrong field
        return row_of(folder.name, None, None, str(exc).splitlines()[0])
    try:
        pid = holder(folder)
    except LockError as exc:  # the other campaigns are still listed
        return row_of(folder.name, state, None).model_copy(update={"status": f"unknown: {exc}"})
    return row_of(folder.name, state, pid, forge=forge_of(folder))


def list_campaigns(campaigns_dir: Path) -> list[CampaignRow]:
    """Every campaign stored under ``campaigns_dir`` (``<repo>/.attune/campaigns``), oldest id first."""
    if not Path(campaigns_dir).is_dir():
        return []
    return [_row(folder) for folder in sorted(p for p in Path(campaigns_dir).iterdir() if (p / STATE).is_file())]
