"""A real two-node Slurm on this host for the tests: one slurmctld and two slurmd (``n1``, ``n2``), munged.

Debian's ``slurm-wlm`` and ``munge`` packages are installed with apt when ``sbatch`` is missing and we are root.
Everything else lives in a temporary folder: ``slurm.conf`` (two nodes on ``localhost``/127.0.0.1 with a port each,
``slurmd -N nX``; short ``SlurmdTimeout`` and ``KillWait``; a job completion log ``jobcomp/filetxt`` instead of
slurmdbd; two partitions, ``debug`` and ``urgent``, where a job in ``urgent`` preempts (cancels) one in ``debug``),
``cgroup.conf``, a munge key and socket of its own, state, spool and logs. Clients find it through
``SLURM_CONF`` (:attr:`SlurmCluster.env`). :meth:`SlurmCluster.stop` cancels every job, waits for the queue to
drain and stops the daemons it started, by their process ids.

Configuration keys: https://slurm.schedmd.com/slurm.conf.html (22.05, the version Debian 12 ships).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

SBIN = "/usr/sbin:/sbin:/usr/bin:/bin"
NODES = ("n1", "n2")
PACKAGES = ("slurm-wlm", "munge")


class ClusterError(RuntimeError):
    """The Slurm cluster could not be brought up (the message says which step and shows its log)."""


def _which(name: str) -> str | None:
    return shutil.which(name, path=os.environ.get("PATH", "") + os.pathsep + SBIN)


def install_packages() -> str | None:
    """Install slurm-wlm and munge with apt when ``sbatch`` is missing; None when ready, else why not."""
    if all(_which(b) for b in ("sbatch", "slurmctld", "slurmd", "munged")):
        return None
    if os.geteuid() != 0:
        return "slurm-wlm/munge are not installed and the tests do not run as root (apt-get install needs root)"
    if _which("apt-get") is None:
        return "slurm-wlm/munge are not installed and there is no apt-get"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", "--no-install-recommends", *PACKAGES]):
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=900)
        if done.returncode != 0:
            return f"{' '.join(argv)} failed: {(done.stderr or done.stdout).strip()[-500:]}"
    missing = [b for b in ("sbatch", "slurmctld", "slurmd", "munged") if _which(b) is None]
    return f"installed {', '.join(PACKAGES)} but {missing} are still missing" if missing else None


def free_ports(n: int) -> list[int]:
    """``n`` distinct TCP ports that are free on 127.0.0.1 right now."""
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def slurm_conf(root: Path, *, ctld_port: int, node_ports: list[int], cpus: int) -> str:
    munge = root / "munge" / "munge.socket"
    lines = [
        "ClusterName=attune-test",
        "SlurmctldHost=localhost(127.0.0.1)",
        f"SlurmctldPort={ctld_port}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={munge}",
        f"StateSaveLocation={root / 'state'}",
        f"SlurmdSpoolDir={root / 'spool'}/%n",
        f"SlurmctldPidFile={root / 'slurmctld.pid'}",
        f"SlurmdPidFile={root}/slurmd-%n.pid",
        f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}",
        f"SlurmdLogFile={root / 'log'}/slurmd-%n.log",
        "ProctrackType=proctrack/linuxproc",  # no cgroups needed
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",  # no slurmdbd: the completion log below instead
        "JobCompType=jobcomp/filetxt",
        f"JobCompLoc={root / 'jobcomp.txt'}",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        "MpiDefault=none",
        "ReturnToService=2",
        "SlurmdTimeout=10",  # a node that stops answering is down after 10 s
        "SlurmctldTimeout=10",
        "MessageTimeout=10",
        "KillWait=2",  # SIGTERM to SIGKILL when a job is cancelled, preempted or over its time limit
        "MinJobAge=300",  # finished jobs stay in scontrol for 5 minutes
        "InactiveLimit=0",
        "PreemptType=preempt/partition_prio",
        "PreemptMode=CANCEL",
    ]
    for name, port in zip(NODES, node_ports, strict=True):
        lines.append(f"NodeName={name} NodeHostname=localhost NodeAddr=127.0.0.1 Port={port} CPUs={cpus} State=UNKNOWN")
    nodes = ",".join(NODES)
    lines.append(f"PartitionName=debug Nodes={nodes} Default=YES MaxTime=INFINITE State=UP PriorityTier=1")
    lines.append(f"PartitionName=urgent Nodes={nodes} MaxTime=INFINITE State=UP PriorityTier=2")
    return "\n".join(lines) + "\n"


@dataclass
class SlurmCluster:
    root: Path
    env: dict[str, str]  # SLURM_CONF (and PATH with sbin) for Slurm's client commands
    pids: dict[str, int] = field(default_factory=dict)

    def run(self, *argv: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(list(argv), capture_output=True, text=True, env=self.env, timeout=timeout)
        if check and done.returncode != 0:
            raise ClusterError(f"{' '.join(argv)}: {(done.stderr or done.stdout).strip()}")
        return done

    def node_states(self) -> dict[str, str]:
        out = self.run("sinfo", "-h", "-N", "-o", "%N %T", check=False).stdout
        states = {}
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 2:
                states[parts[0]] = parts[1]
        return states

    def wait_idle(self, timeout: float = 60.0) -> None:
        """Until every node is idle (the daemons are up and no job holds a node)."""
        deadline = time.monotonic() + timeout
        states: dict[str, str] = {}
        while time.monotonic() < deadline:
            states = self.node_states()
            if set(states) == set(NODES) and all(s == "idle" for s in states.values()):
                return
            time.sleep(0.5)
        raise ClusterError(f"nodes not idle after {timeout:.0f}s: {states}\n{self.logs()}")

    def resume(self, node: str) -> None:
        """Bring a node set down by a test back (it may already be back: ReturnToService=2)."""
        if self.node_states().get(node, "").startswith(("down", "drain")):
            self.run("scontrol", "update", f"nodename={node}", "state=resume", check=False)

    def jobs(self) -> list[str]:
        return self.run("squeue", "-h", "-o", "%i", check=False).stdout.split()

    def cancel_all(self, timeout: float = 60.0) -> None:
        ids = self.jobs()
        if ids:
            self.run("scancel", *ids, check=False)
        deadline = time.monotonic() + timeout
        while self.jobs() and time.monotonic() < deadline:
            time.sleep(0.5)

    def logs(self) -> str:
        out = []
        for path in sorted((self.root / "log").glob("*.log")) + [self.root / "munge" / "munged.log"]:
            if path.exists():
                out.append(f"--- {path.name}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-15:]))
        return "\n".join(out)

    def stop(self) -> None:
        """Cancel every job, wait for the queue to drain, then stop the daemons started here (by pid)."""
        try:
            if "slurmctld" in self.pids:
                self.cancel_all()
        finally:
            for name in [n for n in self.pids if n.startswith("slurmd")] + ["slurmctld", "munged"]:
                pid = self.pids.pop(name, None)
                if pid is not None:
                    _terminate(pid)
            shutil.rmtree(self.root, ignore_errors=True)


def _pid_from(path: Path, timeout: float = 15.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            return int(path.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            time.sleep(0.1)
    raise ClusterError(f"no pid file {path} after {timeout:.0f}s")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def _terminate(pid: int, wait: float = 10.0) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not _alive(pid):
                return
            time.sleep(0.1)


def start() -> SlurmCluster:
    """Write the configuration, start munged, slurmctld and two slurmd, and wait until both nodes are idle.

    Raises :class:`ClusterError` (with the daemons' logs) after stopping whatever did start."""
    root = Path(tempfile.mkdtemp(prefix="attune-slurm-"))
    root.chmod(0o755)  # munged wants the socket's folders reachable by all
    for sub in ("state", "log", "munge", *(f"spool/{n}" for n in NODES)):
        (root / sub).mkdir(parents=True, exist_ok=True)
    ctld_port, *node_ports = free_ports(1 + len(NODES))
    conf = root / "slurm.conf"
    conf.write_text(
        slurm_conf(root, ctld_port=ctld_port, node_ports=node_ports, cpus=max(1, min(2, os.cpu_count() or 1)))
    )
    (root / "cgroup.conf").write_text("CgroupPlugin=autodetect\n")  # unused: proctrack/linuxproc
    key = root / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    env = {**os.environ, "SLURM_CONF": str(conf), "PATH": os.environ.get("PATH", "") + os.pathsep + SBIN}
    cluster = SlurmCluster(root=root, env=env)
    m = root / "munge"
    try:
        cluster.run(
            _which("munged") or "munged",
            "--force",
            f"--socket={m / 'munge.socket'}",
            f"--key-file={key}",
            f"--pid-file={m / 'munged.pid'}",
            f"--log-file={m / 'munged.log'}",
            f"--seed-file={m / 'munged.seed'}",
        )
        cluster.pids["munged"] = _pid_from(m / "munged.pid")
        cluster.run(_which("slurmctld") or "slurmctld", "-i")
        cluster.pids["slurmctld"] = _pid_from(root / "slurmctld.pid")
        for node in NODES:
            cluster.run(_which("slurmd") or "slurmd", "-N", node)
            cluster.pids[f"slurmd-{node}"] = _pid_from(root / f"slurmd-{node}.pid")
        cluster.wait_idle()
    except (ClusterError, OSError, subprocess.SubprocessError) as exc:
        logs = cluster.logs()
        cluster.stop()
        raise ClusterError(f"{exc}\n{logs}") from None
    return cluster
