"""A test hook: the driving process SIGKILLs itself right after its k-th side effect, to prove crash-resumability (or
signals itself, as Ctrl-C or ``kill`` would, to prove a stop at a safe point).

Off unless the environment asks for it (``attune campaign run|resume|stop`` arm it; nothing else does):

- ``ATTUNE_CRASH_TRACE=FILE``: append ``<k> <port>.<method>`` to FILE after every side effect (what the points are);
- ``ATTUNE_CRASH_AFTER=K``: after side effect K, ``kill -9`` this process (no handler, no cleanup, like a power cut);
- ``ATTUNE_SIGNAL_AFTER=K`` (or ``K:SIGINT``): after side effect K, send this process SIGTERM (or SIGINT): the
  campaign's handler (:mod:`bot.drive.interrupt`) stops it at the next safe point.

A side effect is a completed call that changes something outside the process: the state store's ``save``, the
record store's ``put_run``/``put``, the run port's ``run``/``calibrate`` (a run made whose record is not stored yet),
and the forge's branch, commit, comment, status and merge calls.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping
from typing import Any

CRASH_AFTER, CRASH_TRACE, SIGNAL_AFTER = "ATTUNE_CRASH_AFTER", "ATTUNE_CRASH_TRACE", "ATTUNE_SIGNAL_AFTER"
SIGNALS = {"": signal.SIGTERM, "SIGTERM": signal.SIGTERM, "SIGINT": signal.SIGINT}
SIDE_EFFECTS = {
    "states": ("save",),
    "records": ("put_run", "put"),
    "runs": ("run", "calibrate"),
    "forge": ("open_step", "add_files", "upsert_comment", "set_status", "merge", "close", "commit_on_base"),
}


class _Counter:
    def __init__(self, kill_at: int | None, trace: str | None, signal_at: tuple[int, int] | None = None) -> None:
        self.n, self.kill_at, self.trace, self.signal_at = 0, kill_at, trace, signal_at

    def hit(self, what: str) -> None:
        self.n += 1
        if self.trace:
            with open(self.trace, "a") as fh:
                fh.write(f"{self.n} {what}\n")
        if self.n == self.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        if self.signal_at is not None and self.n == self.signal_at[0]:
            os.kill(os.getpid(), self.signal_at[1])


def _signal_at(value: str) -> tuple[int, int] | None:
    """``K`` or ``K:SIGINT`` (:data:`SIGNAL_AFTER`) as (K, signal number); None for anything else."""
    k, _, name = value.partition(":")
    signum = SIGNALS.get(name.strip().upper())
    return (int(k), signum) if k.strip().isdigit() and signum is not None else None


class _Tripwire:
    """``target`` with each of ``methods`` counted (and possibly fatal) once it has returned."""

    def __init__(self, target: Any, name: str, methods: tuple[str, ...], counter: _Counter) -> None:
        self._target, self._name, self._methods, self._counter = target, name, methods, counter

    def __getattr__(self, attr: str) -> Any:
        value = getattr(self._target, attr)
        if attr not in self._methods or not callable(value):
            return value

        def counted(*args: Any, **kwargs: Any) -> Any:
            out = value(*args, **kwargs)
            self._counter.hit(f"{self._name}.{attr}")
            return out

        return counted


def arm(executor: Any, env: Mapping[str, str] | None = None) -> bool:
    """Wrap ``executor``'s ports when the environment asks for crash points; answers whether it did."""
    env = os.environ if env is None else env
    kill_at = int(env[CRASH_AFTER]) if env.get(CRASH_AFTER, "").strip().isdigit() else None
    trace = env.get(CRASH_TRACE) or None
    signal_at = _signal_at(env.get(SIGNAL_AFTER, ""))
    if kill_at is None and trace is None and signal_at is None:
        return False
    counter = _Counter(kill_at, trace, signal_at)
    for port, methods in SIDE_EFFECTS.items():
        setattr(executor, port, _Tripwire(getattr(executor, port), port, methods, counter))
    return True
