"""Running a campaign locally: wire forge, runner, policy, lessons and gate into the driver.

``attune campaign run`` works on the git repository holding the recipe (the local forge makes
branches there); ``attune demo`` does the same in a scratch clone of this repository with the
CPU recipe. At the end the engine commits the campaign summary and baseline records on the base
branch, writes proposed lessons from what it measured, and regenerates ``leaderboard.md``.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from bot import campaign as cm
from bot.agent.policy import LeverSpace, get_policy
from bot.agent.space import search_space
from bot.drive import Driver
from bot.gating import config_gate, convergence_gate, make_calibrator
from bot.leaderboard import regenerate
from bot.lessons import load_lessons, propose_lessons, write_proposed
from bot.recipe import Recipe, load_recipe
from bot.report import render_campaign_summary
from bot.runner.base import get_runner

REPO_ROOT = Path(__file__).resolve().parents[1]


def new_campaign_id(recipe: Recipe) -> str:
    return f"{recipe.name.replace('/', '-')}-{time.strftime('%Y%m%d-%H%M%S')}"


def make_space(recipe: Recipe) -> LeverSpace:
    facts = None
    if recipe.workload.model:
        from bot import levers as catalog
        from bot.sim.zoo import get_model

        try:
            m = get_model(recipe.workload.model)
            facts = catalog.ModelFacts(n_heads=m.n_heads, n_kv_heads=m.n_kv_heads, n_layers=m.n_layers, num_experts=m.n_experts or None)
        except (KeyError, ValueError):
            facts = None
    return LeverSpace(recipe=recipe, values=search_space(recipe), model=facts)


def finish_local(state: cm.Campaign, driver: Driver) -> None:
    """Commit the summary, baseline records and proposed lessons on the base branch; refresh the leaderboard."""
    forge = driver.forge
    files: dict[str, str] = {f"campaigns/{state.id}/summary.md": render_campaign_summary(state)}
    for r in state.baseline:
        files[f"campaigns/{state.id}/baseline-{r.attempt}.json"] = Path(r.record).read_text()
    measurements = []
    for s in state.steps:
        trial = next((r for r in s.runs if r.kind == "trial"), None)
        if trial and s.gain is not None:
            measurements.append({"lever": s.change.lever, "from": s.change.before, "to": s.change.after, "gain": s.gain, "kept": s.kept,
                                 "record": f"campaigns/{state.id}/step-{s.n}/trial.json", "hardware": driver.space_fn(load_recipe_text(driver)).recipe.cluster.hardware,
                                 "model": state.recipe_id.split("/")[0]})
    proposed = propose_lessons(measurements)
    if proposed and hasattr(forge, "commit_on_base"):
        tmp = Path(tempfile.mkdtemp()) / "proposed.yaml"
        write_proposed(proposed, tmp, merge=False)
        files[f"lessons/proposed/{state.id}.yaml"] = tmp.read_text()
    if hasattr(forge, "commit_on_base"):
        forge.commit_on_base(files, f"attune: campaign {state.id} finished ({state.gain:+.1%})")
        path, text = regenerate(forge.repo)
        forge.commit_on_base({"leaderboard.md": text}, "attune: refresh leaderboard.md")


def load_recipe_text(driver: Driver) -> Recipe:
    from bot.recipe import parse_recipe_text

    return parse_recipe_text(driver.base_text(), driver.recipe_path)


def build_driver(repo: Path, recipe_rel: str, *, policy: str, forge: str = "local", on_event=None, runner_options: dict[str, Any] | None = None,
                 seed: int = 0, crash_after: int | None = None, cache_dir: Path | None = None, progress: Any = None) -> Driver:
    """The local driver; ``cache_dir`` holds the gate's calibration runs (default ``<repo>/.attune``)."""
    recipe = load_recipe(repo / recipe_rel)
    if forge == "local":
        from bot.forge.local import LocalForge

        forge_obj: Any = LocalForge(repo)
    elif forge == "none":
        from bot.forge.memory import MemoryForge

        forge_obj = MemoryForge({recipe_rel: (repo / recipe_rel).read_text()})
    else:
        raise ValueError(f"unknown forge {forge!r}; expected local or none (GitHub runs through `attune github handle`)")
    options = {"seed": seed} if policy in ("random", "tpe", "gp") else {}
    return Driver(
        forge=forge_obj,
        runner=get_runner(recipe.cluster.launcher, **(runner_options or {})),
        policy=get_policy(policy, **options),
        lessons=load_lessons(),
        recipe_path=recipe_rel,
        work_dir=repo / ".attune" / "campaigns",
        space_fn=make_space,
        gate_config=config_gate,
        gate_convergence=convergence_gate,
        calibrate=make_calibrator(cache_dir or repo / ".attune", progress=progress),
        on_event=on_event,
        finish_hook=finish_local if forge == "local" else None,
        crash_after=crash_after,
        # a real machine's speed drifts (other processes, clocks): a winner's re-measure is an A/B pair with the incumbent
        ab_confirm=recipe.cluster.launcher != "sim",
    )


DECISIVE_K = 3.0  # a gain above 3x the noise band (6x the baseline runs' spread, or 3x its floor) is not run-to-run noise


def measurement_options(launcher: str) -> dict[str, Any]:
    """How a campaign measures on this kind of machine (``Campaign`` fields).

    ``sim``: the simulated cluster does not drift between runs, so a decisive gain merges without a re-measure
    and a trial that measures clearly slower than the incumbent stops early. ``local`` (this machine): its speed
    drifts with other processes and clocks, so one warm-up run precedes the measured baseline, every gain is
    re-measured (as an A/B pair, see ``build_driver``) and every trial runs to its end.
    """
    if launcher == "sim":
        return {"decisive_k": DECISIVE_K, "early_stop": True}
    if launcher == "local":
        return {"baseline_warmup_runs": 1}
    return {}


def new_state(recipe: Recipe, recipe_rel: str, *, budget: float, policy: str, campaign_id: str | None = None, **kw: Any) -> cm.Campaign:
    return cm.Campaign(
        id=campaign_id or new_campaign_id(recipe), recipe_path=recipe_rel, recipe_id=recipe.name, policy=policy,
        devices=recipe.devices, usd_per_device_hour=recipe.cluster.usd_per_device_hour, budget=budget,
        baseline_levers=dict(recipe.levers), incumbent_levers=dict(recipe.levers), **kw,
    )


def repo_of(path: Path) -> Path:
    out = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=path.parent, capture_output=True, text=True)
    if out.returncode != 0:
        raise ValueError(f"{path}: not inside a git repository (the local forge makes branches there)")
    return Path(out.stdout.strip())


def scratch_clone(src: Path = REPO_ROOT) -> Path:
    dest = Path(tempfile.mkdtemp(prefix="attune-demo-")) / "repo"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(src), str(dest)], check=True)
    for key, val in (("user.name", "ATTUNE demo"), ("user.email", "attune@localhost")):
        subprocess.run(["git", "config", key, val], cwd=dest, check=True)
    return dest


def summary_json(state: cm.Campaign, repo: Path) -> dict[str, Any]:
    return {
        "campaign": state.id, "repo": str(repo), "recipe": state.recipe_path, "policy": state.policy,
        "baseline_tps": state.baseline_tps, "final_tps": state.incumbent_tps, "gain": state.gain,
        "noise_band": state.band.band if state.band else None, "budget": state.budget, "device_hours": state.spent,
        "payback_hours": state.payback_hours(), "finish_reason": state.finish_reason,
        "steps": [
            {"n": s.n, "lever": s.change.lever, "from": s.change.before, "to": s.change.after,
             "outcome": next((r.outcome for r in s.runs if r.kind == "trial"), "not run"),
             "gate": (s.verdict or s.config_verdict).verdict if (s.verdict or s.config_verdict) else None,
             "gain": s.gain, "kept": s.kept, "branch": s.branch, "policy": s.change.policy}
            for s in state.steps
        ],
    }


def dumps(obj: Any) -> str:
    return json.dumps(obj, default=str)
