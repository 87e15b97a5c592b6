"""What Slurm's commands print, read into pydantic models (pure functions; the samples in the tests are real output).

- ``sbatch --parsable``: ``<job id>[;<cluster>]`` (https://slurm.schedmd.com/sbatch.html#OPT_parsable).
- ``squeue -h -j ID -o SQUEUE_FORMAT``: one ``|``-separated line while the job is known to the queue
  (https://slurm.schedmd.com/squeue.html#OPT_format).
- ``scontrol show job -o ID``: one line of ``Key=Value`` pairs while slurmctld still holds the job (``MinJobAge``).
- the job completion log (``JobCompType=jobcomp/filetxt``): one ``Key=Value`` line per finished job.
- ``sacct -n -P -X -j ID -o SACCT_FIELDS``: one ``|``-separated line, where accounting is on (slurmdbd).

Times are Slurm's local ``YYYY-MM-DDTHH:MM:SS`` (``Unknown``/``None``/``N/A`` when unset); only their differences
are used.
"""

from __future__ import annotations

import re
from datetime import datetime

from pydantic import BaseModel

SQUEUE_FORMAT = "%i|%T|%r|%V|%S|%N|%D"  # id, state, reason, submit, start, nodes, node count
SACCT_FIELDS = "JobID,State,ExitCode,Submit,Start,End,NodeList,NNodes,Reason"
# job states after which a job never runs again (https://slurm.schedmd.com/squeue.html#SECTION_JOB-STATE-CODES)
TERMINAL = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "PREEMPTED",
    "OUT_OF_MEMORY",
    "BOOT_FAIL",
    "DEADLINE",
    "SPECIAL_EXIT",
    "REVOKED",
}
REQUEUED = {"REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"}
_PAIR = re.compile(r"(?:^|\s)([A-Za-z][\w:/]*)=(.*?)(?=\s+[A-Za-z][\w:/]*=|\s*$)")


class JobInfo(BaseModel):
    """One job as Slurm reports it (any of the sources above)."""

    job_id: str
    state: str  # the base state: COMPLETED, RUNNING, CANCELLED, ... ("CANCELLED by 0" -> CANCELLED)
    reason: str = ""
    exit_code: str = ""  # "<code>:<signal>"
    submit: datetime | None = None
    start: datetime | None = None
    end: datetime | None = None
    node_list: str = ""
    num_nodes: int | None = None
    restarts: int = 0
    source: str = ""  # squeue, scontrol, jobcomp or sacct

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL

    @property
    def elapsed_s(self) -> float | None:
        """Running time, start to end (Slurm's clock; whole seconds)."""
        if self.start is None or self.end is None:
            return None
        return max(0.0, (self.end - self.start).total_seconds())

    @property
    def queue_wait_s(self) -> float | None:
        if self.submit is None or self.start is None:
            return None
        return max(0.0, (self.start - self.submit).total_seconds())


class SlurmTextError(ValueError):
    """Slurm printed something these parsers do not understand (the text is quoted)."""


def when(text: str) -> datetime | None:
    text = text.strip()
    if not text or text in ("Unknown", "None", "N/A", "(null)"):
        return None
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S")
    except ValueError:
        return None


def base_state(text: str) -> str:
    """``CANCELLED by 0`` -> ``CANCELLED``; ``COMPLETED+`` (sacct) -> ``COMPLETED``."""
    return text.strip().split()[0].rstrip("+") if text.strip() else ""


def parse_sbatch(text: str) -> str:
    """The job id from ``sbatch --parsable`` output (the last non-empty line; warnings may come first)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        raise SlurmTextError("sbatch printed no job id")
    job_id = lines[-1].split(";", 1)[0]
    if not job_id.isdigit():
        raise SlurmTextError(f"sbatch printed {lines[-1][:200]!r}; expected a job id")
    return job_id


def parse_squeue(text: str, job_id: str) -> JobInfo | None:
    """The job's line from ``squeue -h -o SQUEUE_FORMAT``, or None when the queue no longer lists it."""
    for line in text.splitlines():
        fields = line.strip().split("|")
        if len(fields) != 7 or fields[0].split("_")[0] != job_id:
            continue
        jid, state, reason, submit, start, nodes, count = fields
        return JobInfo(
            job_id=job_id,
            state=base_state(state),
            reason=reason if reason != "None" else "",
            submit=when(submit),
            start=when(start),
            node_list=nodes,
            num_nodes=int(count) if count.isdigit() else None,
            source="squeue",
        )
    return None


def pairs(line: str) -> dict[str, str]:
    """``Key=Value`` pairs of one ``scontrol -o`` or job completion log line (values may hold ``=``)."""
    return {m.group(1): m.group(2).strip() for m in _PAIR.finditer(line)}


def _from_pairs(kv: dict[str, str], job_id: str, source: str) -> JobInfo:
    restarts = kv.get("Restarts", "0")
    count = kv.get("NumNodes", kv.get("NodeCnt", ""))
    return JobInfo(
        job_id=job_id,
        state=base_state(kv.get("JobState", "")),
        reason=kv.get("Reason", "") if kv.get("Reason") != "None" else "",
        exit_code=kv.get("ExitCode", ""),
        submit=when(kv.get("SubmitTime", "")),
        start=when(kv.get("StartTime", "")),
        end=when(kv.get("EndTime", "")),
        node_list=kv.get("NodeList", "") if kv.get("NodeList") != "(null)" else "",
        num_nodes=int(count.split("-")[0]) if count.split("-")[0].isdigit() else None,
        restarts=int(restarts) if restarts.isdigit() else 0,
        source=source,
    )


def parse_scontrol(text: str, job_id: str) -> JobInfo | None:
    """``scontrol show job -o ID``: the job, or None when slurmctld no longer holds it."""
    for line in text.splitlines():
        kv = pairs(line)
        if kv.get("JobId") == job_id and "JobState" in kv:
            return _from_pairs(kv, job_id, "scontrol")
    return None


def parse_jobcomp(text: str, job_id: str) -> JobInfo | None:
    """The job's last line in a ``jobcomp/filetxt`` completion log, or None."""
    found = None
    for line in text.splitlines():
        if f"JobId={job_id} " not in line + " ":
            continue
        kv = pairs(line)
        if kv.get("JobId") == job_id and "JobState" in kv:
            found = _from_pairs(kv, job_id, "jobcomp")
    return found


def parse_sacct(text: str, job_id: str) -> JobInfo | None:
    """The allocation's line of ``sacct -n -P -X -o SACCT_FIELDS``, or None."""
    names = SACCT_FIELDS.split(",")
    for line in text.splitlines():
        fields = line.strip().split("|")
        if len(fields) != len(names) or fields[0] != job_id:
            continue
        row = dict(zip(names, fields, strict=True))
        return JobInfo(
            job_id=job_id,
            state=base_state(row["State"]),
            reason=row["Reason"] if row["Reason"] != "None" else "",
            exit_code=row["ExitCode"],
            submit=when(row["Submit"]),
            start=when(row["Start"]),
            end=when(row["End"]),
            node_list=row["NodeList"] if row["NodeList"] != "None assigned" else "",
            num_nodes=int(row["NNodes"]) if row["NNodes"].isdigit() else None,
            source="sacct",
        )
    return None


def config_value(text: str, key: str) -> str | None:
    """A value from ``scontrol show config`` (``Key  = Value`` lines)."""
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        if sep and name.strip() == key:
            return value.strip()
    return None
