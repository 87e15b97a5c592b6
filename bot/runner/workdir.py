"""Where a run's ranks start: the recipe's repository root, importable, as ``torchrun`` started there would be.

A user runs torchtitan from a checkout: relative paths in a config (``./tests/assets/tokenizer``, a dataset) resolve
against it, and a model module kept there (``--module mymods.tiny``) imports from it. Every launch (``attune run``,
campaigns, the gate's calibration runs, seed checkpoints, the Slurm batch script) starts its ranks in that root with the
root on ``PYTHONPATH`` (after ATTUNE's own start-up hook and package, before whatever was there); the in-process
config resolution imports from it too (:func:`importable`). The run folder still holds the logs and records: the
runners pass torchtitan's dump folder as an absolute path inside it.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from bot.core.repo import RepoError, find_repo, git_toplevel
from bot.inrank import IMPORT_ROOT, SITE_DIR


def recipe_root(recipe_path: str | Path | None) -> Path:
    """The root ranks start in for the recipe file ``recipe_path`` (relative: to the working directory): the git
    repository holding it; else the folder at or above it holding ``recipes/`` or ``lessons/``; else, and when there
    is no recipe file, the working directory (the checkout the command was started from)."""
    if recipe_path:
        path = Path(recipe_path).resolve()
        if path.exists():
            top = git_toplevel(path)
            if top is not None:
                return top.resolve()
            with contextlib.suppress(RepoError):
                return find_repo(path if path.is_dir() else path.parent).root
    return Path.cwd().resolve()


def rank_pythonpath(root: Path, current: str | None = None) -> str:
    """A rank's ``PYTHONPATH``: ATTUNE's start-up hook and package first (a repository cannot shadow them), then the
    repository ``root``, then ``current`` (what the environment had)."""
    parts = [str(SITE_DIR), str(IMPORT_ROOT), str(Path(root).resolve()), *([current] if current else [])]
    return os.pathsep.join(dict.fromkeys(parts))


@contextlib.contextmanager
def importable(root: Path | None) -> Iterator[None]:
    """Inside: ``root`` heads ``sys.path`` (a rank started in it has it there too), so torchtitan's
    config manager imports the recipe's module from it; after: ``sys.path`` as it was. A module once imported stays
    in ``sys.modules`` for the process."""
    entry = str(Path(root).resolve()) if root is not None else ""
    added = bool(entry) and entry not in sys.path
    if added:
        sys.path.insert(0, entry)
        importlib.invalidate_caches()  # a module written since this process started
    try:
        yield
    finally:
        if added:
            with contextlib.suppress(ValueError):
                sys.path.remove(entry)
