"""bot/runner/workdir.py: ranks start in the recipe's repository root, with it importable, as ``torchrun`` started
from the user's checkout would: a model module kept in the tuning repository and a relative path in its config work
(one real run), the Slurm batch script ``cd``s there, and a module torchtitan cannot import is the workload's fault."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bot.core.recipe import RecipeError, load_recipe
from bot.core.slurm import SlurmSettings
from bot.runner import check_runnable
from bot.runner.resolve import ResolveError, resolve_recipe
from bot.runner.slurm import batch_script
from bot.runner.workdir import rank_pythonpath, recipe_root

ROOT = Path(__file__).resolve().parents[2]
ATTUNE = Path(sys.executable).with_name("attune")

# the shape of bot/inrank/workloads/llama3_tiny.py, kept in the user's repository; its data loader reads a file named
# by a relative path in the config (as a tokenizer or dataset path is), on the rank
MODULE = '''\
"""A tuning repository's own workload."""
from dataclasses import dataclass
from pathlib import Path

from bot.inrank.workloads.llama3_tiny import SyntheticQADataLoader, llama3_tiny_cpu


class SeedFileLoader(SyntheticQADataLoader):
    @dataclass(kw_only=True, slots=True)
    class Config(SyntheticQADataLoader.Config):
        seed_path: str = ""

    def __init__(self, config, **kw):
        config.data_seed = int(Path(config.seed_path).read_text())  # relative: to the ranks' working directory
        super().__init__(config, **kw)


def tiny_from_repo():
    cfg = llama3_tiny_cpu()
    cfg.dataloader = SeedFileLoader.Config(seed_path="data/seed.txt")
    return cfg
'''


def _git(repo: Path, *argv: str) -> str:
    return subprocess.run(["git", *argv], cwd=repo, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def user_repo(tmp_path: Path) -> Path:
    """A tuning repository: a recipe, its model module (``mymods/tiny.py``) and a data file, under git."""
    repo = tmp_path / "tune"
    (repo / "mymods").mkdir(parents=True)
    (repo / "mymods" / "__init__.py").write_text("")
    (repo / "mymods" / "tiny.py").write_text(MODULE)
    (repo / "data").mkdir()
    (repo / "data" / "seed.txt").write_text("7\n")
    text = (ROOT / "recipes" / "llama3-tiny" / "cpu.yaml").read_text()
    text = text.replace("id: llama3-tiny/cpu", "id: mine/cpu").replace(
        "module: bot.inrank.workloads.llama3_tiny", "module: mymods.tiny"
    )
    text = text.replace("config: llama3_tiny_cpu", "config: tiny_from_repo").replace(
        'OMP_NUM_THREADS: "2"', 'OMP_NUM_THREADS: "1"'
    )
    text = text.replace("  steps: 20\n  warmup_steps: 5\n", "  steps: 3\n  warmup_steps: 1\n")
    assert "mymods.tiny" in text and "tiny_from_repo" in text and "steps: 3" in text
    (repo / "recipes" / "mine").mkdir(parents=True)
    (repo / "recipes" / "mine" / "cpu.yaml").write_text(text)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@localhost", "commit", "-q", "-m", "tune")
    return repo


def test_the_root_is_the_git_repository_holding_the_recipe(
    user_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ATTUNE_REPO", raising=False)
    assert recipe_root(user_repo / "recipes" / "mine" / "cpu.yaml") == user_repo.resolve()
    monkeypatch.chdir(user_repo / "recipes")
    assert recipe_root("mine/cpu.yaml") == user_repo.resolve()  # relative: to the working directory
    loose = tmp_path / "loose"
    (loose / "recipes").mkdir(parents=True)
    (loose / "recipes" / "r.yaml").write_text("x")
    assert recipe_root(loose / "recipes" / "r.yaml") == loose.resolve()  # no git: the folder holding recipes/
    assert (
        recipe_root(None) == recipe_root(user_repo / "nope.yaml") == (user_repo / "recipes").resolve()
    )  # the caller's checkout
    path = rank_pythonpath(user_repo, "/elsewhere").split(os.pathsep)
    assert path[2:] == [str(user_repo.resolve()), "/elsewhere"] and path[0].endswith("_site")


def test_the_in_process_resolution_imports_the_repositorys_module_then_restores_sys_path(user_repo: Path) -> None:
    recipe = load_recipe(user_repo / "recipes" / "mine" / "cpu.yaml")
    before = list(sys.path)
    flat = resolve_recipe(recipe, workdir=user_repo)
    assert flat["dataloader.seed_path"] == "data/seed.txt" and sys.path == before
    check_runnable(recipe, user_repo / "recipes" / "mine" / "cpu.yaml")  # refused before: "cannot import module"


def test_a_module_torchtitan_cannot_import_is_the_workloads_module_not_the_layout(user_repo: Path) -> None:
    path = user_repo / "recipes" / "mine" / "cpu.yaml"
    path.write_text(path.read_text().replace("module: mymods.tiny", "module: mymods.tinier"))
    with pytest.raises(RecipeError) as info:
        check_runnable(load_recipe(path), path)
    line = str(info.value)
    assert line.startswith(
        f"{path}:7: workload.module: torchtitan cannot import 'mymods.tinier' from the repository root "
        f"{user_repo.resolve()}"
    ), line
    assert "No module named 'mymods.tinier'" in line and "layout" not in line and "\n" not in line
    path.write_text(
        path.read_text()
        .replace("module: mymods.tinier", "module: mymods.tiny")
        .replace("tiny_from_repo", "tiny_from_nowhere")
    )
    with pytest.raises(ResolveError) as err:
        resolve_recipe(load_recipe(path), workdir=user_repo)
    assert err.value.field == ("workload", "config") and "tiny_from_nowhere" in str(err.value)


def test_the_slurm_batch_script_starts_torchrun_in_the_repository_root(user_repo: Path, tmp_path: Path) -> None:
    recipe = load_recipe(user_repo / "recipes" / "mine" / "cpu.yaml").model_copy(deep=True)
    recipe.cluster.launcher = "slurm"
    body, _ = batch_script(recipe, steps=3, out_dir=tmp_path / "run", workdir=user_repo)
    lines = body.splitlines()
    cd = lines.index(f"cd {user_repo.resolve()}")
    srun = next(i for i, line in enumerate(lines) if line.startswith("srun "))
    export = next(line for line in lines if line.startswith("export PYTHONPATH="))
    assert cd == srun - 1, body  # after the site's prologue and every export: srun's tasks start there
    assert f"{os.pathsep}{user_repo.resolve()}" in export and export.endswith("${PYTHONPATH:+:$PYTHONPATH}")
    assert f"--dump-folder {tmp_path / 'run' / 'titan'}" in lines[srun]  # the run folder keeps the logs, absolute
    recipe.cluster.slurm = SlurmSettings(container_image="nvcr.io/x")
    body, _ = batch_script(recipe, steps=3, out_dir=tmp_path / "run", workdir=user_repo)
    assert (
        f"--container-workdir={user_repo.resolve()}" in body and f"{user_repo.resolve()}:{user_repo.resolve()}" in body
    )


@pytest.mark.torchtitan
def test_attune_run_trains_a_module_kept_in_the_users_repository(user_repo: Path, tmp_path: Path) -> None:
    """``attune run`` from another folder: torchtitan imports ``mymods.tiny`` from the repository and the rank reads
    ``data/seed.txt`` relative to it; the run folder holds the logs and records, the repository gains no file."""
    out = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ATTUNE_REPO")}
    proc = subprocess.run(
        [str(ATTUNE), "run", str(user_repo / "recipes" / "mine" / "cpu.yaml"), "--json", "--out", str(out)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    record = json.loads((out / "record.json").read_text())
    assert record["outcome"] == "ok" and [s["step"] for s in record["steps"]] == [1, 2, 3], record.get("reason")
    assert (out / "train.log").is_file() and (out / "titan").is_dir()
    assert _git(user_repo, "status", "--porcelain", "--ignored") == ""
