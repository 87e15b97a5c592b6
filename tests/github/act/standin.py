"""Local stand-ins for the pinned ``uses:`` actions of the workflows, for running them under ``act`` with no network.

Each stand-in action (``tests/github/act/<action>/action.yml``, a composite action that act is pointed at with
``--local-repository actions/<action>@<sha>=<dir>``) calls this script with its inputs in the environment:

``checkout``
    the test repository at ``REF`` (default: the default branch) written into ``$GITHUB_WORKSPACE/$DEST``, as a
    git repository with one commit. The files come from the fake GitHub's repository (the server's test-only
    ``/__standin__/tree`` route: git's own protocol is not part of the REST API the fake is held to).
``setup-python``
    a throwaway venv (``python -m venv --without-pip``) that sees the test venv's installed dependencies through a
    path entry, put first on ``$GITHUB_PATH``. ``python -m pip install .`` there is a NON-editable install into the
    throwaway venv (pip and setuptools come from the test venv; the runner's pip configuration -- see
    ``act_harness`` -- forbids downloads), never into the development venv. A ``sitecustomize`` in the venv logs
    where every process that imported ``bot`` imported it from (``$ATTUNE_STANDIN_STATE/imports.jsonl``).
``upload-artifact`` / ``download-artifact``
    a folder per run id and artifact name under ``$ATTUNE_STANDIN_STATE/artifacts``; like v4, several paths (files,
    folders, wildcards) keep their layout below their least common ancestor, uploading a name twice in one run
    fails, and downloading a missing one fails.
``create-github-app-token``
    an installation token from the fake (``/__standin__/app-token``), with the App's slug.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

SITECUSTOMIZE = '''\
"""Written by the setup-python stand-in: log where ``bot`` was imported from, at exit."""
import atexit, json, os, sys


def _log():
    bot = sys.modules.get("bot")
    if bot is None:
        return
    from importlib.metadata import distribution

    dist = distribution("attune")
    with open({log!r}, "a") as fh:
        fh.write(json.dumps({{"argv": sys.argv, "bot": bot.__file__, "prefix": sys.prefix, "dist": str(dist.locate_file("")),
                              "direct_url": json.loads(dist.read_text("direct_url.json") or "{{}}"),
                              "run_id": os.environ.get("GITHUB_RUN_ID"), "job": os.environ.get("GITHUB_JOB"),
                              "home": os.environ.get("HOME"), "pip_config_file": os.environ.get("PIP_CONFIG_FILE"),
                              "user_site": sys.flags.no_user_site == 0 and os.environ.get("PYTHONNOUSERSITE") is None}}) + "\\n")


atexit.register(_log)
'''


def _state() -> Path:
    return Path(os.environ["ATTUNE_STANDIN_STATE"])


def _get(route: str, **query: str) -> dict:
    url = f"{os.environ['GITHUB_API_URL']}/__standin__/{route}?{urllib.parse.urlencode(query)}"
    with urllib.request.urlopen(url, timeout=30) as answer:  # noqa: S310 (the fake on 127.0.0.1)
        return json.loads(answer.read())


def _output(**values: str) -> None:
    with open(os.environ["GITHUB_OUTPUT"], "a") as fh:
        for key, value in values.items():
            fh.write(f"{key}={value}\n")


def checkout() -> int:
    ref = os.environ.get("REF") or ""
    dest = Path(os.environ["GITHUB_WORKSPACE"]) / (os.environ.get("DEST") or "")
    tree = _get("tree", ref=ref)
    if dest.exists():  # actions/checkout cleans the destination
        for child in dest.iterdir():
            shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
    dest.mkdir(parents=True, exist_ok=True)
    for path, text in tree["files"].items():
        (dest / path).parent.mkdir(parents=True, exist_ok=True)
        (dest / path).write_text(text)
    git = ["git", "-c", "user.name=checkout", "-c", "user.email=checkout@localhost", "-c", "init.defaultBranch=main"]
    for argv in (["init", "-q"], ["add", "-A"], ["commit", "-q", "--no-verify", "-m", f"{tree['sha']}"]):
        subprocess.run([*git, *argv], cwd=dest, check=True)
    # actions/checkout leaves HEAD at exactly the commit it checked out, and a run record's git_commit is what
    # `git rev-parse HEAD` says there (the report job checks it against the dispatched sha). This stand-in's own
    # commit cannot have the fake's sha, so HEAD names the fake's commit the files came from (detached).
    (dest / ".git" / "HEAD").write_text(tree["sha"] + "\n")
    print(f"checked out {tree['sha']} ({ref or 'default branch'}) into {dest}: {len(tree['files'])} files")
    return 0


def setup_python() -> int:
    venv = (
        _state()
        / "venvs"
        / f"{os.environ.get('GITHUB_RUN_ID', '0')}-{os.environ.get('GITHUB_JOB', 'job')}-{uuid.uuid4().hex[:8]}"
    )
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    # a path entry, not a site dir: the test venv's .pth files (its editable install of this project) are not processed
    (purelib / "attune-test-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    # the venv's own pip configuration: build with the test venv's setuptools (no download, no isolated build env;
    # PIP_NO_BUILD_ISOLATION's meaning is inverted: "false" turns isolation off)
    (venv / "pip.conf").write_text("[install]\nno-build-isolation = false\n")
    (purelib / "sitecustomize.py").write_text(SITECUSTOMIZE.format(log=str(_state() / "imports.jsonl")))
    with open(os.environ["GITHUB_PATH"], "a") as fh:
        fh.write(f"{venv / 'bin'}\n")
    _output(**{"python-version": "{}.{}.{}".format(*sys.version_info[:3]), "python-path": str(python)})
    print(f"python {sys.version.split()[0]} in {venv} (sees {sysconfig.get_paths()['purelib']})")
    return 0


def _search_root(path: Path) -> Path:
    """A search path's folder: itself for a folder, the folder above its first wildcard or of its file."""
    parts = path.parts
    wild = next((i for i, part in enumerate(parts) if any(c in part for c in "*?[")), None)
    if wild is not None:
        return Path(*parts[:wild])
    return path if path.is_dir() else path.parent


def upload_artifact() -> int:
    """Like v4: ``path`` is one or more lines (folders, files, wildcards); the artifact's root is the least common
    ancestor of the search paths, so the files keep their layout below it."""
    name, workspace = os.environ.get("NAME") or "artifact", Path(os.environ["GITHUB_WORKSPACE"])
    target = _state() / "artifacts" / os.environ["GITHUB_RUN_ID"] / name
    if target.exists():
        print(f"::error::an artifact named {name} already exists in run {os.environ['GITHUB_RUN_ID']}")
        return 1
    searches = [workspace / line.strip() for line in os.environ["SOURCE"].splitlines() if line.strip()]
    root = Path(os.path.commonpath([_search_root(p) for p in searches]))
    files: set[Path] = set()
    for path in searches:
        if any(c in str(path) for c in "*?["):
            files |= {Path(p) for p in glob.glob(str(path), recursive=True) if Path(p).is_file()}
        elif path.is_dir():
            files |= {p for p in path.rglob("*") if p.is_file()}
        elif path.is_file():
            files.add(path)
    if not files:
        print(
            f"::warning::No files were found with the provided path: {os.environ['SOURCE']}. No artifacts will be uploaded."
        )
        return 0 if os.environ.get("IF_NO_FILES_FOUND", "warn") != "error" else 1
    for path in sorted(files):
        (target / path.relative_to(root)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target / path.relative_to(root))
    print(f"uploaded {len(files)} files as {name}")
    return 0


def download_artifact() -> int:
    name, dest = os.environ["NAME"], Path(os.environ["GITHUB_WORKSPACE"]) / (os.environ.get("DEST") or "")
    source = _state() / "artifacts" / os.environ["GITHUB_RUN_ID"] / name
    if not source.is_dir():
        print(f"::error::Unable to download artifact(s): Artifact not found for name: {name}")
        return 1
    shutil.copytree(source, dest, dirs_exist_ok=True)
    print(f"downloaded {name} into {dest}")
    return 0


def app_token() -> int:
    if not (os.environ.get("APP_ID") and os.environ.get("PRIVATE_KEY")):
        print("::error::[@octokit/auth-app] appId and privateKey options are required")
        return 1
    answer = _get("app-token", app_id=os.environ["APP_ID"])
    print(f"::add-mask::{answer['token']}")
    _output(
        token=answer["token"], **{"app-slug": answer["app_slug"], "installation-id": str(answer["installation_id"])}
    )
    return 0


COMMANDS = {
    "checkout": checkout,
    "setup-python": setup_python,
    "upload-artifact": upload_artifact,
    "download-artifact": download_artifact,
    "create-github-app-token": app_token,
}

if __name__ == "__main__":
    sys.exit(COMMANDS[sys.argv[1]]())
