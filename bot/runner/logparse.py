"""Parse torchtitan's console output and structured JSONL spans into step metrics.

Tolerant patterns (docs/reference/torchtitan.md §6): ANSI colour codes stripped, thousands separators in tps,
widths and decimals not assumed, ``validate step:`` lines ignored, ``mfu: N/A`` accepted.
"""

from __future__ import annotations

import json
import re
import statistics
from datetime import datetime
from pathlib import Path

from bot.core.records import StepMetric

ANSI = re.compile(r"\x1b\[[0-9;]*m")
TIMESTAMP = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})")
NUM = r"[-+]?(?:\d[\d,]*\.?\d*(?:[eE][-+]?\d+)?|nan|inf)"
STEP = re.compile(
    rf"(?<!validate )\bstep:\s*(?P<step>\d+)\s+loss:\s*(?P<loss>{NUM})"
    rf"(?:\s+grad_norm:\s*(?P<grad_norm>{NUM}))?"
    rf"(?:\s+memory:\s*(?P<mem>{NUM})GiB\((?P<mem_pct>{NUM})%\))?"
    rf"(?:\s+tps:\s*(?P<tps>{NUM}))?"
    rf"(?:\s+tflops:\s*(?P<tflops>{NUM}))?"
    rf"(?:\s+mfu:\s*(?P<mfu>{NUM}|N/A)%?)?",
    re.IGNORECASE,
)
OOM_PATTERNS = [
    re.compile(p, re.IGNORECASE)
    for p in (
        r"CUDA out of memory",
        r"HIP out of memory",
        r"OutOfMemoryError",
        r"DefaultCPUAllocator: (?:not enough memory|can't allocate memory)",
        r"std::bad_alloc",
        r"\bMemoryError\b",
        r"Cannot allocate memory",
    )
]


def strip_ansi(line: str) -> str:
    return ANSI.sub("", line)


def _num(text: str | None) -> float | None:
    if text is None or text.upper() == "N/A":
        return None
    return float(text.replace(",", ""))


def parse_step_line(line: str) -> tuple[StepMetric, datetime | None] | None:
    """A metric line as a StepMetric (and its log timestamp), or None for any other line."""
    clean = strip_ansi(line)
    m = STEP.search(clean)
    if not m:
        return None
    ts = TIMESTAMP.search(clean)
    when = datetime.strptime(ts.group(1), "%Y-%m-%d %H:%M:%S,%f") if ts else None
    metric = StepMetric(
        step=int(m["step"]),
        loss=float(_num(m["loss"])),  # type: ignore[arg-type]
        grad_norm=_num(m["grad_norm"]),
        memory_gib=_num(m["mem"]),
        memory_pct=_num(m["mem_pct"]),
        tps=_num(m["tps"]),
        tflops=_num(m["tflops"]),
        mfu=_num(m["mfu"]),
    )
    return metric, when


def is_oom(text: str) -> bool:
    return any(p.search(text) for p in OOM_PATTERNS)


def span_medians(jsonl_dir: Path, *, skip_steps: int = 1) -> dict[str, float]:
    """Median per-step duration (ms) of each structured-log span on rank 0, steps > ``skip_steps``."""
    files = sorted(jsonl_dir.glob("training.global_rank_0.*.jsonl"))
    if not files:
        return {}
    per_step: dict[str, dict[int, float]] = {}
    for line in files[-1].read_text().splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        name = rec.get("log_type_name") or ""
        step = rec.get("step")
        if not name.endswith("_end") or not isinstance(step, int) or step <= skip_steps:
            continue
        value = rec.get("value")
        if isinstance(value, int | float):
            span = name[: -len("_end")]
            per_step.setdefault(span, {}).setdefault(step, 0.0)
            per_step[span][step] += float(value)
    return {span: round(statistics.median(v.values()), 3) for span, v in per_step.items() if v}
