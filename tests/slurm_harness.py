"""A real Slurm on this machine for tests: munged, slurmctld and one or more slurmd, loopback
only, free ports, a generated slurm.conf in a temporary folder, all torn down afterwards.

Why real daemons: the launcher's value is in how it meets Slurm (the environment a batch
script sees, `srun` steps, what `scancel` and a requeue send to which process), and only
Slurm itself says that truthfully. Several slurmd run on the one host, each with its own
NodeName (`slurmd -N`), port and spool folder; the "GPUs" are logical ids, as in the emulated
tests. Must run as root (slurmd starts job steps as the submitting user). No slurmdbd, so no
`sacct`: job steps are seen with `squeue --steps`.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "srun", "squeue", "scontrol", "scancel", "sinfo")


def missing() -> str | None:
    """Why a Slurm cannot be started here, or None when it can."""
    absent = [b for b in DAEMONS + CLIENTS if not _which(b)]
    if absent:
        return f"Slurm binaries absent ({', '.join(absent)}); install slurm-wlm and munge"
    if os.geteuid() != 0:
        return "the Slurm harness runs slurmd, which must run as root"
    return None


def _which(name: str) -> str | None:
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")


def free_ports(n: int) -> list[int]:
    """n distinct free TCP ports on loopback (held open together so none repeats)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _conf(root: Path, nodes: list[str], ports: list[int], cpus: int, host: str) -> str:
    ctl_port, node_ports = ports[0], ports[1:]
    lines = [
        "ClusterName=interlace-test",
        f"SlurmctldHost={host}(127.0.0.1)",
        f"SlurmctldPort={ctl_port}",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"StateSaveLocation={root / 'state'}",
        f"SlurmdSpoolDir={root / 'spool' / '%n'}",
        f"SlurmctldPidFile={root / 'slurmctld.pid'}",
        f"SlurmdPidFile={root / 'slurmd-%n.pid'}",
        f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}",
        f"SlurmdLogFile={root / 'log' / 'slurmd-%n.log'}",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={root / 'munge' / 'socket'}",
        "ProctrackType=proctrack/pgid",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        "SchedulerType=sched/builtin",
        "SchedulerParameters=sched_interval=1",  # a job whose begin time passed starts now,
        # not at the next minute's pass (a requeued job released with StartTime=now+2)
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "ReturnToService=2",
        "MpiDefault=none",
        "SlurmctldTimeout=30",
        "SlurmdTimeout=30",
        "InactiveLimit=0",
        "MinJobAge=300",
        "KillWait=20",
        "Waittime=0",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        "JobRequeue=1",
        "PrologFlags=NoHold",
        "SlurmdParameters=config_overrides",  # nodes may claim more CPUs than the host has
    ]
    for name, port in zip(nodes, node_ports):
        lines.append(f"NodeName={name} NodeHostname={host} NodeAddr=127.0.0.1 Port={port} "
                     f"CPUs={cpus} RealMemory=1000 State=UNKNOWN")
    lines.append(f"PartitionName=test Nodes={','.join(nodes)} Default=YES MaxTime=INFINITE "
                 "State=UP OverSubscribe=NO")
    return "\n".join(lines) + "\n"


@dataclass
class SlurmCluster:
    """munged + slurmctld + `nodes` slurmd under `root`; `env()` is what clients need."""

    root: Path
    nodes: int = 2
    cpus: int = 32  # per node, as configured (the planner's CPU model wants several per GPU)
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    started_s: float = 0.0  # wall seconds from start() to every node idle

    @property
    def node_names(self) -> list[str]:
        return [f"sn{i}" for i in range(self.nodes)]

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    def env(self, **extra: str) -> dict[str, str]:
        return dict(os.environ, SLURM_CONF=str(self.conf), **extra)

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self, timeout: float = 60.0) -> "SlurmCluster":
        began = time.monotonic()
        for sub in ("state", "log", "munge", *(f"spool/{n}" for n in self.node_names)):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(self.root / "munge", 0o700)
        key = self.root / "munge" / "key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o600)
        host = socket.gethostname().split(".")[0]
        self.conf.write_text(_conf(self.root, self.node_names, free_ports(self.nodes + 1),
                                   self.cpus, host))
        self._spawn("munged", [_which("munged"), "-F", "-f", f"--key-file={key}",
                               f"--socket={self.root / 'munge' / 'socket'}",
                               f"--pid-file={self.root / 'munge' / 'pid'}",
                               f"--seed-file={self.root / 'munge' / 'seed'}",
                               f"--log-file={self.root / 'log' / 'munged.log'}"])
        self._wait(lambda: (self.root / "munge" / "socket").exists(), 10, "munged's socket")
        self._spawn("slurmctld", [_which("slurmctld"), "-D", "-i", "-f", str(self.conf)])
        self._wait(self._ctld_up, timeout, "slurmctld to answer")
        for name in self.node_names:
            self._spawn(f"slurmd-{name}", [_which("slurmd"), "-D", "-N", name,
                                           "-f", str(self.conf)])
        self._wait(self._nodes_idle, timeout, "every slurmd to register idle")
        self.started_s = time.monotonic() - began
        return self

    def stop(self) -> None:
        """Cancel what is left, then stop the daemons (slurmd first), each by its own pid."""
        if self.procs.get("slurmctld") and self.procs["slurmctld"].poll() is None:
            subprocess.run(["scancel", "--full", "--partition=test"], env=self.env(),
                           capture_output=True, timeout=20)
            deadline = time.monotonic() + 30  # a job's processes end before their slurmd
            while self.run("squeue", "-h", "-o", "%i", check=False).strip() \
                    and time.monotonic() < deadline:
                time.sleep(0.3)
        for name in [n for n in self.procs if n.startswith("slurmd-")] + ["slurmctld", "munged"]:
            proc = self.procs.get(name)
            if proc is None or proc.poll() is not None:
                continue
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)

    def __enter__(self) -> "SlurmCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.root / "log" / f"{name}.stderr", "ab")
        self.procs[name] = subprocess.Popen(argv, env=self.env(), stdout=log,
                                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()

    def _wait(self, predicate, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            dead = [n for n, p in self.procs.items() if p.poll() is not None]
            if dead:
                raise RuntimeError(f"{', '.join(dead)} exited while waiting for {what}; "
                                   f"see {self.root / 'log'}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}; "
                                   f"see {self.root / 'log'}")
            time.sleep(0.2)

    # -- asking Slurm ------------------------------------------------------------------------
    def run(self, *argv: str, check: bool = True, timeout: float = 30) -> str:
        done = subprocess.run(list(argv), env=self.env(), capture_output=True, text=True,
                              timeout=timeout)
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: rc {done.returncode}: {done.stderr.strip()}")
        return done.stdout

    def _ctld_up(self) -> bool:
        return subprocess.run(["scontrol", "ping"], env=self.env(), capture_output=True,
                              timeout=10).returncode == 0

    def _nodes_idle(self) -> bool:
        out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], env=self.env(),
                             capture_output=True, text=True, timeout=10).stdout
        states = dict(line.split() for line in out.splitlines() if line.strip())
        return all(states.get(n) == "idle" for n in self.node_names)

    def job_state(self, job_id: int) -> str:
        """The job's state (PENDING, RUNNING, COMPLETED, ...), from slurmctld."""
        out = self.run("scontrol", "-o", "show", "job", str(job_id), check=False)
        for part in out.split():
            if part.startswith("JobState="):
                return part.split("=", 1)[1]
        return ""

    def job_field(self, job_id: int, key: str) -> str:
        out = self.run("scontrol", "-o", "show", "job", str(job_id), check=False)
        for part in out.split():
            if part.startswith(f"{key}="):
                return part.split("=", 1)[1]
        return ""

    def steps(self, job_id: int) -> list[tuple[str, str, str]]:
        """The job's running steps as (step id, name, node list), from `squeue --steps`."""
        out = self.run("squeue", "-h", "--steps", "-j", str(job_id), "-o", "%i|%j|%N",
                       check=False)
        return [tuple(line.split("|", 2)) for line in out.splitlines() if line.count("|") == 2]

    def wait_ended(self, job_id: int, timeout: float) -> None:
        """Until no process of the job is left: a cancelled job is CANCELLED at once, but
        COMPLETING (squeue: CG) until its steps and batch script have exited."""
        deadline = time.monotonic() + timeout
        while self.run("squeue", "-h", "-j", str(job_id), "-o", "%T", check=False).strip():
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} still has processes after {timeout:.0f} s")
            time.sleep(0.3)

    def wait_state(self, job_id: int, states: set[str], timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while True:
            state = self.job_state(job_id)
            if state in states:
                return state
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} still {state!r} after {timeout:.0f} s, "
                                   f"wanted {sorted(states)}")
            time.sleep(0.5)
