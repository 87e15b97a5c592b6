"""Global rank 0 writes the stack it ran on (``ATTUNE_STACK_FILE``) when it exits normally.

A Slurm trial is launched from a login node, whose Python, torch and devices need not be the compute nodes'
(a login node often has no GPU). :mod:`bot.runner.slurm` sets ``ATTUNE_STACK_FILE`` in the job and reads this
file into the run record's stack fingerprint; without it (a rank that died) the login node's stack is recorded.
The fields are those of ``bot.core.records.StackFingerprint``, gathered as ``bot.runner.base.stack_fingerprint``
gathers them. Written at exit, not at start-up, so that nothing here initialises a device before torchtitan does.
"""

from __future__ import annotations

import atexit
import json
import os
import platform


def fingerprint() -> dict[str, object]:
    import torch

    try:
        from importlib.metadata import version

        titan = version("torchtitan")
    except Exception:
        titan = "unknown"
    gpu = torch.cuda.is_available()
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torchtitan": titan,
        "cuda": torch.version.cuda if gpu else None,
        "device_name": torch.cuda.get_device_name(0) if gpu else "cpu",
        "device_family": ("cuda" if torch.version.cuda else "rocm") if gpu else "cpu",
    }


def write(path: str) -> None:
    try:
        text = json.dumps(fingerprint())
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except Exception:  # never fail a rank's exit over its fingerprint
        pass


def install() -> None:
    """In global rank 0 with ``ATTUNE_STACK_FILE`` set: write the fingerprint at exit."""
    path = os.environ.get("ATTUNE_STACK_FILE")
    if path and os.environ.get("RANK") == "0":
        atexit.register(write, path)
