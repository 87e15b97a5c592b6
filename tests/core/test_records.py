"""Run records: what a runner writes is what it reads back, a diverged run's NaN loss included."""

from __future__ import annotations

import math
from pathlib import Path

from bot.core.records import (
    LaunchShape,
    RunRecord,
    RunSummary,
    StackFingerprint,
    StepMetric,
    read_record,
    write_record,
)


def test_a_diverged_runs_nan_loss_round_trips(tmp_path: Path) -> None:
    """pydantic writes NaN as null by default, which reads back as "loss: expected a number": the record of a run
    that diverged (torchtitan logs "loss: nan") could not be read, so neither the campaign nor the gate saw it."""
    record = RunRecord(
        run_id="r1",
        recipe_id="m/c",
        recipe_hash="0" * 16,
        hardware="cpu",
        stack=StackFingerprint(python="3.11", torch="2.13.0", torchtitan="0.3.0"),
        launch=LaunchShape(launcher="local", nodes=1, devices_per_node=1, world_size=1),
        outcome="ok",
        steps=[StepMetric(step=1, loss=10.5), StepMetric(step=2, loss=math.nan, grad_norm=math.inf)],
        summary=RunSummary(loss_last=math.nan),
    )
    back = read_record(write_record(record, tmp_path / "record.json"))
    assert back.steps[0].loss == 10.5
    assert math.isnan(back.steps[1].loss) and back.steps[1].grad_norm == math.inf
    assert back.summary.loss_last is not None and math.isnan(back.summary.loss_last)
