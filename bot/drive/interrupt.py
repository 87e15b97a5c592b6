"""Ctrl-C and SIGTERM for a campaign driven by this process: stop at a safe point, leave no process behind.

Inside a run (or a calibration) the signal becomes :class:`Interrupted` at once: the runner's own cleanup kills
torchrun and every rank (``bot.runner.local``), ``gate.runs`` terminates its calibration workers, and no record is
stored for the unfinished run. Anywhere else (git on the forge, a state write) the signal is remembered and
:class:`Interrupted` is raised after the transition in progress is saved. Either way the stored state is the state
after the last whole transition, which ``attune campaign resume`` continues from: the interrupted action is simply
executed again (the executor's handlers are idempotent).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from bot import campaign as cm
from bot.core.records import RunRecord
from bot.drive.ports import RunPort, RunRequest

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(BaseException):
    """The campaign was stopped by a signal (a BaseException, like KeyboardInterrupt: nothing swallows it)."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"interrupted by {self.signame}")

    @property
    def signame(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum  # the shell's convention: 130 for SIGINT, 143 for SIGTERM


class GracefulStop:
    """While entered (in the main thread), SIGINT and SIGTERM stop the campaign at the next safe point."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._in_run = 0
        self._raised = False
        self._old: dict[int, Any] = {}

    def __enter__(self) -> GracefulStop:
        if threading.current_thread() is threading.main_thread():
            for sig in SIGNALS:
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old.clear()

    def _handle(self, signum: int, frame: object) -> None:
        if self.signum is None:
            self.signum = signum
        if self._in_run and not self._raised:
            self._raised = True  # once: a second signal must not interrupt the runner's cleanup
            raise Interrupted(self.signum)

    def check(self) -> None:
        """Raise :class:`Interrupted` if a signal came since (the caller is at a safe point)."""
        if self.signum is not None and not self._raised:
            self._raised = True
            raise Interrupted(self.signum)

    @contextmanager
    def run_zone(self) -> Iterator[None]:
        """A stretch a signal may interrupt at once (a run: its cleanup leaves no process behind)."""
        self.check()
        self._in_run += 1
        try:
            yield
        finally:
            self._in_run -= 1

    def guard(self, executor: Any) -> None:
        """Make ``executor``'s runs interruptible and check for a signal after each of its transitions."""
        executor.runs = _ZonedRuns(executor.runs, self)
        inner = executor.on_event

        def on_event(state: cm.Campaign, action: Any, event: Any) -> None:
            if inner is not None:
                inner(state, action, event)
            self.check()

        executor.on_event = on_event


class _ZonedRuns:
    """A run port whose runs and calibrations happen inside the stopper's run zone."""

    def __init__(self, inner: RunPort, stopper: GracefulStop) -> None:
        self.inner, self.stopper = inner, stopper

    def run(self, state: cm.Campaign, request: RunRequest) -> RunRecord | None:
        with self.stopper.run_zone():
            return self.inner.run(state, request)

    def calibrate(self, state: cm.Campaign, recipe_text: str, reference: RunRecord | None) -> cm.Calibrated | None:
        with self.stopper.run_zone():
            return self.inner.calibrate(state, recipe_text, reference)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
