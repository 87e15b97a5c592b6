"""The product as the workflows install it: a NON-editable ``pip install --no-deps .`` into a fresh venv that sees the
test venv's dependencies (nothing is downloaded), run from a checkout that holds only repository data.

``attune lessons list``, a simulated ``attune campaign run`` and ``attune github handle`` for an issue-opened payload
(against the OpenAPI-validated GitHub fake, served over HTTP) must each work: repository data (``recipes/``,
``lessons/``, ``results/``, ``leaderboard.md``) is read from the checkout, never from next to the installed package; ATTUNE's
own lessons catalog is package data, which the checkout's ``lessons/`` adds to.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from forge_helpers import TOKEN, require

ROOT = Path(__file__).resolve().parents[2]
SIM_RECIPE = "recipes/llama3.1-405b/h200x128.yaml"
SIM_SOURCE = (
    ROOT / "bot" / "bench" / "tasks" / "llama3.1-405b" / "h200x128.yaml"
)  # a benchmark task, placed at SIM_RECIPE
SKIP = shutil.ignore_patterns(
    ".venv",
    ".git",
    "node_modules",
    ".attune",
    "runs",
    "outputs",
    "__pycache__",
    "*.egg-info",
    "build",
    ".pytest_cache",
    ".ruff_cache",
    ".hypothesis",
)


def run(
    argv: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: int = 300
) -> subprocess.CompletedProcess:
    # never the caller's PYTHONPATH: the installed package, and nothing else, must be what runs
    env = env if env is not None else {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``<venv>/bin`` of a fresh venv holding a non-editable install of this checkout."""
    tmp = tmp_path_factory.mktemp("installed")
    source = tmp / "source"
    shutil.copytree(ROOT, source, ignore=SKIP)  # pip builds in the source tree: never in the developer's checkout
    venv = tmp / "venv"
    out = run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp)
    assert out.returncode == 0, out.stderr
    # the new venv sees the test venv's installed dependencies (a path entry: its .pth files, the editable
    # install's finder among them, are not processed)
    purelib = Path(
        run(
            [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=tmp
        ).stdout.strip()
    )
    (purelib / "attune-test-deps.pth").write_text(
        sysconfig.get_paths()["purelib"] + "\n" + "\n".join(site.getsitepackages()) + "\n"
    )
    # this venv's pip and build backend install into the new one: nothing is downloaded
    out = run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(venv / "bin" / "python"),
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            str(source),
        ],
        cwd=tmp,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    where = run(
        [str(venv / "bin" / "python"), "-c", "import bot, gate; print(bot.__file__); print(gate.__file__)"], cwd=tmp
    )
    assert where.returncode == 0, where.stderr
    for line in where.stdout.split():
        assert Path(line).is_relative_to(purelib), f"{line}: not the non-editable install in {purelib}"
    shutil.rmtree(source)  # nothing can be read from the source any more
    return venv / "bin"


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A repository to tune: recipes, its proposed lessons and the leaderboard, no code, under git."""
    repo = tmp_path / "checkout"
    repo.mkdir()
    for part in ("recipes", "lessons"):
        shutil.copytree(ROOT / part, repo / part, ignore=SKIP)
    shutil.copy(ROOT / "leaderboard.md", repo / "leaderboard.md")
    (repo / SIM_RECIPE).parent.mkdir(parents=True)
    shutil.copy(SIM_SOURCE, repo / SIM_RECIPE)
    for argv in (
        ["init", "-q", "-b", "main"],
        ["config", "user.name", "t"],
        ["config", "user.email", "t@localhost"],
        ["add", "-A"],
        ["commit", "-q", "-m", "data"],
    ):
        assert run(["git", *argv], cwd=repo).returncode == 0
    return repo


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "GITHUB_", "ATTUNE_", "VIRTUAL_ENV"))}
    return {**env, "PYTHONSAFEPATH": "1", **extra}


def test_the_lessons_catalog_ships_with_the_package_and_the_checkout_adds_to_it(
    installed: Path, checkout: Path
) -> None:
    """ATTUNE's catalog is package data: found from a checkout without lessons/ and from no repository at all; the
    checkout's own lessons/ adds a lesson to it."""
    shutil.rmtree(checkout / "lessons")
    for cwd in (checkout, checkout.parent):
        out = run([str(installed / "attune"), "lessons", "list"], cwd=cwd, env=clean_env())
        assert out.returncode == 0 and "oom-enable-recompute" in out.stdout, out.stderr
    (checkout / "lessons").mkdir()
    own = (ROOT / "bot" / "agent" / "lessons_catalog" / "cpu.yaml").read_text().replace("id: cpu-", "id: ours-cpu-")
    (checkout / "lessons" / "ours.yaml").write_text(own)
    out = run([str(installed / "attune"), "lessons", "list"], cwd=checkout, env=clean_env())
    assert out.returncode == 0 and "oom-enable-recompute" in out.stdout and "ours-cpu-" in out.stdout, out.stderr


def test_a_simulated_campaign_runs_from_the_installed_package(installed: Path, checkout: Path) -> None:
    out = run(
        [str(installed / "attune"), "campaign", "run", SIM_RECIPE, "--budget", "1400", "--json"],
        cwd=checkout,
        env=clean_env(),
    )
    assert out.returncode == 0, out.stderr[-2000:]
    facts = json.loads(out.stdout.strip().splitlines()[-1])
    assert facts["steps"] and facts["finish_reason"]
    assert any(s["kept"] for s in facts["steps"]) and facts["gain"] > 0
    # the campaign ran in the checkout: its branches and its state are there
    branches = run(["git", "branch", "--list", "attune/*"], cwd=checkout).stdout.split()
    assert len(branches) == len(facts["steps"])
    assert (checkout / ".attune" / "campaigns" / facts["campaign"] / "state.json").is_file()


def test_a_recipe_outside_a_git_repository_is_one_clear_line(installed: Path, tmp_path: Path) -> None:
    loose = tmp_path / "loose"
    loose.mkdir()
    shutil.copy(SIM_SOURCE, loose / "r.yaml")
    out = run([str(installed / "attune"), "campaign", "run", "r.yaml", "--budget", "10"], cwd=loose, env=clean_env())
    assert out.returncode == 2 and "not inside a git repository" in out.stderr and "Traceback" not in out.stderr


def test_the_github_handler_starts_a_campaign_from_the_installed_package(
    installed: Path, checkout: Path, tmp_path: Path
) -> None:
    require("responses", "openapi_core")
    from fake_github import FakeGitHub
    from fake_github_http import FakeGitHubServer
    from openapi_contract import Contract, spec_missing_reason

    reason = spec_missing_reason()
    if reason:
        pytest.skip(reason)
    fake = FakeGitHub(Contract())
    fake.seed({SIM_RECIPE: SIM_SOURCE.read_text()})
    fake.workflows.update({"trial.yml", "leaderboard.yml"})
    fake.permissions["alice"] = "write"
    body = (
        f"### Recipe path\n\n{SIM_RECIPE}\n\n### Budget (device-hours)\n\n400\n\n### Policy\n\nheuristic\n\n"
        "### Runner labels\n\ngpu\n\n### Bench steps\n\n_No response_"
    )
    number = fake.add_issue("tune it", body, user="alice", labels=["attune:campaign"])
    payload = tmp_path / "event.json"
    payload.write_text(
        json.dumps(
            {
                "action": "opened",
                "issue": {
                    "number": number,
                    "title": "tune it",
                    "body": body,
                    "user": {"login": "alice"},
                    "labels": [{"name": "attune:campaign"}],
                },
            }
        )
    )
    server = FakeGitHubServer(fake).start()
    try:
        env = clean_env(
            GITHUB_API_URL=server.url, GITHUB_REPOSITORY=fake.full_name, GITHUB_TOKEN=TOKEN, ATTUNE_BOT_LOGIN=fake.actor
        )
        out = run(
            [str(installed / "attune"), "github", "handle", "--event-name", "issues", "--event-path", str(payload)],
            cwd=checkout,
            env=env,
        )
    finally:
        server.stop()
    assert out.returncode == 0, out.stderr[-2000:]
    assert "started" in out.stdout
    assert [d["inputs"]["kind"] for d in fake.dispatches if d["workflow"] == "trial.yml"] == ["baseline"]
    assert any("attune:state" in c.body for c in fake.comments.values())
    fake.assert_contract_kept()
