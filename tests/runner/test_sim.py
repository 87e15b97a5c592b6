"""bot/runner/sim.py: a run's noise is seeded by its place in the campaign when the caller says it (a resumed
campaign in a new process draws what an uninterrupted one would), else by the runner's own count."""

from __future__ import annotations

from pathlib import Path

from bot.core.recipe import load_recipe
from bot.runner.sim import SimRunner

RECIPE = Path(__file__).resolve().parents[2] / "bot" / "bench" / "tasks" / "glm-4.5" / "h100x128.yaml"


def test_run_k_of_a_campaign_measures_the_same_in_a_fresh_runner_as_the_runners_own_kth_run() -> None:
    recipe = load_recipe(RECIPE)
    long_lived = SimRunner(seed=1)
    own = [long_lived.run(recipe, out_dir=None).summary.tps_median for _ in range(3)]
    told = [SimRunner(seed=1).run(recipe, out_dir=None, run_index=k).summary.tps_median for k in range(3)]
    assert told == own
    assert len(set(own)) == 3  # the runs differ: the noise is drawn per run


def test_the_wall_clock_cap_and_the_early_stop_speak_of_the_callers_numbers_only() -> None:
    """``attune run --max-wall-s/--stop-below`` and a campaign pass the same caps: the reasons name no campaign."""
    from bot.runner.base import EarlyStop

    recipe = load_recipe(RECIPE)
    full = SimRunner(seed=1).run(recipe, out_dir=None)
    capped = SimRunner(seed=1).run(recipe, out_dir=None, max_wall_s=100.0)
    assert capped.outcome == "timeout"
    assert capped.reason == f"stopped at the wall-clock cap of 100 s (the run needed {full.summary.wall_s:,.0f} s)"
    stopped = SimRunner(seed=1).run(recipe, out_dir=None, early_stop=EarlyStop(below_tps=100_000))
    assert stopped.outcome == "stopped" and stopped.reason.endswith("is below the early-stop threshold of 100,000")
    assert "campaign" not in capped.reason + stopped.reason and "incumbent" not in stopped.reason
