"""Every rank's own log, and the cause of a crash read from the rank that failed first.

torchrun shows one rank on the console (``--local-ranks-filter``, the rank with the loss) and ends a failed run with
its ``ChildFailedError`` summary, which names the first rank to fail but not why. With ``--log-dir`` it keeps each
rank's stdout and stderr (``<log dir>/<run id>/attempt_<n>/<local rank>/stderr.log``;
https://docs.pytorch.org/docs/stable/elastic/run.html), where that rank's exception is.
"""

from __future__ import annotations

import re
from pathlib import Path

RANK_LOGS = "ranks"  # the folder of a run's output where torchrun keeps every rank's log
_ROOT_CAUSE = re.compile(r"Root Cause \(first observed failure\):(?P<block>.*?)(?:={20,}|\Z)", re.S)
_EXCEPTION = re.compile(r"^[A-Za-z_][\w.:]*(Error|Exception)\b")


def root_cause(console: str) -> tuple[int, str] | None:
    """The local rank torchrun's summary names as the first to fail, and what it says of it (its ``traceback``
    field: a signal, or ``<N/A>``); None where the console holds no such summary."""
    match = _ROOT_CAUSE.search(console)
    if match is None:
        return None
    rank = re.search(r"local_rank:\s*(\d+)", match.group("block"))
    if rank is None:
        return None
    said = re.search(r"traceback\s*:\s*(.+)", match.group("block"))
    return int(rank.group(1)), (said.group(1).strip() if said else "")


def _exception_line(text: str) -> str:
    """The last exception line of a rank's stderr (a traceback ends with it), else its last line."""
    lines = [re.sub(r"^(\[rank\d+\]:)+", "", line).strip() for line in text.splitlines()]
    lines = [line for line in lines if line]
    raised = [line for line in lines if _EXCEPTION.match(line)]
    return (raised or lines or [""])[-1]


def crash_cause(log_dir: Path, console: str) -> str:
    """Why a multi-rank run crashed, from the rank that failed first: "rank N: <its exception>" (and the signal
    that ended it, where one did); "" where the console names no failed rank or its log is not there."""
    cause = root_cause(console)
    if cause is None:
        return ""
    rank, said = cause
    logs = sorted(Path(log_dir).glob(f"*/attempt_*/{rank}/stderr.log"))
    if not logs:
        return ""
    line = _exception_line(logs[-1].read_text(errors="replace"))
    signal = said if said.startswith("Signal") else ""
    parts = [part for part in (line[-400:], signal) if part]
    return f"rank {rank}: {'; '.join(parts)}" if parts else ""
