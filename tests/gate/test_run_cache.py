"""gate/runs.py's run cache trusts a cached record only when its content describes the run its file is named for
(the recipe's content hash and the hook): a record written under another run's name -- another recipe, or another
repository's job on a runner whose cache is shared -- is never reused. No real run is made here: the records are
written into the cache the way ``run_one`` writes them."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.core.records import LaunchShape, RunRecord, RunSummary, StackFingerprint, content_hash, write_record
from gate.runs import RunSpec, cached_path, lookup

ROOT = Path(__file__).resolve().parents[2]
TEXT = (ROOT / "recipes" / "llama3-tiny" / "cpu.yaml").read_text()


def record(recipe_text: str, hook: str | None, outcome: str = "ok") -> RunRecord:
    return RunRecord(
        run_id="r1",
        recipe_id="llama3-tiny/cpu",
        recipe_hash=content_hash(recipe_text),
        hardware="cpu",
        stack=StackFingerprint(python="3.11", torch="2.13.0", torchtitan="0.3.0"),
        hook=hook,
        launch=LaunchShape(launcher="local", nodes=1, devices_per_node=1, world_size=1),
        outcome=outcome,
        summary=RunSummary(steps_completed=4, tps_median=100.0, wall_s=1.0, device_hours=0.0),
    )


def test_a_record_that_describes_its_run_is_reused(tmp_path: Path) -> None:
    spec = RunSpec(label="repeat", recipe_text=TEXT, steps=4, hook="grad_scale:2")
    write_record(record(TEXT, "grad_scale:2"), cached_path(spec, tmp_path))
    found = lookup(spec, tmp_path)
    assert found is not None and found.run_id == "r1"


@pytest.mark.parametrize(
    ("text", "hook", "outcome"),
    [
        (TEXT + "\n# another recipe (its content hash differs)\n", "grad_scale:2", "ok"),
        (TEXT, None, "ok"),
        (TEXT, "grad_scale:2", "crash"),
    ],
    ids=["another-recipe", "another-hook", "not-ok"],
)
def test_a_record_under_another_runs_name_is_not_reused(
    tmp_path: Path, text: str, hook: str | None, outcome: str
) -> None:
    spec = RunSpec(label="repeat", recipe_text=TEXT, steps=4, hook="grad_scale:2")
    write_record(record(text, hook, outcome), cached_path(spec, tmp_path))  # planted under this spec's name
    assert lookup(spec, tmp_path) is None
