"""A recipe's Slurm settings (``cluster.slurm``) and Slurm's duration format.

What a user sets to run a recipe's trials under Slurm (``launcher: slurm``): where the job goes (partition,
account, QOS), how long it may run (``time_limit``) and queue (``queue_budget``), what each node gets (GPUs or
gres, CPUs per task), extra ``#SBATCH`` lines, and how the compute nodes find torchtitan (a shell prologue such as
``module load`` / ``source venv/bin/activate``, or a container image for the pyxis ``srun --container-image``
plugin). Durations use Slurm's own forms (``sbatch --time``: "minutes", "minutes:seconds",
"hours:minutes:seconds", "days-hours", "days-hours:minutes", "days-hours:minutes:seconds";
https://slurm.schedmd.com/sbatch.html#OPT_time).
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator

_DURATION = re.compile(r"^(?:(?P<d>\d+)-)?(?P<rest>\d+(?::\d+){0,2})$")

# sbatch options the runner sets itself (the job's shape and where its output goes), or that have a field here
OWNED_OPTIONS = {
    "--nodes": "cluster.nodes",
    "-N": "cluster.nodes",
    "--ntasks": "the runner (one task per node)",
    "-n": "the runner (one task per node)",
    "--ntasks-per-node": "the runner (one task per node)",
    "--output": "the runner (the job log goes to the run folder)",
    "-o": "the runner (the job log goes to the run folder)",
    "--error": "the runner (the job log goes to the run folder)",
    "-e": "the runner (the job log goes to the run folder)",
    "--open-mode": "the runner",
    "--parsable": "the runner",
    "--requeue": "the runner (a requeued trial is not a measurement)",
    "--no-requeue": "the runner",
    "--partition": "cluster.slurm.partition",
    "-p": "cluster.slurm.partition",
    "--account": "cluster.slurm.account",
    "-A": "cluster.slurm.account",
    "--qos": "cluster.slurm.qos",
    "-q": "cluster.slurm.qos",
    "--time": "cluster.slurm.time_limit",
    "-t": "cluster.slurm.time_limit",
    "--gpus-per-node": "cluster.slurm.gpus_per_node",
    "--gres": "cluster.slurm.gres",
    "--cpus-per-task": "cluster.slurm.cpus_per_task",
    "-c": "cluster.slurm.cpus_per_task",
    "--wrap": "the runner (it writes the batch script)",
    "--array": "the runner (one job per trial)",
    "-a": "the runner (one job per trial)",
    "--chdir": "the runner (the job works in the run folder)",
    "-D": "the runner (the job works in the run folder)",
    "--input": "the runner",
    "-i": "the runner",
    # what changes the job's environment or the code it runs is never a recipe's: a step PR edits only levers
    "--export": "the runner (the job's environment)",
    "--export-file": "the runner (the job's environment)",
    "--get-user-env": "the runner (the job's environment)",
    "--container": "cluster.slurm.container_image",
    "--container-id": "cluster.slurm.container_image",
}
# real sbatch long options that are also the start of an owned one (getopt_long takes an exact name over a prefix)
_NOT_ABBREVIATIONS = {"--gpus"}
# one token on an #SBATCH line: sbatch splits the line into arguments at blanks and removes quotes and backslashes
_ONE_TOKEN = re.compile(r"^[^\s'\"\\#]+$")


def duration_s(text: str) -> int:
    """Seconds in a Slurm duration (``sbatch --time`` forms); ValueError for anything else."""
    m = _DURATION.match(text.strip())
    if not m:
        raise ValueError(f"{text!r} is not a Slurm duration (minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS)")
    parts = [int(p) for p in m["rest"].split(":")]
    if m["d"] is not None:  # days-hours[:minutes[:seconds]]
        h, mi, s = (parts + [0, 0])[:3]
        return ((int(m["d"]) * 24 + h) * 60 + mi) * 60 + s
    if len(parts) == 1:  # minutes
        return parts[0] * 60
    if len(parts) == 2:  # minutes:seconds
        return parts[0] * 60 + parts[1]
    return (parts[0] * 60 + parts[1]) * 60 + parts[2]


def minutes_text(seconds: float) -> str:
    """A whole number of minutes (at least 1), as ``sbatch --time`` takes it."""
    return str(max(1, int(seconds // 60)))


def _one_line(value: str) -> str:
    if "\n" in value or "\r" in value:
        raise ValueError("must be one line")
    return value


def owned_option(token: str) -> str | None:
    """The owned sbatch option that ``token`` (one argument of an #SBATCH line) sets, or None: an exact name, a
    short option with its value attached (``-N4``) or an abbreviation getopt_long would expand (``--outp=x``)."""
    if token.startswith("--"):
        name = token.split("=", 1)[0]
        if name in OWNED_OPTIONS:
            return name
        if len(name) > 2 and name not in _NOT_ABBREVIATIONS:
            return next((o for o in OWNED_OPTIONS if o.startswith(name)), None)
        return None
    if token.startswith("-") and len(token) > 1:
        return token[:2] if token[:2] in OWNED_OPTIONS else None
    return None


class SlurmSettings(BaseModel):
    """``cluster.slurm``: every field optional; unset ones are left to the cluster's defaults."""

    model_config = ConfigDict(extra="forbid")
    partition: str | None = Field(default=None, min_length=1)
    account: str | None = Field(default=None, min_length=1)
    qos: str | None = Field(default=None, min_length=1)
    time_limit: str | None = None  # the job's wall-clock limit (sbatch --time)
    queue_budget: str = "1:00:00"  # pending longer than this: cancelled, outcome pending_timeout
    gpus_per_node: int | None = Field(default=None, ge=0)  # default: devices_per_node on non-CPU hardware
    gres: str | None = Field(default=None, min_length=1)  # e.g. gpu:h100:8 (instead of gpus_per_node)
    cpus_per_task: int | None = Field(default=None, ge=1)  # one task per node: the node's CPUs for its ranks
    extra_sbatch: list[str] = Field(default_factory=list)  # more #SBATCH options, e.g. --exclusive, --mem=0
    prologue: list[str] = Field(default_factory=list)  # shell lines before srun, e.g. module load cuda/12.4
    container_image: str | None = Field(default=None, min_length=1)  # pyxis: srun --container-image
    container_mounts: list[str] = Field(default_factory=list)  # pyxis --container-mounts (the run folder is added)
    torchrun: str | None = Field(default=None, min_length=1)  # the command that starts torchrun on the compute nodes
    rdzv_port: int = Field(default=29500, ge=1024, le=65535)  # c10d rendezvous port on the head node

    @field_validator("partition", "account", "qos", "gres", "container_image", "torchrun")
    @classmethod
    def _single_line(cls, value: str | None) -> str | None:
        if value is not None and (not value.strip() or any(c in value for c in "\n\r")):
            raise ValueError("expected one non-blank line")
        return value

    @field_validator("partition", "account", "qos", "gres")
    @classmethod
    def _single_token(cls, value: str | None) -> str | None:
        if value is not None and value.strip() and not _ONE_TOKEN.match(value):
            raise ValueError(
                f"{value!r}: expected one word (no blanks, quotes, backslashes or #): it becomes one "
                "argument of an #SBATCH line"
            )
        return value

    @field_validator("time_limit", "queue_budget", mode="before")
    @classmethod
    def _duration(cls, value: object) -> object:
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)  # YAML reads a bare number of minutes as an int
        if not isinstance(value, str | None):
            return value  # pydantic says what was expected
        if value is not None and duration_s(value) <= 0:
            raise ValueError(f"{value!r} must be longer than zero")
        return value

    @field_validator("extra_sbatch")
    @classmethod
    def _sbatch_options(cls, value: list[str]) -> list[str]:
        for option in value:
            _one_line(option)
            if not option.startswith("-"):
                raise ValueError(
                    f"{option!r}: expected an sbatch option such as --exclusive or --mem=0 (without #SBATCH)"
                )
            if any(c in option for c in "'\"\\"):
                raise ValueError(
                    f"{option!r}: expected no quotes or backslashes (sbatch removes them, so they can hide an option)"
                )
            for token in option.split():  # sbatch reads every argument of the line, not only the first
                name = owned_option(token)
                if name is not None:
                    raise ValueError(f"{option!r}: {name} is set by {OWNED_OPTIONS[name]}")
        return value

    @field_validator("prologue", "container_mounts")
    @classmethod
    def _lines(cls, value: list[str]) -> list[str]:
        for line in value:
            _one_line(line)
        return value

    @property
    def time_limit_s(self) -> int | None:
        return None if self.time_limit is None else duration_s(self.time_limit)

    @property
    def queue_budget_s(self) -> int:
        return duration_s(self.queue_budget)
