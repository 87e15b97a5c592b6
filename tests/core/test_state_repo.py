"""bot/core/state.py and bot/core/repo.py for the campaign lifecycle: a state written before ``base_branch`` existed
still reads (and records none), as does a cut trial stored as "screened"; and the branch a checkout has checked out."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from bot.core.repo import current_branch
from bot.core.state import Campaign, read_campaign


def test_a_state_written_before_base_branch_reads_with_none_recorded(tmp_path: Path) -> None:
    data = json.loads(Campaign(id="c", recipe_path="recipes/x.yaml", recipe_id="x", budget=1.0).model_dump_json())
    del data["base_branch"]
    path = tmp_path / "state.json"
    path.write_text(json.dumps(data))
    assert read_campaign(path).base_branch == ""
    state = Campaign(id="c", recipe_path="recipes/x.yaml", recipe_id="x", budget=1.0, base_branch="main")
    assert Campaign.model_validate_json(state.model_dump_json()).base_branch == "main"


def test_a_state_whose_cut_trial_was_stored_as_screened_reads_as_cut(tmp_path: Path) -> None:
    """A measurement stored before the cut had its own word says ``"screened"``: it still reads, as ``cut``; a state
    written now says ``"cut"`` and reads back the same."""
    from bot.core.records import Change
    from bot.core.state import Measurement, Step

    cut = Measurement(confidence=0.9, min_gain=0.02, decision="no_gain", cut=True)
    state = Campaign(
        id="c",
        recipe_path="recipes/x.yaml",
        recipe_id="x",
        budget=1.0,
        steps=[Step(n=1, change=Change(lever="compile.enable", after=True), measurement=cut)],
    )
    data = json.loads(state.model_dump_json())
    stored = data["steps"][0]["measurement"]
    assert stored["cut"] is True and "screened" not in stored
    stored["screened"] = stored.pop("cut")
    path = tmp_path / "state.json"
    path.write_text(json.dumps(data))
    m = read_campaign(path).steps[0].measurement
    assert m is not None and m.cut
    assert Campaign.model_validate_json(state.model_dump_json()).steps[0].measurement == cut


def test_a_state_with_device_hours_that_are_not_a_count_is_refused_naming_the_field(tmp_path: Path) -> None:
    """``spent: NaN`` read and was shown as ``nan/1``; a negative budget read too."""
    good = json.loads(Campaign(id="c", recipe_path="recipes/x.yaml", recipe_id="x", budget=1.0).model_dump_json())
    path = tmp_path / "state.json"
    for field, value in (("spent", "NaN"), ("budget", "-1"), ("abandoned", "Infinity")):
        path.write_text(json.dumps(good).replace(f'"{field}": {json.dumps(good[field])}', f'"{field}": {value}'))
        with pytest.raises(ValueError) as caught:
            read_campaign(path)
        assert str(caught.value).startswith(f"{path}: not a campaign state: {field}: "), str(caught.value)


def test_a_run_record_of_a_newer_schema_is_refused(tmp_path: Path) -> None:
    from bot.core.records import SCHEMA_VERSION, RecordFileError, read_record

    path = tmp_path / "record.json"
    path.write_text(json.dumps({"schema_version": SCHEMA_VERSION + 98}))
    with pytest.raises(RecordFileError) as caught:
        read_record(path)
    assert str(caught.value).startswith(f"{path}: not a run record: schema_version: expected less than or equal to ")


IDENTITY = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@localhost",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@localhost",
}


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, env={**os.environ, **IDENTITY})


def test_current_branch_names_the_checked_out_branch_or_none(tmp_path: Path) -> None:
    assert current_branch(tmp_path) is None  # not a git repository
    git(tmp_path, "init", "-q", "-b", "trunk")
    git(tmp_path, "commit", "-q", "--allow-empty", "-m", "first")
    assert current_branch(tmp_path) == "trunk"
    git(tmp_path, "checkout", "-q", "-b", "side")
    assert current_branch(tmp_path) == "side"
