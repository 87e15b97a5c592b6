"""Same decisions on either driver: the same simulated heuristic campaign through the one executor with local ports
(MemoryForge, files) and with GitHub's ports (issue form -> ``campaign_requests.handle`` -> trial.yml dispatches
answered by ``github_harness.DispatchAnswerer`` as the workflow's check, run and report jobs would ->
``trial_results.handle``, against the OpenAPI-validated fake) must take the same steps (lever, from, to, outcome,
kept, gain) and end with the same recipe.

Made identical on both sides, explicitly:

- the measurement settings: every ``Campaign`` measurement field from one profile, handed to both (profile
  ``github`` is GitHub's own: early stop below twice the band, every gain re-measured; ``sim`` is what
  ``attune campaign run`` sets for a simulated recipe);
- the campaign id (``<recipe>-i<issue>``), budget (the form takes at most 500 device-hours; the rest is added with
  ``/attune budget +H`` before the first run reports), policy (``heuristic``) and lessons (``lessons/``);
- the simulator's noise: ``SimRunner`` seeds run k of a runner object with ``seed * 100003 + k`` (its own run
  counter). Mode ``shared``: the local executor's one ``SimRunner(seed)`` and one long-lived ``SimRunner(seed)``
  answering every dispatch. Mode ``attune-run`` (slow): what trial.yml really does -- each dispatch is a fresh
  ``attune run`` process, so a fresh ``SimRunner(seed=0)`` every time; the local side gets the same
  (``FreshSimRunner``).

On the round-1 code (two drivers, the GitHub one overriding half of the local one) 8 of these 16 cases failed:
the heuristic read ``read_record(ref.record)`` directly, which sees nothing for GitHub's ``branch:path`` records.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from forge_helpers import require

require("responses", "openapi_core")
from fake_github import FakeGitHub  # noqa: E402
from github_harness import FreshSimRunner, GitHubCampaign  # noqa: E402
from openapi_contract import Contract, spec_missing_reason  # noqa: E402

from bot import campaign as cm  # noqa: E402
from bot.agent.lessons import load_lessons  # noqa: E402
from bot.campaign.measurement_settings import measurement_options  # noqa: E402
from bot.campaign.new_campaign import new_state  # noqa: E402
from bot.core.recipe import load_recipe  # noqa: E402
from bot.drive.local import build_executor  # noqa: E402
from bot.runner.sim import SimRunner  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

# (recipe, budget in device-hours): about bench tuners' budget (14 baseline runs' device-hours), rounded
TASKS = [
    ("recipes/glm-4.5/h100x128.yaml", 1320.0),
    ("recipes/llama3.1-405b/h200x128.yaml", 1230.0),
    ("recipes/minimax-m2/h200x64.yaml", 380.0),
    ("recipes/mixtral-8x22b/h100x64.yaml", 250.0),
]
SEEDS = (0, 1)
LESSONS = load_lessons(ROOT / "lessons")  # the GitHub side loads lessons/ of the working directory: this checkout

# Every measurement field of Campaign, one profile for both drivers. "github": what campaign_requests.handle sets
# (early stop below twice the band; every pair in one job, never the trial against a later run elsewhere); "sim": what
# `attune campaign run` sets for a simulated recipe (bot.campaign.measurement_settings.measurement_options("sim")).
PROFILES: dict[str, dict[str, Any]] = {
    "github": {
        "baseline_runs_wanted": 2,
        "baseline_warmup_runs": 0,
        "band_k": 2.0,
        "band_floor": 0.05,
        "early_stop": True,
        "early_stop_k": 2.0,
        "max_steps": 50,
        "min_gain": 0.02,
        "confidence": 0.9,
        "max_pairs": 4,
        "pair_with_trial": False,
    },
    "sim": {
        "baseline_runs_wanted": 1,
        "baseline_warmup_runs": 0,
        "band_k": 2.0,
        "band_floor": 0.05,
        "early_stop": True,
        "early_stop_k": 1.0,
        "max_steps": 50,
        "min_gain": 0.005,
        "confidence": 0.9,
        "max_pairs": 6,
        "pair_with_trial": True,
        "noise_prior_sd": 0.014,
        "noise_prior_df": 8,
    },
}


def test_the_sim_profile_is_what_attune_campaign_run_sets_for_a_simulated_recipe() -> None:
    sim = measurement_options("sim")
    assert {k: PROFILES["sim"][k] for k in sim if k in PROFILES["sim"]} == {
        k: v for k, v in sim.items() if k in PROFILES["sim"]
    }
    assert {"baseline_runs_wanted", "noise_prior_sd", "min_gain", "max_pairs"} <= set(sim) & set(PROFILES["sim"])


# seed 0 of every task in the default suite; the other seeds are the matrix (slow)
CASES = [
    pytest.param(
        recipe,
        budget,
        seed,
        "shared",
        "github",
        id=f"{Path(recipe).parent.name}-seed{seed}-shared-github",
        marks=() if seed == SEEDS[0] else pytest.mark.slow,
    )
    for recipe, budget in TASKS
    for seed in SEEDS
]
CASES += [
    pytest.param(
        recipe,
        budget,
        0,
        "attune-run",
        "github",
        id=f"{Path(recipe).parent.name}-seed0-attune_run-github",
        marks=pytest.mark.slow,
    )
    for recipe, budget in TASKS
]
CASES += [
    pytest.param(
        recipe, budget, 0, "shared", "sim", id=f"{Path(recipe).parent.name}-seed0-shared-sim", marks=pytest.mark.slow
    )
    for recipe, budget in TASKS
]


@pytest.fixture(scope="module")
def contract() -> Contract:
    reason = spec_missing_reason()
    if reason:
        pytest.skip(reason)
    return Contract()


def trace(state: cm.Campaign) -> dict[str, Any]:
    """What must be the same: each step (lever, from, to, trial outcome, kept, gain to 1e-9) and the final levers."""
    steps = []
    for s in state.steps:
        trial = next((r for r in s.runs if r.kind == "trial"), None)
        steps.append(
            (
                s.change.lever,
                s.change.before,
                s.change.after,
                trial.outcome if trial else "not run",
                s.kept,
                None if s.gain is None else round(s.gain, 9),
            )
        )
    return {"steps": steps, "final_levers": dict(state.incumbent_levers)}


def extras(state: cm.Campaign) -> dict[str, Any]:
    return {
        "baseline_tps": [r.tps for r in state.baseline],
        "band": state.band.band if state.band else None,
        "spent": round(state.spent, 6),
        "finish_reason": state.finish_reason,
        "phase": state.phase,
        "measurement": {k: getattr(state, k) for k in PROFILES["github"]},
    }


def render_diff(local: dict[str, Any], github: dict[str, Any], le: dict[str, Any], ge: dict[str, Any]) -> str:
    lines = ["local driver vs GitHub driver:"]
    n = max(len(local["steps"]), len(github["steps"]))
    first = next(
        (
            i
            for i in range(n)
            if i >= len(local["steps"]) or i >= len(github["steps"]) or local["steps"][i] != github["steps"][i]
        ),
        None,
    )
    for i in range(n):
        a = local["steps"][i] if i < len(local["steps"]) else "-"
        b = github["steps"][i] if i < len(github["steps"]) else "-"
        mark = "  " if a == b else ("=>" if i == first else "!=")
        lines.append(f"{mark} step {i + 1}: local  {a}")
        if a != b:
            lines.append(f"           github {b}")
    changed = {
        k: (local["final_levers"].get(k), github["final_levers"].get(k))
        for k in sorted(set(local["final_levers"]) | set(github["final_levers"]))
        if local["final_levers"].get(k) != github["final_levers"].get(k)
    }
    lines.append(f"final levers differ (local, github): {changed}" if changed else "final levers: identical")
    lines.append(f"finish local : {le['finish_reason']}")
    lines.append(f"finish github: {ge['finish_reason']}")
    lines.append(f"spent local {le['spent']} / github {ge['spent']}")
    return "\n".join(lines)


def task_text(recipe_rel: str) -> str:
    """The benchmark task placed at ``recipe_rel`` (``recipes/<model>/<cluster>.yaml``) in the test's repositories."""
    return (ROOT / "bot" / "bench" / "tasks" / recipe_rel.removeprefix("recipes/")).read_text()


def run_local(
    recipe_rel: str, budget: float, cid: str, seed: int, mode: str, profile: dict[str, Any], work: Path
) -> cm.Campaign:
    repo = work / "local-repo"
    (repo / recipe_rel).parent.mkdir(parents=True)
    (repo / recipe_rel).write_text(task_text(recipe_rel))
    executor = build_executor(
        repo,
        recipe_rel,
        policy="heuristic",
        forge="none",
        runner_options={"seed": seed},
        cache_dir=work / "local-cache",
        lessons=LESSONS,
    )
    if mode == "attune-run":
        executor.runs.runner = FreshSimRunner(seed)
    state = new_state(
        load_recipe(repo / recipe_rel), recipe_rel, budget=budget, policy="heuristic", campaign_id=cid, **profile
    )
    return executor.start(state)


@pytest.mark.parametrize(("recipe_rel", "budget", "seed", "mode", "profile_name"), CASES)
def test_local_and_github_executors_take_the_same_steps(
    contract, tmp_path, recipe_rel, budget, seed, mode, profile_name
) -> None:
    profile = PROFILES[profile_name]
    gh = FakeGitHub(contract).start()
    try:
        answerer = {"mode": "attune-run"} if mode == "attune-run" else {"runner": SimRunner(seed=seed)}
        flow = GitHubCampaign(
            gh, recipe_rel, task_text(recipe_rel), budget, tmp_path / "github", answerer=answerer, measurement=profile
        )
        github = flow.run()
    finally:
        gh.stop()
    gh.assert_contract_kept()

    local = run_local(recipe_rel, budget, github.id, seed, mode, profile, tmp_path)

    le, ge = extras(local), extras(github)
    assert ge["measurement"] == le["measurement"] == {k: profile[k] for k in le["measurement"]}
    assert github.budget == local.budget == budget
    # the same noise on both sides: the baseline runs measured the same (else the harness, not a driver, differs)
    assert ge["baseline_tps"] == le["baseline_tps"], (
        f"baseline runs differ: local {le['baseline_tps']} github {ge['baseline_tps']}"
    )
    assert local.phase == github.phase == "finished"
    lt, gt = trace(local), trace(github)
    assert gt == lt, render_diff(lt, gt, le, ge)
