"""bot/github/github_ports.py: the campaign state comment (the GitHub state store): dashboard on top, state below, compressed when large."""

from __future__ import annotations

import pytest

from bot import campaign as cm
from bot.core.records import Change
from bot.forge.github import GitHubForgeError
from bot.github.github_ports import INLINE_STATE_LIMIT, Stored, parse_state, render_state, run_key


def stored(steps: int, why: str = "because") -> Stored:
    c = cm.Campaign(id="c1", recipe_path="recipes/x/y.yaml", recipe_id="x/y", budget=4.0)
    c.steps = [
        cm.Step(
            n=i,
            change=Change(lever="training.gc_freq", before=50, after=i, why=why),
            state="closed",
            branch=f"attune/c1/{i}-training-gc_freq",
            close_reason=why,
        )
        for i in range(1, steps + 1)
    ]
    return Stored(issue=7, runner_labels=["gpu"], campaign=c, dispatched="step-3-trial", heads={3: "a" * 40})


def test_the_state_round_trips_inline_under_a_dashboard() -> None:
    s = stored(3)
    body = render_state(s)
    assert body.startswith("## ATTUNE campaign c1") and "| training.gc_freq" in body and "```json\n" in body
    assert parse_state(body) == s


def test_a_large_state_is_stored_compressed() -> None:
    s = stored(60, why="a long rationale " * 30)
    assert len(s.model_dump_json()) > INLINE_STATE_LIMIT
    body = render_state(s)
    assert "```attune-state-zlib-base64\n" in body and len(body) < 65_536
    assert parse_state(body) == s


def test_a_state_too_large_even_compressed_is_a_clear_error() -> None:
    import os

    s = stored(2, why=os.urandom(60_000).hex())  # incompressible
    with pytest.raises(GitHubForgeError, match="campaign state of c1 is"):
        render_state(s)


def test_run_keys() -> None:
    assert [
        run_key(a)
        for a in (cm.RunBaseline(attempt=2), cm.RunTrial(n=3), cm.MeasurePair(n=3, k=2, order="BA"), cm.Calibrate())
    ] == ["baseline-2", "step-3-trial", "step-3-pair2", "calibrate"]
