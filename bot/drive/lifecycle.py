"""What a local campaign keeps beside its state to be listed, resumed and stopped from the command line.

Under ``<repo>/.attune/campaigns/<id>/``, next to ``state.json``:

- ``lock``: held (``flock``) by the one process driving the campaign, with its pid inside. The kernel drops the lock
  when that process dies, however it dies, so a SIGKILLed campaign is resumable at once and a running one is never
  driven by two processes.
- ``launch.json``: how the campaign was started (:class:`LaunchFacts`: forge, policy seed, the gate's calibration
  cache), so ``attune campaign resume`` rebuilds the same executor.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from pydantic import BaseModel

from bot import campaign as cm
from bot.core.records import atomic_write_text
from bot.core.state import read_campaign

LOCK, LAUNCH, STATE = "lock", "launch.json", "state.json"


class CampaignBusy(Exception):
    """Another live process drives the campaign."""

    def __init__(self, cid: str, pid: int | None) -> None:
        self.cid, self.pid = cid, pid
        super().__init__(f"campaign {cid} is being run by process {pid if pid else '(unknown)'}")


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


class CampaignLock:
    """The ``flock`` on ``<folder>/lock`` (see the module docstring)."""

    def __init__(self, folder: Path, cid: str) -> None:
        self.path, self.cid = Path(folder) / LOCK, cid
        self._fh = None

    def acquire(self) -> CampaignLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(self.path, "a+")  # noqa: SIM115 - held until release()
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.close()
            raise CampaignBusy(self.cid, holder(self.path.parent)) from None
        fh.truncate(0)
        fh.write(f"{os.getpid()}\n")
        fh.flush()
        self._fh = fh
        return self

    def release(self) -> None:
        if self._fh is not None:
            self._fh.truncate(0)
            fcntl.flock(self._fh, fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None

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
    """The pid of the live process holding ``<folder>/lock``, or None when no process holds it."""
    path = Path(folder) / LOCK
    if not path.exists():
        return None
    with open(path) as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = fh.read().strip()
            return int(text) if text.isdigit() else 0
        fcntl.flock(fh, fcntl.LOCK_UN)
    return None


class CampaignRow(BaseModel):
    """One line of ``attune campaign list``."""

    id: str
    recipe: str = ""
    phase: str  # baseline, stepping, finished; "unreadable" for a state file that does not parse
    status: str  # running (pid N), resumable, finished, unreadable
    steps: int = 0
    kept: int = 0
    gain: float = 0.0
    spent: float = 0.0
    budget: float = 0.0
    finish_reason: str = ""


def row_of(cid: str, state: cm.Campaign | None, running_pid: int | None, error: str = "") -> CampaignRow:
    """The list row of a stored campaign (pure: the state and the lock holder are read by the caller)."""
    if state is None:
        return CampaignRow(id=cid, phase="unreadable", status=f"unreadable: {error}"[:200])
    if running_pid is not None:
        status = f"running (pid {running_pid})"
    elif state.phase == "finished" and not state.pending:
        status = "finished"
    else:
        status = "resumable"
    return CampaignRow(id=cid, recipe=state.recipe_path, phase=state.phase, status=status, steps=len(state.steps),
                       kept=sum(1 for s in state.steps if s.kept), gain=state.gain, spent=state.spent, budget=state.budget,
                       finish_reason=state.finish_reason)


def list_campaigns(campaigns_dir: Path) -> list[CampaignRow]:
    """Every campaign stored under ``campaigns_dir`` (``<repo>/.attune/campaigns``), oldest id first."""
    rows: list[CampaignRow] = []
    if not Path(campaigns_dir).is_dir():
        return rows
    for folder in sorted(p for p in Path(campaigns_dir).iterdir() if (p / STATE).is_file()):
        try:
            state, error = read_campaign(folder / STATE), ""
        except (OSError, ValueError) as exc:  # ValueError: one line naming the file and its first wrong field
            state, error = None, str(exc).splitlines()[0]
        rows.append(row_of(folder.name, state, holder(folder), error))
    return rows
