"""Interpreter start-up hook for torchtitan ranks launched by ATTUNE's local runner.

The runner prepends this folder to PYTHONPATH. Inside a torchrun rank (LOCAL_RANK is set) it
applies the CPU compatibility layer when ``ATTUNE_CPU_COMPAT=1`` and installs a test-only
workload hook when ``ATTUNE_HOOK`` names one; with ``ATTUNE_STACK_FILE`` (Slurm trials) global rank 0 writes its
stack there at exit. The torchrun parent process is left alone.
"""

import os

if "LOCAL_RANK" in os.environ:
    if os.environ.get("ATTUNE_CPU_COMPAT") == "1":
        from bot.inrank import cpu_compat

        cpu_compat.apply()
    if os.environ.get("ATTUNE_HOOK"):
        from bot.inrank import hooks

        hooks.install(os.environ["ATTUNE_HOOK"])
    if os.environ.get("ATTUNE_STACK_FILE"):
        from bot.inrank import stack

        stack.install()
