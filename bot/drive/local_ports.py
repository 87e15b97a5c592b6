"""The local implementations of the executor's ports (:mod:`bot.drive.ports`): the state and the records in files
under a work dir, and every run made now, on this machine (or in the simulator)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bot import campaign as cm
from bot.core.recipe import parse_recipe_text
from bot.core.records import RunRecord, atomic_write_text, read_record, write_record
from bot.drive.ports import RunRequest, budget_cap_s
from bot.runner import Runner


class FileStateStore:
    """``<work_dir>/<campaign>/state.json``, written atomically."""

    def __init__(self, work_dir: Path) -> None:
        self.work_dir = Path(work_dir)

    def path(self, cid: str) -> Path:
        return self.work_dir / cid / "state.json"

    def load(self, cid: str) -> cm.Campaign | None:
        path = self.path(cid)
        return cm.Campaign.model_validate_json(path.read_text()) if path.exists() else None

    def save(self, state: cm.Campaign) -> None:
        atomic_write_text(self.path(state.id), state.model_dump_json(indent=1))


class FileRecordStore:
    """Records under ``<work_dir>/<campaign>/``: a run's in ``<key>/record.json`` (beside the runner's own files in
    ``<key>/``), campaign files by name. References are paths."""

    def __init__(self, work_dir: Path) -> None:
        self.work_dir = Path(work_dir)

    def run_dir(self, cid: str, key: str) -> Path:
        return self.work_dir / cid / key

    def read(self, ref: str) -> RunRecord | None:
        if not ref or not Path(ref).is_file():
            return None
        return read_record(ref)

    def read_text(self, ref: str) -> str | None:
        return Path(ref).read_text() if ref and Path(ref).is_file() else None

    def find_run(self, cid: str, key: str) -> tuple[RunRecord, str] | None:
        path = self.run_dir(cid, key) / "record.json"
        return (read_record(path), str(path)) if path.exists() else None

    def put_run(self, cid: str, key: str, record: RunRecord) -> str:
        return str(write_record(record, self.run_dir(cid, key) / "record.json"))

    def count_runs(self, cid: str) -> int:
        """How many runs of campaign ``cid`` are recorded."""
        return sum(1 for _ in (self.work_dir / cid).glob("*/record.json"))

    def get(self, cid: str, name: str) -> str | None:
        path = self.work_dir / cid / name
        return path.read_text() if path.exists() else None

    def put(self, cid: str, name: str, text: str) -> str:
        path = self.work_dir / cid / name
        atomic_write_text(path, text)
        return str(path)


Calibrator = Callable[[str, RunRecord], cm.Calibrated]


def _takes(fn: Callable[..., object], name: str) -> bool:
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


class LocalRunPort:
    """Runs each run now, on this machine (or in the simulator), into the record store's run folder.

    A runner whose ``run`` takes ``run_index`` (the simulator: it seeds the run's noise) is told the run's place in
    the campaign — the runs already recorded — so a campaign resumed in a new process measures what it would have
    measured had it run through."""

    def __init__(self, runner: Runner, records: FileRecordStore, *, calibrate: Calibrator | None = None) -> None:
        self.runner, self.records, self.calibrator = runner, records, calibrate

    def run(self, state: cm.Campaign, request: RunRequest) -> RunRecord:
        recipe = parse_recipe_text(request.recipe_text, state.recipe_path)
        extra: dict[str, Any] = (
            {"early_stop": request.early_stop} if request.early_stop is not None else {}
        )  # runners without the option still work
        if request.steps is not None:
            extra["steps"] = request.steps
        if _takes(self.runner.run, "run_index"):
            extra["run_index"] = self.records.count_runs(state.id)
        return self.runner.run(
            recipe,
            out_dir=self.records.run_dir(state.id, request.key),
            recipe_path=state.recipe_path,
            recipe_text=request.recipe_text,
            max_wall_s=request.max_wall_s,
            **extra,
        )

    def calibrate(self, state: cm.Campaign, recipe_text: str, reference: RunRecord | None) -> cm.Calibrated:
        if reference is None:
            return cm.Calibrated(note="no loss band: the baseline left no record; tier-R/N steps fail closed")
        if self.calibrator is None:
            return cm.Calibrated(note="no loss-band calibration configured: tier-R/N steps fail closed")
        extra: dict[str, Any] = {}
        if _takes(self.calibrator, "max_wall_s"):  # its runs are capped at what is left of the budget, like every run
            extra["max_wall_s"] = budget_cap_s(state, state.devices)
        if _takes(self.calibrator, "repeats"):  # the baseline's other runs: one is the calibration's repeat
            records = (self.records.read(ref.record) for ref in state.baseline[1:] if ref.record)
            extra["repeats"] = [record for record in records if record is not None]
        if extra:
            takes_more: Callable[..., cm.Calibrated] = self.calibrator
            return takes_more(recipe_text, reference, **extra)
        return self.calibrator(recipe_text, reference)
