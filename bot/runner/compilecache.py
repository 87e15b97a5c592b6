"""The compile cache a run's ``torch.compile`` writes to, and how a run that did not end on its own never leaves a
half-written entry there for a later run.

Why: Inductor builds each C++ kernel and wrapper by running the compiler straight into its cache
(``<cache>/<2 chars>/<key>.so``) and later reuses any file it finds there by existence alone
(torch/_inductor/codecache.py: ``CppCodeCache.load_async`` -> ``_worker_compile_cpp``). A run killed while the
compiler writes leaves a short or empty ``.so``, and every later compile of that kernel fails with ``ImportError:
… file too short``. (Sources, FX-graph and AOTAutograd entries and Triton's cache are written atomically: a temp
file, then a rename.) Inductor's cache is ``TORCHINDUCTOR_CACHE_DIR``, else ``<tmp>/torchinductor_<user>``
(torch/_inductor/runtime/cache_dir_utils.py: ``cache_dir()``); Triton's is ``TRITON_CACHE_DIR``, else
``<inductor cache>/triton/<device>`` (``triton_cache_dir()``), so it follows the Inductor cache.

Where the cache is (:func:`cache_root`): ``TORCHINDUCTOR_CACHE_DIR`` of the runner's own environment or its
``extra_env`` when set (an operator's choice: trial.yml puts it in the job's private folder), else the runner's
own ``<tmp>/attune_inductor_<user>``, never torch's default that the user's other torch work shares. A recipe's
``env`` does not choose it: where the cache lives is no training knob, and the runner deletes files there.

Local runs (:class:`CompileCache`): one cache, kept across runs, so a run compiled before is fast. A run that
does not end ``ok`` (stopped, timed out, hung, interrupted, crashed, out of memory: a rank may have been killed
mid-compile, torchrun's SIGTERM to the other ranks included) has every file that changed in the cache since it
started removed (:meth:`Lease.end`) — its own entries, complete or not; what earlier runs wrote stays. Each run
holds an ``flock`` on a marker file (``.attune-runs/<id>.run``) while it runs: a marker that nobody holds any more
is a runner that died without cleaning up (SIGKILL), and the next run scrubs for it before it starts.
A ``TRITON_CACHE_DIR`` set apart from the Inductor cache is left alone (Triton writes atomically).
Limit: a run that ran beside the failed one in the same cache (the gate's ``jobs > 1``) loses what it wrote
meanwhile too; at worst it recompiles, or fails once if a kernel it has just built vanishes before it loads it.

Slurm runs (:class:`Generations`): the cache is on each compute node's own disk, out of the login node's reach, so
a run does not scrub; the job's cache is ``<root>/g-<generation>`` and a job that does not end ``ok`` retires the
generation: later jobs compile into a new, empty folder. Old generations stay on the nodes' disks (their ``/tmp``).
"""

from __future__ import annotations

import contextlib
import fcntl
import getpass
import os
import re
import tempfile
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"
RUNS_DIR = ".attune-runs"  # the markers of runs using the cache, and the lock that orders their start and end
SLACK_S = 1.0  # file times use the kernel's coarse clock: a file written just after a run started may read earlier


def user_name() -> str:
    """The user, as torch's default cache name has it (``uid_<n>`` when the name cannot be read)."""
    try:
        name = getpass.getuser()
    except (KeyError, ModuleNotFoundError, OSError):
        name = f"uid_{os.getuid()}"
    return re.sub(r'[\\/:*?"<>|]', "_", name)


def default_root(tmp: str | None = None) -> Path:
    """The runner's own cache: ``<tmp>/attune_inductor_<user>``."""
    return Path(tmp or tempfile.gettempdir()) / f"attune_inductor_{user_name()}"


def torch_default() -> Path:
    """Torch's own default cache, ``<tmp>/torchinductor_<user>`` (``default_cache_dir()``)."""
    return Path(tempfile.gettempdir()).absolute() / f"torchinductor_{user_name()}"


def cache_root(*envs: Mapping[str, str], default: Path) -> Path:
    """``TORCHINDUCTOR_CACHE_DIR`` from the last of ``envs`` that sets it (the runner's environment, its extra env),
    else ``default``. Torch's own default counts as unset: Inductor's ``cache_dir()`` writes it into this process's
    environment the first time anything in it asks (the in-process config resolve may), so it is no one's choice."""
    chosen = [Path(env[CACHE_ENV]).expanduser().absolute() for env in envs if env.get(CACHE_ENV)]
    chosen = [path for path in chosen if path != torch_default()]
    return chosen[-1] if chosen else default


# -- local runs: one cache, scrubbed after a failed run ---------------------------------------------------------------
def scrub(root: Path, since: float) -> int:
    """Remove every file under ``root`` that changed at or after ``since`` (less :data:`SLACK_S`), but the
    markers and lock files (another run may hold them); returns how many were removed."""
    removed = 0
    for folder, dirs, files in os.walk(root):
        if Path(folder) == root and RUNS_DIR in dirs:
            dirs.remove(RUNS_DIR)
        for name in files:
            if name.endswith(".lock"):
                continue
            path = os.path.join(folder, name)
            try:
                st = os.lstat(path)
                if max(st.st_mtime, st.st_ctime) >= since - SLACK_S:
                    os.unlink(path)
                    removed += 1
            except OSError:
                continue
    return removed


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _abandoned(marker: Path) -> float | None:
    """The start time of the run ``marker`` stands for when no process holds it any more (else None)."""
    try:
        fd = os.open(marker, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return None  # held: that run is going on
    else:
        return os.fstat(fd).st_mtime
    finally:
        os.close(fd)


@dataclass
class Lease:
    """One run's use of the cache: ``path`` is its ``TORCHINDUCTOR_CACHE_DIR``; :meth:`end` once it is over."""

    path: Path
    marker: Path
    fd: int
    started: float
    removed: int = 0  # files the scrub at the end removed

    def end(self, *, ok: bool) -> int:
        """The run is over: unless it ended ``ok``, remove what changed in the cache since it started."""
        if self.fd < 0:
            return self.removed
        with _locked(self.path / RUNS_DIR / "registry.lock"):
            if not ok:
                self.removed = scrub(self.path, self.started)
            with contextlib.suppress(OSError):
                self.marker.unlink()
            os.close(self.fd)
            self.fd = -1
        return self.removed


class CompileCache:
    """The local runner's compile cache at ``root`` (see the module's docstring)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def begin(self) -> Lease:
        """Start a run: scrub for any run that died without cleaning up, then hold a marker of this run's own."""
        runs = self.root / RUNS_DIR
        runs.mkdir(parents=True, exist_ok=True)
        with _locked(runs / "registry.lock"):
            for marker in runs.glob("*.run"):
                since = _abandoned(marker)
                if since is not None:
                    scrub(self.root, since)
                    marker.unlink(missing_ok=True)
            marker = runs / f"{uuid.uuid4().hex[:12]}.run"
            fd = os.open(marker, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            fcntl.flock(fd, fcntl.LOCK_EX)
            started = os.fstat(fd).st_mtime  # the kernel's file clock, as the files it is compared with
        return Lease(path=self.root, marker=marker, fd=fd, started=started)


# -- Slurm runs: a node-local cache per generation -------------------------------------------------------------------
class Generations:
    """The current compile-cache generation of the Slurm runner's jobs, kept in ``state`` on the login node."""

    def __init__(self, state: Path) -> None:
        self.state = Path(state)

    def current(self) -> str:
        """The generation later jobs compile into (a new one when there is none yet)."""
        with contextlib.suppress(OSError):
            gen = self.state.read_text().strip()
            if re.fullmatch(r"[0-9a-f]{12}", gen):
                return gen
        return self._new()

    def retire(self, gen: str) -> None:
        """A job of generation ``gen`` did not end ok: later jobs get a new generation (if they do not already)."""
        if self.current() == gen:
            self._new()

    def path(self, root: str, gen: str) -> str:
        """The cache folder of generation ``gen`` under ``root`` (a path on the compute nodes)."""
        return f"{root.rstrip('/')}/g-{gen}"

    def _new(self) -> str:
        gen = uuid.uuid4().hex[:12]
        self.state.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.state.with_name(f".{self.state.name}.{os.getpid()}.{gen}")
        tmp.write_text(gen + "\n")
        os.replace(tmp, self.state)
        return gen
