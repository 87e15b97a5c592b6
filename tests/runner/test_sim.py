"""bot/runner/sim.py: a run's noise is seeded by its place in the campaign when the caller says it (a resumed
campaign in a new process draws what an uninterrupted one would), else by the runner's own count."""

from __future__ import annotations

from pathlib import Path

from bot.core.recipe import load_recipe
from bot.runner.sim import SimRunner

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "glm-4.5" / "h100x128.yaml"


def test_run_k_of_a_campaign_measures_the_same_in_a_fresh_runner_as_the_runners_own_kth_run() -> None:
    recipe = load_recipe(RECIPE)
    long_lived = SimRunner(seed=1)
    own = [long_lived.run(recipe, out_dir=None).summary.tps_median for _ in range(3)]
    told = [SimRunner(seed=1).run(recipe, out_dir=None, run_index=k).summary.tps_median for k in range(3)]
    assert told == own
    assert len(set(own)) == 3  # the runs differ: the noise is drawn per run
