"""The batch script of a ``launcher: slurm`` trial, in the shape of torchtitan's ``multinode_trainer.slurm``.

torchtitan's template (https://github.com/pytorch/torchtitan/blob/main/multinode_trainer.slurm) asks Slurm for N
nodes, one task per node, finds the head node with ``scontrol show hostnames $SLURM_JOB_NODELIST`` and starts one
``torchrun --nnodes N --nproc_per_node P --rdzv_id … --rdzv_backend c10d --rdzv_endpoint <head>:29500 -m
torchtitan.train …`` per node with ``srun``. This script does the same, with these differences:

- the head node's address is the one Slurm itself reaches it at (``scontrol show node``'s ``NodeAddr``) instead of
  ``hostname --ip-address`` on that node, which answers 127.0.1.1 on hosts whose ``/etc/hosts`` maps their name so;
- ``--rdzv-id`` is the job id, ``--max-restarts=0`` (a restarted trial is not one measurement),
  ``srun --kill-on-bad-exit=1`` (one failed node ends the job);
- every rank's output line carries its global rank (``TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE="[rank${rank}]:"``,
  torch/distributed/elastic/agent/server/local_elastic_agent.py) and only local rank 0 of each node is shown
  (``--local-ranks-filter=0``), so the runner reads global rank 0's metric lines from the one job log;
- ``--no-requeue``: a preempted or failed job ends instead of silently starting again.

The recipe's ``cluster.slurm`` adds the site's options (:class:`bot.core.slurm.SlurmSettings`). The job's log and
working folder are sbatch command-line options (``--output``, ``--chdir``), not ``#SBATCH`` lines, so any path works;
``srun`` then starts from the recipe's repository root (a ``cd`` before it: :mod:`bot.runner.workdir`).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from bot.core.recipe import Recipe
from bot.core.slurm import SlurmSettings

PREFIX_TEMPLATE = "[rank${rank}]:"


def job_name(recipe: Recipe) -> str:
    return "attune-" + (re.sub(r"[^A-Za-z0-9._-]+", "-", recipe.name).strip("-") or "trial")[:60]


def sbatch_lines(recipe: Recipe, settings: SlurmSettings, *, time_limit: str | None) -> list[str]:
    """The ``#SBATCH`` options: the job's shape, then the site's settings, then the recipe's extra lines."""
    c = recipe.cluster
    opts = [f"--job-name={job_name(recipe)}", f"--nodes={c.nodes}", "--ntasks-per-node=1", "--no-requeue"]
    for flag, value in (
        ("--partition", settings.partition),
        ("--account", settings.account),
        ("--qos", settings.qos),
        ("--time", time_limit),
        ("--gres", settings.gres),
        ("--cpus-per-task", settings.cpus_per_task),
    ):
        if value is not None:
            opts.append(f"{flag}={value}")
    gpus = settings.gpus_per_node
    if gpus is None and settings.gres is None and c.hardware != "cpu":
        gpus = c.devices_per_node  # one GPU per rank unless the recipe says otherwise
    if gpus:
        opts.append(f"--gpus-per-node={gpus}")
    opts += settings.extra_sbatch
    return [f"#SBATCH {o}" for o in opts]


def torchrun_argv(recipe: Recipe, settings: SlurmSettings, titan_args: list[str], torchrun: list[str]) -> list[str]:
    """One node's torchrun command; ``$SLURM_NNODES``, ``$SLURM_JOB_ID`` and ``$head_addr`` are the script's."""
    return [
        *torchrun,
        "--nnodes=$SLURM_NNODES",
        f"--nproc-per-node={recipe.cluster.devices_per_node}",
        "--rdzv-id=$SLURM_JOB_ID",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=$head_addr:{settings.rdzv_port}",
        "--max-restarts=0",
        "--local-ranks-filter=0",
        "--role=rank",
        "--tee=3",
        "-m",
        "torchtitan.train",
        *titan_args,
    ]


def _word(arg: str) -> str:
    """Shell-quote one argument; ``$SLURM_*`` and ``$head_addr`` stay expandable (double quotes)."""
    if "$" in arg and re.fullmatch(r"[\w.=:/-]*\$(SLURM_NNODES|SLURM_JOB_ID|head_addr)[\w.=:/-]*", arg):
        return f'"{arg}"'
    return shlex.quote(arg)


def render(
    recipe: Recipe,
    settings: SlurmSettings,
    *,
    command: list[str],
    env: dict[str, str],
    mounts: list[str],
    time_limit: str | None,
    workdir: Path | None = None,
) -> str:
    """The whole batch script. ``command`` is what ``srun`` starts on every node (torchrun, or a test payload), from
    ``workdir`` (the recipe's repository root, as torchrun started from the user's checkout; srun's tasks start in
    the script's folder) when given."""
    srun = ["srun", "--kill-on-bad-exit=1"]
    if settings.container_image:
        srun.append(f"--container-image={settings.container_image}")
        srun.append("--container-mounts=" + ",".join(dict.fromkeys([*settings.container_mounts, *mounts])))
        if workdir is not None:
            srun.append(f"--container-workdir={workdir}")  # pyxis: else the image's own working directory
    lines = [
        "#!/bin/bash",
        f"# ATTUNE trial of {recipe.name}: {recipe.cluster.nodes} node(s) x {recipe.cluster.devices_per_node} rank(s),",
        "# in the shape of torchtitan's multinode_trainer.slurm (see bot/runner/slurmscript.py).",
        *sbatch_lines(recipe, settings, time_limit=time_limit),
        "set -eo pipefail",
        *settings.prologue,
        'nodes=( $(scontrol show hostnames "$SLURM_JOB_NODELIST") )',
        "head_node=${nodes[0]}",
        "head_addr=$(scontrol show node \"$head_node\" | sed -n 's/.*NodeAddr=\\([^ ]*\\).*/\\1/p' | head -n 1)",
        "head_addr=${head_addr:-$head_node}",
        'echo "attune: nodes ${nodes[*]}, rendezvous at $head_addr"',
    ]
    for key, value in env.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise ValueError(f"env: {key!r} is not an environment variable name (letters, digits, _)")
        if key == "PYTHONPATH":
            lines.append(f"export PYTHONPATH={shlex.quote(value)}${{PYTHONPATH:+:$PYTHONPATH}}")
        else:
            lines.append(f"export {key}={shlex.quote(value)}")
    lines.append(f"export TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE={shlex.quote(PREFIX_TEMPLATE)}")
    if workdir is not None:
        lines.append(f"cd {shlex.quote(str(workdir))}")
    lines.append(" ".join(_word(a) for a in [*srun, *command]))
    return "\n".join(lines) + "\n"
