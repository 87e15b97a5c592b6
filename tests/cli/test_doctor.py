"""``attune doctor``: exit 0 here for the demo's recipe; in a deliberately broken environment (no git or sinfo on PATH,
a repository without lessons/ (not a miss: the catalog ships with ATTUNE), a Slurm recipe, a broken torch and an old torchtitan shadowing the real ones, a GitHub
workflow without a token) exit 1 with every miss named and a fix for each; the checks themselves on made-up facts
(GPU machines: no driver, too few devices, a CPU build of torch; the job permissions of the real workflow files)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bot.cli.doctor import BOT_PERMISSIONS, Facts, _job_permissions, run_checks
from bot.runner import LAUNCHERS

REPO = Path(__file__).resolve().parents[2]
ATTUNE = Path(sys.executable).with_name("attune")
GITHUB_ENV = (
    "GITHUB_ACTIONS",
    "GITHUB_TOKEN",
    "ATTUNE_GITHUB_TOKEN",
    "GITHUB_REPOSITORY",
    "GITHUB_WORKFLOW_REF",
    "GITHUB_JOB",
    "GITHUB_WORKSPACE",
)


def doctor(*args: str, cwd: Path, env: dict[str, str]) -> tuple[int, dict]:
    proc = subprocess.run(
        [str(ATTUNE), "doctor", *args, "--json"], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout.strip().splitlines()[-1])


def by_name(result: dict) -> dict[str, dict]:
    return {c["name"]: c for c in result["checks"]}


def test_doctor_passes_for_the_demo_recipe_in_this_checkout() -> None:
    env = {k: v for k, v in os.environ.items() if k not in GITHUB_ENV}  # not the bot's checks, even when CI runs this
    rc, result = doctor(cwd=REPO, env=env)
    assert rc == 0 and result["ok"], result
    checks = by_name(result)
    assert {
        name: checks[name]["status"]
        for name in ("python", "git", "repository", "recipe", "lessons", "torch", "torchtitan")
    } == dict.fromkeys(("python", "git", "repository", "recipe", "lessons", "torch", "torchtitan"), "ok")
    assert result["recipe"] == str(REPO / "recipes" / "llama3-tiny" / "cpu.yaml")


def test_doctor_names_every_miss_in_a_deliberately_broken_environment(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "recipes" / "t").mkdir(parents=True)  # a repository of recipes without lessons/
    text = (REPO / "recipes" / "llama3-tiny" / "cpu.yaml").read_text()
    assert "  launcher: local\n" in text
    (repo / "recipes" / "t" / "slurm.yaml").write_text(text.replace("  launcher: local\n", "  launcher: slurm\n"))
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    shadow = tmp_path / "shadow"  # importable before the real packages: a broken torch, an old torchtitan
    (shadow / "torch").mkdir(parents=True)
    (shadow / "torch" / "__init__.py").write_text(
        'raise ImportError("libtorch_cpu.so: cannot open shared object file")\n'
    )
    (shadow / "torchtitan").mkdir()
    (shadow / "torchtitan" / "__init__.py").write_text('__version__ = "0.2.1"\n')
    (tmp_path / "bin").mkdir()  # PATH: nothing on it (no git, no sinfo)
    env = {k: v for k, v in os.environ.items() if k not in GITHUB_ENV}
    env.update(
        PATH=str(tmp_path / "bin"),
        GITHUB_ACTIONS="true",
        GITHUB_REPOSITORY="octo/tune",
        PYTHONPATH=os.pathsep.join([str(shadow), *filter(None, [os.environ.get("PYTHONPATH")])]),
    )
    rc, result = doctor("recipes/t/slurm.yaml", cwd=repo, env=env)
    assert rc == 1 and not result["ok"], result
    checks = by_name(result)
    misses = {name for name, c in checks.items() if c["status"] == "miss"}
    want = {"git", "repository", "torch", "torchtitan", "slurm", "github token"} | (
        {"launcher"} if "slurm" not in LAUNCHERS else set()
    )
    assert misses == want, {n: checks[n] for n in misses ^ want}
    assert checks["git"]["found"] == "not on PATH"
    # no lessons/ of its own: ATTUNE's packaged catalog is what its campaigns read (nothing to copy)
    assert checks["lessons"]["status"] == "ok" and checks["lessons"]["found"].endswith("lessons (ATTUNE's catalog)"), (
        checks["lessons"]
    )
    assert "libtorch_cpu.so" in checks["torch"]["found"]
    assert checks["torchtitan"]["found"] == "0.2.1 (ATTUNE needs 0.3.0)"
    assert checks["slurm"]["found"] == "sinfo not on PATH"
    assert "GITHUB_TOKEN" in checks["github token"]["found"]
    assert all(checks[name]["fix"] for name in misses)  # each says what to do
    assert result["verdict"].startswith("recipes/t/slurm.yaml cannot run here yet") and all(
        m in result["verdict"] for m in misses
    )


def test_a_recipe_that_does_not_exist_is_a_one_line_usage_error(tmp_path: Path) -> None:
    proc = subprocess.run(
        [str(ATTUNE), "doctor", "nope.yaml"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2 and proc.stderr.strip().startswith("attune: nope.yaml: no such recipe (a path"), (
        proc.stderr
    )


def test_a_recipe_named_as_the_demo_takes_it_is_found_under_recipes() -> None:
    """``attune demo --recipe moe-tiny/cpu.yaml`` names it so; doctor said ``no such recipe`` to the same words."""
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [str(ATTUNE), "doctor", "moe-tiny/cpu.yaml", "--json"], cwd=root, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode in (0, 1) and "no such recipe" not in proc.stderr, proc.stderr
    assert json.loads(proc.stdout)["recipe"].endswith("recipes/moe-tiny/cpu.yaml")


def test_a_simulated_recipe_on_hardware_the_simulator_does_not_know_fails_the_recipe_check(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "recipes" / "t").mkdir(parents=True)
    text = (REPO / "bot" / "bench" / "tasks" / "llama3.1-8b" / "h100x8.yaml").read_text()
    assert "  hardware: h100-sxm-80gb\n" in text
    (repo / "recipes" / "t" / "sim.yaml").write_text(text.replace("  hardware: h100-sxm-80gb\n", "  hardware: tpu9\n"))
    line = text.splitlines().index("  hardware: h100-sxm-80gb") + 1
    env = {k: v for k, v in os.environ.items() if k not in GITHUB_ENV}
    rc, result = doctor("recipes/t/sim.yaml", cwd=repo, env=env)
    assert rc == 1 and not result["ok"], result
    recipe = by_name(result)["recipe"]
    assert recipe["status"] == "miss" and recipe["fix"], recipe
    assert recipe["found"].startswith(
        f"{repo / 'recipes' / 't' / 'sim.yaml'}:{line}: cluster.hardware: 'tpu9' is unknown to the "
        "simulator; known: b200, cpu, "
    ), recipe
    assert (
        "recipe" in result["verdict"].rsplit("(", 1)[-1]
    )  # among the misses named (this folder has no git or lessons/ either)


GPU = dict(
    python="3.11.7",
    recipe_arg="r.yaml",
    recipe_path="/r.yaml",
    launcher="local",
    hardware="h100-sxm-80gb",
    devices_per_node=8,
    launchers=["local", "sim"],
    repo_root="/r",
    data_root="/r",
    lessons=37,
    git="git version 2.43",
    git_identity="a <b>",
    torch_version="2.9.0+cu128",
    torch_cuda="12.8",
    cuda_devices=["NVIDIA H100 80GB HBM3"] * 8,
    driver="570.86",
    torchtitan_version="0.3.0",
    triton_version="3.5.0",
)


def statuses(**changes) -> dict[str, str]:
    return {c.name: c.status for c in run_checks(Facts(**{**GPU, **changes}))}


def test_a_gpu_recipe_needs_a_cuda_torch_a_driver_every_device_and_triton() -> None:
    assert "miss" not in statuses().values() and statuses()["device"] == "ok" and statuses()["triton"] == "ok"
    assert statuses(driver=None)["device"] == "miss"
    assert statuses(cuda_devices=["NVIDIA H100 80GB HBM3"] * 4)["device"] == "miss"
    assert statuses(torch_cuda=None, torch_version="2.13.0+cpu")["torch"] == "miss"
    assert (
        statuses(triton_version=None, triton_error="ModuleNotFoundError: No module named 'triton'")["triton"] == "miss"
    )
    assert statuses(python="3.10.12")["python"] == "miss"
    # the simulator needs none of it
    sim = statuses(
        launcher="sim", torch_version=None, torchtitan_version=None, triton_version=None, driver=None, cuda_devices=[]
    )
    assert "miss" not in sim.values() and sim["torch"] == sim["torchtitan"] == sim["triton"] == "skip"
    # a Slurm job's GPUs are on its nodes; a login node needs a controller that answers
    slurm = statuses(
        launcher="slurm",
        launchers=["local", "sim", "slurm"],
        driver=None,
        sinfo="slurm 23.11.4",
        sinfo_partitions=None,
        sinfo_error="Could not establish a configuration source",
    )
    assert slurm["device"] == "skip" and slurm["slurm"] == "miss"


@pytest.mark.parametrize(
    ("workflow", "job", "want"),
    [(".github/workflows/campaign.yml", "handle", "ok"), (".github/workflows/ci.yml", "test", "miss")],
)
def test_the_bots_token_permissions_are_read_from_the_running_workflow_job(workflow: str, job: str, want: str) -> None:
    env = {"GITHUB_WORKFLOW_REF": f"octo/tune/{workflow}@refs/heads/main", "GITHUB_JOB": job}
    path, got_job, perms, error = _job_permissions(REPO, env)
    assert (path, got_job, error) == (workflow, job, "") and perms is not None
    facts = Facts(
        **{
            **GPU,
            "github": True,
            "github_token": "GITHUB_TOKEN",
            "github_repository": "octo/tune",
            "workflow": path,
            "job": job,
            "job_permissions": perms,
        }
    )
    check = {c.name: c for c in run_checks(facts)}["github permissions"]
    assert check.status == want, check
    if want == "miss":
        assert all(f"{k}: {v}" in check.found for k, v in BOT_PERMISSIONS.items())
    app = {c.name: c.status for c in run_checks(facts.model_copy(update={"github_token": "ATTUNE_GITHUB_TOKEN"}))}
    assert app["github permissions"] == "skip"  # an App token's permissions are the installation's


def test_the_lessons_check_never_asks_to_copy_the_catalog() -> None:
    """The catalog ships with ATTUNE: a repository's own lessons/ is counted, and only a broken lessons file is a miss."""
    checks = {c.name: c for c in run_checks(Facts(**{**GPU, "lessons": 40, "own_lessons": 3}))}
    assert (
        checks["lessons"].status == "ok"
        and checks["lessons"].found == "40 lessons (ATTUNE's catalog, 3 of them from /r/lessons)"
    )
    broken = {
        c.name: c
        for c in run_checks(Facts(**{**GPU, "lessons": None, "lessons_error": "/r/lessons/x.yaml:2: not UTF-8 text"}))
    }
    assert broken["lessons"].status == "miss" and "copy" not in (broken["lessons"].fix or "")
