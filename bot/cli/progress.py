"""A live progress display on a terminal for local campaigns and the benchmarks (``attune campaign run|resume``,
``attune demo``, ``attune bench tuners|gate``): what runs now, the campaign step, what is spent of the total, the
elapsed time and an estimate of the time left.

It is fed by what the commands already produce -- the executor's ``on_event(state, action, event)`` after every
transition (the next pending action is what runs now), the calibration's and the gate benchmark's progress messages
(``[k/N] label: outcome``), the tuner benchmark's row per finished campaign -- and shows nothing unless stdout is a
terminal and the command was not asked for ``--json`` (:func:`wanted`): logs, pipes and JSON stay as they are.

The time left is rich's estimate from the rate at which the total is being spent: for a campaign the budget (a
campaign may finish before it spends it all, so the estimate is an upper bound), for a benchmark its runs or
campaigns.
"""

from __future__ import annotations

import re
import sys
from typing import Any, Self, TextIO

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn, TimeRemainingColumn

_COUNTED = re.compile(r"^\[(\d+)/(\d+)\]\s*(.*)$")  # gate.runs.run_many: "[3/12] label: ok in 40s"


def wanted(as_json: bool, stream: TextIO | None = None) -> bool:
    """Whether to show the display: stdout is a terminal and no ``--json`` was asked for."""
    stream = sys.stdout if stream is None else stream
    try:
        return not as_json and stream.isatty()
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False


def _columns(unit: str) -> list[Any]:
    return [
        TextColumn("{task.description}"),
        BarColumn(bar_width=24),
        TextColumn(f"{{task.fields[spent]}} {unit}"),
        TextColumn("elapsed"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
    ]


class Display:
    """One rich progress bar and its text; a context manager (started on enter, its last state kept on exit)."""

    def __init__(self, console: Console, title: str, total: float, unit: str) -> None:
        self.console, self.title = console, title
        self.progress = Progress(*_columns(unit), console=console, transient=False, refresh_per_second=4)
        self.task: TaskID = self.progress.add_task(escape(title), total=total or None, spent=self._spent(0.0, total))
        self.total = total

    @staticmethod
    def _spent(done: float, total: float) -> str:
        return f"{done:.4g}/{total:.4g}"

    def update(self, *, now: str | None = None, done: float | None = None, total: float | None = None) -> None:
        if total is not None:
            self.total = total
        fields: dict[str, Any] = {}
        if done is not None:
            fields["completed"] = done
            fields["spent"] = self._spent(done, self.total)
        if now is not None:
            fields["description"] = escape(f"{self.title} · {now}")
        self.progress.update(self.task, total=self.total or None, refresh=True, **fields)  # every change is seen

    def __enter__(self) -> Self:
        self.progress.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.stop()


# -- campaigns -------------------------------------------------------------------------------------------------


def action_label(action: Any) -> str:
    """What a pending action of the campaign state machine does, in a few words."""
    kind = getattr(action, "type", "")
    n = getattr(action, "n", 0)
    return {
        "run_baseline": f"baseline run {getattr(action, 'attempt', '')}".strip(),
        "calibrate": "gate loss-band calibration",
        "propose": "policy proposes the next change",
        "open_step": f"opening step {n}",
        "check_config": f"step {n}: config gate",
        "run_trial": f"step {n}: trial run",
        "measure_pair": f"step {n}: pair {getattr(action, 'k', '')} ({getattr(action, 'order', '')})",
        "check_convergence": f"step {n}: convergence gate",
        "merge": f"step {n}: merge",
        "close": f"step {n}: close",
        "finish": "finishing",
    }.get(kind, kind.replace("_", " ") or "—")


class CampaignDisplay(Display):
    """A local campaign: fed by the executor's ``on_event`` and the calibration's progress messages."""

    def __init__(self, console: Console, state: Any) -> None:
        super().__init__(console, f"campaign {state.id}", float(state.budget), "device-hours")
        self.show(state)

    def show(self, state: Any) -> None:
        step = f"step {len(state.steps)}" if state.steps else "baseline"
        now = action_label(state.pending[0]) if state.pending else state.phase
        self.update(
            now=f"{step} · now: {now}", done=min(float(state.spent), float(state.budget)), total=float(state.budget)
        )

    def on_event(self, state: Any, action: Any, event: Any) -> None:
        self.show(state)

    def message(self, text: str) -> None:
        """A calibration progress message (``gate.runs.run_many``): its run is what runs now."""
        found = _COUNTED.match(text)
        self.update(now=f"calibration {found.group(1)}/{found.group(2)} done" if found else f"calibration: {text[:80]}")


# -- benchmarks ------------------------------------------------------------------------------------------------


class CountDisplay(Display):
    """A benchmark: ``total`` runs or campaigns; fed one finished item at a time."""

    def __init__(self, console: Console, title: str, total: int, unit: str) -> None:
        super().__init__(console, title, float(total), unit)
        self.done = 0

    def finished(self, what: str, done: int | None = None, total: int | None = None) -> None:
        self.done = self.done + 1 if done is None else done
        self.update(now=f"last: {what}", done=float(self.done), total=None if total is None else float(total))

    def message(self, text: str) -> None:
        """``gate.runs.run_many``'s messages: ``[k/N] label: outcome in Ts`` counts, anything else is news."""
        found = _COUNTED.match(text)
        if found:
            self.finished(found.group(3)[:80], int(found.group(1)), int(found.group(2)))
        else:
            self.update(now=text[:80])
