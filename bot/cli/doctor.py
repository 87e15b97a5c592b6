"""``attune doctor [RECIPE]``: whether RECIPE can run here, and for each thing missing, what to do about it.

Without RECIPE it checks what ``attune demo`` needs: the CPU recipe of the ATTUNE checkout at or above the working
directory. The environment is read once, at the edge (:func:`gather`: imports, PATH, git, files, ``sinfo``, the
workflow's environment), into :class:`Facts`; every check is a pure function of those facts answering a
:class:`Check` (``ok``, ``miss``, ``warn`` or ``skip``), so each can be tested on made-up facts. Exit 0 only when
no check misses: the recipe can run. Exit 1 names every miss; exit 2 is a bad argument (no such recipe file).

What is needed depends on the recipe: first, one its launcher can run at all (:func:`bot.runner.check_runnable`:
hardware and a model the simulator's zoo knows, one node for ``local``; else the recipe check misses); the simulator
(``launcher: sim``) needs no torch; ``local`` needs torch, torchtitan at the version ATTUNE pins and, on a GPU, a
CUDA build of torch that sees the recipe's devices through a driver, and triton (torch.compile's GPU code
generator); ``slurm`` needs ``sinfo`` to reach a controller. A
campaign on your own repository commits there, so git needs an identity. Inside a GitHub Actions workflow
(``GITHUB_ACTIONS=true``, or ``--github``) the checks are what ``attune github handle`` needs: a token and the job
permissions that ``.github/workflows/campaign.yml`` grants its ``handle`` job.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.metadata
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from bot.cli.common import EXIT_OK, EXIT_REJECT, UsageError, emit_json

DEMO_RECIPE = "recipes/llama3-tiny/cpu.yaml"
MIN_PYTHON = (3, 11)  # pyproject.toml: requires-python = ">=3.11"
TORCHTITAN_PIN = "torchtitan==0.3.0"  # pyproject.toml's pin, when the installed attune's metadata cannot be read
CPU_TORCH = "2.13."  # the CPU wheel ./dev installs (torch==2.13.0); the CPU layer (bot/inrank/cpu_compat.py) targets it
# the job permissions `attune github handle` uses (.github/workflows/campaign.yml, job `handle`)
BOT_PERMISSIONS = {"contents": "write", "pull-requests": "write", "issues": "write", "actions": "write"}

Status = Literal["ok", "miss", "warn", "skip"]


class Check(BaseModel):
    """One thing a run needs: found or not, and what to do when not."""

    name: str
    status: Status
    found: str
    fix: str = ""


class Facts(BaseModel):
    """Everything the checks read, gathered once (:func:`gather`)."""

    python: str  # "3.11.7"
    recipe_arg: str | None = None  # the RECIPE argument (None: the demo's recipe)
    recipe_path: str | None = None
    recipe_error: str = ""
    launcher: str = ""
    hardware: str = ""
    devices_per_node: int = 1
    launchers: list[str] = Field(default_factory=list)  # the launchers this ATTUNE has
    repo_root: str | None = None  # the git work tree a campaign makes its branches in
    repo_error: str = ""
    data_root: str | None = (
        None  # where recipes/ and lessons/ are read (the repository, else the folder holding recipes/)
    )
    lessons: int | None = (
        None  # lessons a campaign loads: ATTUNE's packaged catalog with lessons/ there (None: not loaded)
    )
    own_lessons: int = 0  # of which the repository's own lessons/ holds (additions and overrides)
    lessons_error: str = ""
    git: str | None = None  # `git --version`, or None when git is not on PATH
    git_identity: str | None = None  # "name <email>" configured for the recipe's repository
    torch_version: str | None = None
    torch_error: str = ""
    torch_cuda: str | None = None  # the CUDA version torch was built with (None: a CPU build)
    cuda_devices: list[str] = Field(default_factory=list)
    driver: str | None = None  # NVIDIA driver version from nvidia-smi
    torchtitan_version: str | None = None
    torchtitan_error: str = ""
    torchtitan_pin: str = TORCHTITAN_PIN
    triton_version: str | None = None
    triton_error: str = ""
    sinfo: str | None = None  # `sinfo --version`, or None when sinfo is not on PATH
    sinfo_partitions: str | None = None
    sinfo_error: str = ""
    github: bool = False  # check what the bot needs in a GitHub Actions workflow
    github_token: str | None = None  # the variable that holds a token (ATTUNE_GITHUB_TOKEN or GITHUB_TOKEN)
    github_repository: str = ""
    workflow: str = ""  # .github/workflows/<file> of the running workflow
    job: str = ""
    job_permissions: dict[str, str] | None = None  # the job's (or the workflow's) `permissions:`, when readable
    permissions_error: str = ""


# ----------------------------------------------------------------------------- what the recipe needs
def _real(f: Facts) -> bool:
    return f.launcher in ("local", "slurm")


def _gpu(f: Facts) -> bool:
    return _real(f) and f.hardware != "cpu"


# ----------------------------------------------------------------------------- the checks (pure)
def check_python(f: Facts) -> Check:
    have = tuple(int(x) for x in f.python.split(".")[:2])
    need = ".".join(map(str, MIN_PYTHON))
    if have >= MIN_PYTHON:
        return Check(name="python", status="ok", found=f.python)
    return Check(
        name="python",
        status="miss",
        found=f.python,
        fix=f"ATTUNE needs Python {need} or newer: `PYTHON=python{need} ./dev setup`",
    )


def check_git(f: Facts) -> Check:
    if f.git:
        return Check(name="git", status="ok", found=f.git)
    return Check(
        name="git",
        status="miss",
        found="not on PATH",
        fix="install git (`apt-get install git`, `brew install git`): campaigns make their steps as git branches",
    )


def check_git_identity(f: Facts) -> Check:
    if f.recipe_arg is None:
        return Check(
            name="git identity", status="skip", found="the demo commits in a scratch clone with its own identity"
        )
    if f.git is None or f.repo_root is None:
        return Check(name="git identity", status="skip", found="no repository to check")
    if f.git_identity:
        return Check(name="git identity", status="ok", found=f.git_identity)
    return Check(
        name="git identity",
        status="miss",
        found=f"no user.name/user.email for {f.repo_root}",
        fix='`git config user.name "..."` and `git config user.email ...` there: a campaign commits its steps',
    )


def check_repository(f: Facts) -> Check:
    if f.repo_root:
        return Check(name="repository", status="ok", found=f.repo_root)
    fix = (
        "run from a checkout of ATTUNE (or pass a RECIPE)"
        if f.recipe_arg is None
        else "`git init` the recipe's folder and commit the recipe, or tune a recipe of a clone"
    )
    return Check(name="repository", status="miss", found=f.repo_error or "not found", fix=fix)


def check_recipe(f: Facts) -> Check:
    if f.recipe_error:
        return Check(
            name="recipe", status="miss", found=f.recipe_error, fix="fix the recipe file (the message names the field)"
        )
    if f.recipe_path is None:
        return Check(name="recipe", status="skip", found="no recipe")
    return Check(name="recipe", status="ok", found=f"{f.recipe_path}: launcher {f.launcher}, hardware {f.hardware}")


def check_launcher(f: Facts) -> Check:
    if not f.launcher:
        return Check(name="launcher", status="skip", found="no recipe")
    if f.launcher in f.launchers:
        return Check(name="launcher", status="ok", found=f.launcher)
    return Check(
        name="launcher",
        status="miss",
        found=f"{f.launcher}: this ATTUNE has no such backend (it has {', '.join(f.launchers)})",
        fix="use a recipe with launcher " + " or ".join(f.launchers) + ", or an ATTUNE with that backend",
    )


def check_lessons(f: Facts) -> Check:
    if f.lessons is not None:
        own = f", {f.own_lessons} of them from {f.data_root}/lessons" if f.own_lessons else ""
        return Check(name="lessons", status="ok", found=f"{f.lessons} lessons (ATTUNE's catalog{own})")
    return Check(
        name="lessons",
        status="miss",
        found=f.lessons_error,
        fix="fix the lessons file named (the repository's lessons/ adds to ATTUNE's catalog or overrides it by id)",
    )


def check_torch(f: Facts) -> Check:
    if not _real(f):
        return Check(
            name="torch", status="skip", found="not needed by the simulator" if f.launcher == "sim" else "no recipe"
        )
    if f.torch_version is None:
        return Check(
            name="torch",
            status="miss",
            found=f.torch_error or "not installed",
            fix="`./dev setup` (the CPU wheel), or install the torch build for your GPU (README: Bring your own torch)",
        )
    build = f"CUDA {f.torch_cuda}" if f.torch_cuda else "CPU"
    if _gpu(f) and not f.torch_cuda:
        return Check(
            name="torch",
            status="miss",
            found=f"{f.torch_version} (a CPU build)",
            fix=f"hardware {f.hardware} needs a CUDA build of torch (README: Bring your own torch)",
        )
    if not _gpu(f) and not f.torch_version.startswith(CPU_TORCH):
        return Check(
            name="torch",
            status="warn",
            found=f"{f.torch_version} ({build})",
            fix=f"the CPU layer was made for torch {CPU_TORCH}x (`./dev setup` installs torch==2.13.0)",
        )
    return Check(name="torch", status="ok", found=f"{f.torch_version} ({build})")


def check_device(f: Facts) -> Check:
    if not _gpu(f):
        return Check(
            name="device", status="skip" if not _real(f) else "ok", found="the CPU" if _real(f) else "no device needed"
        )
    if f.launcher == "slurm":
        return Check(
            name="device", status="skip", found="GPUs are on the Slurm nodes (checked there when the job starts)"
        )
    if f.torch_version is None or not f.torch_cuda:
        return Check(name="device", status="skip", found="no CUDA build of torch to ask")
    if f.driver is None:
        return Check(
            name="device",
            status="miss",
            found="no NVIDIA driver (nvidia-smi not found or failing)",
            fix="install the NVIDIA driver for your GPUs; `nvidia-smi` must list them",
        )
    if len(f.cuda_devices) < f.devices_per_node:
        return Check(
            name="device",
            status="miss",
            found=f"{len(f.cuda_devices)} CUDA devices visible (driver {f.driver})",
            fix=f"the recipe runs {f.devices_per_node} per node: check CUDA_VISIBLE_DEVICES, and that torch's CUDA "
            f"{f.torch_cuda} suits driver {f.driver}",
        )
    return Check(name="device", status="ok", found=f"{len(f.cuda_devices)} x {f.cuda_devices[0]}, driver {f.driver}")


def check_torchtitan(f: Facts) -> Check:
    if not _real(f):
        return Check(
            name="torchtitan",
            status="skip",
            found="not needed by the simulator" if f.launcher == "sim" else "no recipe",
        )
    want = f.torchtitan_pin.split("==")[-1]
    if f.torchtitan_version is None:
        return Check(
            name="torchtitan",
            status="miss",
            found=f.torchtitan_error or "not installed",
            fix=f"`pip install {f.torchtitan_pin}`",
        )
    if f.torchtitan_version != want:
        return Check(
            name="torchtitan",
            status="miss",
            found=f"{f.torchtitan_version} (ATTUNE needs {want})",
            fix=f"`pip install {f.torchtitan_pin}`: commands and config checks are made for that release",
        )
    return Check(name="torchtitan", status="ok", found=f.torchtitan_version)


def check_triton(f: Facts) -> Check:
    if not _gpu(f):
        return Check(name="triton", status="skip", found="not used on the CPU" if _real(f) else "not needed")
    if f.triton_version is None:
        return Check(
            name="triton",
            status="miss",
            found=f.triton_error or "not installed",
            fix="`pip install triton` matching your torch: torch.compile (a lever campaigns try) generates GPU code with it",
        )
    return Check(name="triton", status="ok", found=f.triton_version)


def check_slurm(f: Facts) -> Check:
    if f.launcher != "slurm":
        return Check(name="slurm", status="skip", found="the recipe does not use Slurm")
    if f.sinfo is None:
        return Check(
            name="slurm",
            status="miss",
            found="sinfo not on PATH",
            fix="run on a Slurm login node (where sinfo, sbatch and srun are on PATH)",
        )
    if f.sinfo_partitions is None:
        return Check(
            name="slurm",
            status="miss",
            found=f"{f.sinfo}; `sinfo` failed: {f.sinfo_error}",
            fix="check that slurmctld is reachable from here (`sinfo` must list partitions)",
        )
    return Check(name="slurm", status="ok", found=f"{f.sinfo}; partitions: {f.sinfo_partitions}")


def check_github_token(f: Facts) -> Check:
    if not f.github:
        return Check(name="github token", status="skip", found="not in a GitHub Actions workflow")
    if f.github_token and f.github_repository:
        return Check(name="github token", status="ok", found=f"{f.github_token} for {f.github_repository}")
    if not f.github_token:
        return Check(
            name="github token",
            status="miss",
            found="neither ATTUNE_GITHUB_TOKEN nor GITHUB_TOKEN is set",
            fix="pass the token to the step: `env: GITHUB_TOKEN: ${{ github.token }}` (or the App's as ATTUNE_GITHUB_TOKEN)",
        )
    return Check(
        name="github token",
        status="miss",
        found="GITHUB_REPOSITORY is not set",
        fix="run inside the workflow (or set GITHUB_REPOSITORY=owner/name)",
    )


def check_github_permissions(f: Facts) -> Check:
    if not f.github:
        return Check(name="github permissions", status="skip", found="not in a GitHub Actions workflow")
    if f.github_token == "ATTUNE_GITHUB_TOKEN":
        return Check(
            name="github permissions", status="skip", found="an App token: its permissions are the App installation's"
        )
    if f.job_permissions is None:
        return Check(
            name="github permissions",
            status="warn",
            found=f.permissions_error or "the job's permissions could not be read",
            fix="declare the job's `permissions:` (" + ", ".join(f"{k}: {v}" for k, v in BOT_PERMISSIONS.items()) + ")",
        )
    lacking = [f"{k}: {v}" for k, v in BOT_PERMISSIONS.items() if f.job_permissions.get(k) != v]
    where = f"{f.workflow} job {f.job}"
    if lacking:
        return Check(
            name="github permissions",
            status="miss",
            found=f"{where} lacks {', '.join(lacking)}",
            fix="add them to the job's `permissions:` (as .github/workflows/campaign.yml's handle job has them)",
        )
    return Check(
        name="github permissions",
        status="ok",
        found=f"{where}: " + ", ".join(f"{k}: {v}" for k, v in BOT_PERMISSIONS.items()),
    )


CHECKS = (
    check_python,
    check_git,
    check_repository,
    check_recipe,
    check_launcher,
    check_lessons,
    check_git_identity,
    check_torch,
    check_device,
    check_torchtitan,
    check_triton,
    check_slurm,
    check_github_token,
    check_github_permissions,
)


def run_checks(facts: Facts) -> list[Check]:
    return [check(facts) for check in CHECKS]


# ----------------------------------------------------------------------------- gathering the facts (I/O)
def _out(argv: list[str], cwd: Path | None = None) -> tuple[int, str]:
    """Exit code and stdout, or on failure the last line of stderr (the fatal one)."""
    try:
        proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 1, str(exc)
    if proc.returncode == 0:
        return 0, proc.stdout.strip()
    err = proc.stderr.strip().splitlines() or proc.stdout.strip().splitlines() or [""]
    return proc.returncode, err[-1][:300]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def _module_version(name: str) -> tuple[str | None, str, Any]:
    try:
        module = importlib.import_module(name)
    except Exception as exc:  # an import may fail in any way (a broken build): report it
        return None, _first_line(exc), None
    version = getattr(module, "__version__", None)
    if version is None:
        try:
            version = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            version = "unknown"
    return str(version), "", module


def _torchtitan_pin() -> str:
    try:
        for req in importlib.metadata.requires("attune") or []:
            if req.replace(" ", "").startswith("torchtitan=="):
                return req.replace(" ", "").split(";")[0]
    except importlib.metadata.PackageNotFoundError:
        pass
    return TORCHTITAN_PIN


def _job_permissions(root: Path, env: Mapping[str, str]) -> tuple[str, str, dict[str, str] | None, str]:
    """The running job's declared ``permissions:`` (the job's, else the workflow's), from the checkout's workflow file."""
    ref, job = env.get("GITHUB_WORKFLOW_REF", ""), env.get("GITHUB_JOB", "")
    # owner/name/.github/workflows/file.yml@refs/heads/main
    path = ref.split("@", 1)[0].split("/", 2)[-1] if ref.count("/") >= 2 else ""
    if not path or not job:
        return path, job, None, "GITHUB_WORKFLOW_REF or GITHUB_JOB is not set"
    file = root / path
    if not file.is_file():
        return path, job, None, f"{path}: not in the checkout"
    from ruamel.yaml import YAML

    try:
        doc = YAML(typ="safe").load(file.read_text())
    except Exception as exc:  # a workflow the checkout cannot parse: say so, as a warning
        return path, job, None, f"{path}: {_first_line(exc)}"
    spec = (doc.get("jobs") or {}).get(job, {})
    perms = spec.get("permissions", doc.get("permissions")) if isinstance(spec, dict) else None
    if perms is None:
        return path, job, None, f"{path}: job {job} declares no permissions (the repository's default applies)"
    if isinstance(perms, str):  # read-all / write-all
        level = perms.split("-")[0]
        return path, job, dict.fromkeys(BOT_PERMISSIONS, level), ""
    return path, job, {str(k): str(v) for k, v in (perms or {}).items()}, ""


def _recipe_path(arg: str) -> Path:
    """The recipe file ``arg`` names: a path, or (as ``attune demo --recipe`` takes it) one under the ATTUNE
    repository's ``recipes/`` (``moe-tiny/cpu.yaml``); a one-line error when it is neither."""
    from bot.core.repo import RepoError, find_repo

    recipe = Path(arg).resolve()
    if recipe.is_file():
        return recipe
    try:
        under = find_repo().recipes / arg.removeprefix("recipes/")
    except RepoError:
        under = None
    if under is not None and under.is_file() and ".." not in Path(arg).parts:
        return under.resolve()
    raise UsageError(
        f"{arg}: no such recipe (a path to a recipe file, or one under recipes/ such as moe-tiny/cpu.yaml)"
    )


def gather(recipe_arg: str | None, env: Mapping[str, str], *, github: bool = False) -> Facts:
    from bot.agent.lessons import LessonFileError, load_lesson_folder, load_lessons, packaged_lessons
    from bot.core.recipe import RecipeError, load_recipe
    from bot.core.repo import RepoError, find_repo, git_toplevel
    from bot.runner import LAUNCHERS, check_runnable

    f = Facts(
        python=".".join(map(str, sys.version_info[:3])),
        recipe_arg=recipe_arg,
        launchers=list(LAUNCHERS),
        torchtitan_pin=_torchtitan_pin(),
    )
    git = shutil.which("git")
    if git:
        rc, text = _out([git, "--version"])
        f.git = text if rc == 0 else None
    # the recipe and its repository
    if recipe_arg is None:
        try:
            root = find_repo().root
        except RepoError as exc:
            f.repo_error = str(exc)
            root = None
        recipe = root / DEMO_RECIPE if root else None
        if recipe is not None and not recipe.is_file():
            f.repo_error, root, recipe = f"{root}: no {DEMO_RECIPE} (not a checkout of ATTUNE)", None, None
        if root is not None:
            f.data_root = str(root)
            top = git_toplevel(root) if git else None  # the demo clones this checkout with git
            f.repo_root = str(top) if top else None
            if top is None:
                f.repo_error = (
                    "git is not on PATH: the demo clones this checkout with git"
                    if not git
                    else f"{root}: not a git checkout (the demo clones it)"
                )
    else:
        recipe = _recipe_path(recipe_arg)
        top = git_toplevel(recipe) if git else None
        if top is None:
            f.repo_error = (
                "git is not on PATH: cannot find the recipe's repository"
                if not git
                else f"{recipe}: not inside a git repository"
            )
        f.repo_root = str(top) if top else None
        if top is None:
            with contextlib.suppress(
                RepoError
            ):  # lessons can still be checked: the folder above holding recipes/ or lessons/
                f.data_root = str(find_repo(recipe.parent).root)
    if recipe is not None:
        f.recipe_path = str(recipe)
        try:
            r = load_recipe(recipe)
            f.launcher, f.hardware, f.devices_per_node = (
                r.cluster.launcher,
                r.cluster.hardware,
                r.cluster.devices_per_node,
            )
            check_runnable(r, recipe)  # valid, but can its launcher run it (hardware and model the simulator knows)?
        except RecipeError as exc:
            f.recipe_error = str(exc)
    f.data_root = f.data_root or f.repo_root
    own = Path(f.data_root) / "lessons" if f.data_root else None
    try:  # ATTUNE's packaged catalog, with the repository's own lessons/ when it has one
        f.lessons = len(load_lessons(own) if own is not None else packaged_lessons())
        f.own_lessons = len(load_lesson_folder(own)) if own is not None and own.is_dir() else 0
    except LessonFileError as exc:
        f.lessons_error = str(exc)
    if f.data_root and git and recipe_arg is not None and f.repo_root:
        name = _out([git, "config", "user.name"], cwd=Path(f.repo_root))
        email = _out([git, "config", "user.email"], cwd=Path(f.repo_root))
        if name[0] == 0 and email[0] == 0 and name[1] and email[1]:
            f.git_identity = f"{name[1]} <{email[1]}>"
    # the software a real run needs
    if _real(f):
        f.torch_version, f.torch_error, torch = _module_version("torch")
        if torch is not None:
            f.torch_cuda = getattr(torch.version, "cuda", None)
            if f.torch_cuda and _gpu(f):
                try:
                    f.cuda_devices = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
                except Exception as exc:  # a driver/runtime mismatch raises here
                    f.torch_error = _first_line(exc)
        f.torchtitan_version, f.torchtitan_error, _ = _module_version("torchtitan")
        if _gpu(f):
            f.triton_version, f.triton_error, _ = _module_version("triton")
            smi = shutil.which("nvidia-smi")
            if smi:
                rc, text = _out([smi, "--query-gpu=driver_version", "--format=csv,noheader"])
                f.driver = text.splitlines()[0].strip() if rc == 0 and text else None
    if f.launcher == "slurm":
        sinfo = shutil.which("sinfo")
        if sinfo:
            rc, text = _out([sinfo, "--version"])
            f.sinfo = text if rc == 0 and text else sinfo
            rc, text = _out([sinfo, "-h", "-o", "%P"])
            if rc == 0 and text:
                f.sinfo_partitions = ", ".join(text.split())
            else:
                f.sinfo_error = text or f"exit {rc}"
    # GitHub Actions
    f.github = github or env.get("GITHUB_ACTIONS") == "true"
    if f.github:
        f.github_token = next((k for k in ("ATTUNE_GITHUB_TOKEN", "GITHUB_TOKEN") if env.get(k)), None)
        f.github_repository = env.get("GITHUB_REPOSITORY", "")
        root = Path(env.get("GITHUB_WORKSPACE") or f.repo_root or os.getcwd())
        f.workflow, f.job, f.job_permissions, f.permissions_error = _job_permissions(root, env)
    return f


# ----------------------------------------------------------------------------- the command
MARK = {"ok": "ok  ", "miss": "MISS", "warn": "warn", "skip": "-   "}


def cmd_doctor(args: argparse.Namespace) -> int:
    facts = gather(args.recipe, os.environ, github=args.github)
    checks = run_checks(facts)
    misses = [c for c in checks if c.status == "miss"]
    what = args.recipe or f"{DEMO_RECIPE} (attune demo)"
    verdict = (
        f"{what} can run here"
        if not misses
        else f"{what} cannot run here yet: {len(misses)} to fix ({', '.join(c.name for c in misses)})"
    )
    if args.json:
        emit_json(
            {
                "recipe": facts.recipe_path,
                "ok": not misses,
                "checks": [c.model_dump() for c in checks],
                "verdict": verdict,
            }
        )
    else:
        for c in checks:
            print(
                f"{MARK[c.status]} {c.name}: {c.found}"
                + (f"\n       -> {c.fix}" if c.fix and c.status in ("miss", "warn") else "")
            )
        print(f"attune doctor: {verdict}")
    return EXIT_OK if not misses else EXIT_REJECT


def register(sub: Any) -> None:
    d = sub.add_parser("doctor", help="check that a recipe can run here; say what to do for each thing missing")
    d.add_argument(
        "recipe", nargs="?", default=None, help=f"the recipe to check (default: {DEMO_RECIPE}, what `attune demo` runs)"
    )
    d.add_argument(
        "--github",
        action="store_true",
        help="also check what the bot needs in a GitHub workflow (implied by GITHUB_ACTIONS=true)",
    )
    d.add_argument("--json", action="store_true")
    d.set_defaults(func=cmd_doctor)
