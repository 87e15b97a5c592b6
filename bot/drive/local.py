"""Running a campaign on this machine: the local ports wired into the executor, and the local finish.

``attune campaign run`` works on the git repository holding the recipe (the local forge makes branches there);
``attune demo`` does the same in a scratch clone of the working directory's repository with the CPU recipe. At the
end the engine commits the campaign summary and baseline records on the base branch, writes proposed lessons from
what it measured, and regenerates ``leaderboard.md``.
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from bot import campaign as cm
from bot.agent import get_policy
from bot.agent.lessons import Lesson, load_lessons, propose_lessons, write_proposed
from bot.agent.space import make_space
from bot.campaign.gate_calls import config_gate, convergence_gate, make_calibrator
from bot.campaign.leaderboard import regenerate
from bot.campaign.report import render_campaign_summary
from bot.core.recipe import load_recipe
from bot.core.repo import Repo
from bot.drive.executor import Executor, parse_recipe_text
from bot.drive.local_ports import FileRecordStore, FileStateStore, LocalRunPort
from bot.runner import get_runner
from bot.runner.workdir import importable

if TYPE_CHECKING:
    from bot.forge.base import Forge
    from bot.forge.local import LocalForge

FORGES = ("local", "none")


def finish_local(state: cm.Campaign, executor: Executor) -> None:
    """Commit the summary, baseline records and proposed lessons on the base branch; refresh the leaderboard."""
    forge = cast("LocalForge", executor.forge)  # the hook of the local forge only (build_executor)
    files: dict[str, str] = {f"campaigns/{state.id}/summary.md": render_campaign_summary(state)}
    for r in state.baseline:
        text = executor.records.read_text(r.record)
        if text is not None:
            files[f"campaigns/{state.id}/baseline-{r.attempt}.json"] = text
    hardware = parse_recipe_text(executor.base_text(state), state.recipe_path).cluster.hardware
    measurements = []
    for s in state.steps:
        trial = next((r for r in s.runs if r.kind == "trial"), None)
        if trial and s.gain is not None:
            measurements.append(
                {
                    "lever": s.change.lever,
                    "from": s.change.before,
                    "to": s.change.after,
                    "gain": s.gain,
                    "kept": s.kept,
                    "record": f"campaigns/{state.id}/step-{s.n}/trial.json",
                    "hardware": hardware,
                    "model": state.recipe_id.split("/")[0],
                    "simulated": trial.simulated,
                }
            )
    proposed = propose_lessons(measurements, origin=state.id)
    if proposed:
        tmp = Path(tempfile.mkdtemp()) / "proposed.yaml"
        write_proposed(proposed, tmp, merge=False)
        files[f"lessons/proposed/{state.id}.yaml"] = tmp.read_text()
    _, board = regenerate(forge.repo)  # first: a results/ file that is not a run record stops it before any commit
    forge.commit_on_base(files, f"attune: campaign {state.id} finished ({state.gain:+.1%})")
    forge.commit_on_base({"leaderboard.md": board}, "attune: refresh leaderboard.md")


def build_executor(
    repo: Path,
    recipe_rel: str,
    *,
    policy: str,
    forge: str = "local",
    on_event: Callable[[cm.Campaign, Any, Any], None] | None = None,
    runner_options: dict[str, Any] | None = None,
    seed: int = 0,
    cache_dir: Path | None = None,
    progress: Any = None,
    lessons: list[Lesson] | None = None,
) -> Executor:
    """The executor with local ports for the recipe ``recipe_rel`` of ``repo``; ``cache_dir`` holds the gate's
    calibration runs (default ``<repo>/.attune``). Lessons: ATTUNE's packaged catalog with the repository's ``lessons/``."""
    recipe = load_recipe(repo / recipe_rel)
    if forge == "local":
        from bot.forge.local import LocalForge

        forge_obj: Forge = LocalForge(repo)
    elif forge == "none":
        from bot.forge.memory import MemoryForge

        forge_obj = MemoryForge({recipe_rel: (repo / recipe_rel).read_text()})
    else:
        raise ValueError(
            f"unknown forge {forge!r}; expected {' or '.join(FORGES)} (GitHub runs through `attune github handle`)"
        )
    options = {"seed": seed} if policy in ("random", "tpe", "gp") else {}
    work = Repo(repo).work
    records = FileRecordStore(work / "campaigns")
    return Executor(
        forge=forge_obj,
        states=FileStateStore(work / "campaigns"),
        records=records,
        runs=LocalRunPort(
            get_runner(
                recipe.cluster.launcher, **_with_seed(recipe.cluster.launcher, runner_options, cache_dir or work, repo)
            ),
            records,
            calibrate=make_calibrator(cache_dir or work, progress=progress, workdir=repo),
        ),
        policy=get_policy(policy, **options),
        lessons=load_lessons(Repo(repo).lessons) if lessons is None else lessons,
        space_fn=make_space,
        gate_config=_resolved_in(repo),
        gate_convergence=convergence_gate,
        on_event=on_event,
        finish_hook=finish_local if forge == "local" else None,
    )


def _with_seed(launcher: str, options: dict[str, Any] | None, cache: Path, repo: Path) -> dict[str, Any]:
    """Runner options with the campaign's seed-checkpoint cache: every run of a campaign (local or under Slurm) loads
    its objective's seed checkpoint (``bot/runner/seed.py``), the same one the gate's calibration runs load; and its
    ranks start in the repository, importable (``bot/runner/workdir.py``), wherever the campaign was started from."""
    out = dict(options or {})
    if launcher in ("local", "slurm"):
        out.setdefault("seed_cache", cache)
        out.setdefault("workdir", repo)
    return out


def _resolved_in(repo: Path) -> Any:
    """The gate's config check, resolving both recipes with ``repo`` importable (a model module kept there)."""

    def gate(baseline: Any, candidate: Any) -> Any:
        with importable(repo):
            return config_gate(baseline, candidate)

    return gate


def scratch_clone(src: Path) -> Path:
    """A throwaway clone of ``src`` (the demo tunes there, leaving ``src`` untouched)."""
    dest = Path(tempfile.mkdtemp(prefix="attune-demo-")) / "repo"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(src), str(dest)], check=True)
    for key, val in (("user.name", "ATTUNE demo"), ("user.email", "attune@localhost")):
        subprocess.run(["git", "config", key, val], cwd=dest, check=True)
    return dest
