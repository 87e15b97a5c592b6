"""Code that runs inside torchtitan ranks: the interpreter start-up hook (``_site/sitecustomize.py``), the CPU
compatibility layer (:mod:`.cpu_compat`), the workloads recipes name as ``--module`` (:mod:`.workloads`) and the
test-only fault hooks (:mod:`.hooks`).

Everything a rank may execute lives in this folder, so a run's code fingerprint is this folder's content
(:func:`code_files`): nothing elsewhere has to list in-rank files by hand. This package imports nothing else of
``bot`` or ``gate``.
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent
SITE_DIR = HERE / "_site"  # prepended to a rank's PYTHONPATH: sitecustomize runs at interpreter start-up
IMPORT_ROOT = HERE.parents[1]  # the folder that holds the ``bot`` package (a checkout or site-packages)


def code_files() -> list[Path]:
    """Every source file a rank may execute from this package, in a stable order."""
    return sorted(p for p in HERE.rglob("*.py") if "__pycache__" not in p.parts)
