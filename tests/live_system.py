"""A whole live system on loopback for tests: broker, scheduler, agents and feeder as real
processes, each of which can be killed and restarted. Waits are on observable state (the
scheduler's status, files appearing), each with a deadline."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from broker.client import RequestFailed, Requester, RequestTimeout
from broker.endpoints import Endpoints
from broker.testing import wait_until
from scheduler.tools.report import read_records
from trainer.ledger import LedgerVerdict, judge_run_dir, read_ledgers

ROOT = Path(__file__).resolve().parents[1]


def _env() -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    return env


def trainer_env() -> dict[str, str]:
    """The environment a trainer started by hand gets (one CPU thread, this checkout)."""
    return _env()


def write_spec(path: Path, nodes: int, gpus_per_node: int) -> Path:
    """A one-switch cluster spec file, for clusters of real torch trainers."""
    path.write_text("num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\n"
                    f"1,{nodes},{gpus_per_node},8,64\n")
    return path


def wait_for(predicate, timeout: float, what: str, every: float = 0.2):
    """Poll another process's observable state until it holds, naming what was awaited."""
    try:
        return wait_until(predicate, timeout, every)
    except AssertionError:
        raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}") from None


@dataclass
class LiveCluster:
    run_dir: Path
    spec: str
    nodes: int
    gpus_per_node: int
    policy: str = "muri-s"
    time_scale: float = 100.0
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    broker_ports: tuple[int, int, int] | None = None
    scheduler_args: list[str] = field(default_factory=list)
    # node i's agent, and so its trainers, on CPU core agent_cores[i % len]: real torch
    # trainers of two "nodes" then do not compete for one core (empty: no pinning)
    agent_cores: tuple[int, ...] = ()
    # a command the scheduler runs under (e.g. strace -f -o FILE): what it does, seen from outside
    scheduler_wrapper: list[str] = field(default_factory=list)
    broker_args: list[str] = field(default_factory=list)  # e.g. --keys DIR
    # a keyed broker: each component's secret key file, by its name or the part before "-"
    # ("scheduler"; "agent-nI", the one key the broker lets serve node I's agent; "test" for
    # this object's own status queries)
    client_keys: dict[str, Path] = field(default_factory=dict)
    # where each process's stdout and stderr go (<name>.stderr); None: the run dir
    stderr_dir: Path | None = None
    # more arguments for the named processes ("scheduler", "agent-n0", ...: --http, --metrics)
    extra: dict[str, list[str]] = field(default_factory=dict)

    @property
    def endpoints_file(self) -> Path:
        return self.run_dir / "endpoints.json"

    def key_of(self, name: str) -> Path | None:
        return self.client_keys.get(name) or self.client_keys.get(name.split("-")[0])

    def _spawn(self, name: str, args: list[str], wrapper: Sequence[str] = ()) -> subprocess.Popen:
        log = open((self.stderr_dir or self.run_dir) / f"{name}.stderr", "ab")
        env, key = _env(), self.key_of(name)
        if key is not None:
            env["INTERLACE_CLIENT_KEY"] = str(key)
        args = [*args, *self.extra.get(name, [])]
        proc = subprocess.Popen([*wrapper, sys.executable, *args], cwd=ROOT, env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        self.procs[name] = proc
        return proc

    # -- components ------------------------------------------------------------------------
    def start_broker(self) -> None:
        ports = ",".join(map(str, self.broker_ports)) if self.broker_ports else "0,0,0"
        if self.endpoints_file.exists() and self.broker_ports is None:
            self.endpoints_file.unlink()
        self._spawn("broker", ["-m", "broker.broker", "--ports", ports, "--endpoints-file",
                               str(self.endpoints_file), "--run-dir", str(self.run_dir),
                               *self.broker_args])
        wait_for(self.endpoints_file.exists, 30, "the broker's endpoints file")
        if self.broker_ports is None:
            ep = Endpoints.load(self.endpoints_file)
            self.broker_ports = tuple(int(a.rsplit(":", 1)[1])
                                      for a in (ep.events_in, ep.events_out, ep.requests))

    def start_scheduler(self) -> None:
        self._spawn("scheduler", ["-m", "scheduler.live", "--spec", self.spec, "--policy",
                                  self.policy, "--endpoints", str(self.endpoints_file),
                                  "--run-dir", str(self.run_dir), "--time-scale",
                                  str(self.time_scale), "--round", "5", "--agent-timeout", "6",
                                  *self.scheduler_args], self.scheduler_wrapper)

    def start_agent(self, i: int) -> None:
        gpus = ",".join(str(g) for g in range(self.gpus_per_node))
        proc = self._spawn(f"agent-n{i}", ["-m", "node_agent.agent", "--node", f"n{i}", "--gpus",
                                           gpus, "--cpus", "32", "--mem", "128", "--endpoints",
                                           str(self.endpoints_file), "--run-dir",
                                           str(self.run_dir), "--time-scale",
                                           str(self.time_scale)])
        if self.agent_cores:  # set before the agent starts any trainer, which inherits it
            os.sched_setaffinity(proc.pid, {self.agent_cores[i % len(self.agent_cores)]})

    def start(self) -> "LiveCluster":
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.start_broker()
        self.start_scheduler()
        for i in range(self.nodes):
            self.start_agent(i)
        wait_for(lambda: self._online() == self.nodes, 60, "every agent to register")
        return self

    def feed(self, trace: Path) -> subprocess.Popen:
        return self._spawn("feeder", ["-m", "traces.feeder", str(trace), "--endpoints",
                                      str(self.endpoints_file), "--time-scale",
                                      str(self.time_scale), "--run-dir", str(self.run_dir),
                                      "--patience", "120"])

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        proc = self.procs[name]
        if proc.poll() is None:
            os.killpg(proc.pid, sig)
        proc.wait(timeout=30)

    def stop_all(self) -> None:
        for name in list(self.procs):
            proc = self.procs[name]
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                    proc.wait(timeout=15)
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    try:
                        os.killpg(proc.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass

    # -- observing -------------------------------------------------------------------------
    def status(self) -> dict | None:
        try:
            requester = self.requester("test", timeout=2.0, retries=1)
        except (OSError, ValueError):
            return None
        try:
            return requester.request("scheduler", "status.query", what="all").get("body")
        except (RequestFailed, RequestTimeout):
            return None
        finally:
            requester.close()

    def requester(self, name: str, **options) -> Requester:
        """A requester on the broker, with `name`'s key where the broker is keyed."""
        from broker.curve import attach_client_key

        endpoints = Endpoints.load(self.endpoints_file)
        key = self.key_of(name)
        if key is not None:
            endpoints = attach_client_key(endpoints, str(key))
        return Requester(endpoints, name, **options)

    def _online(self) -> int:
        status = self.status() or {}
        return sum(1 for a in (status.get("agents") or {}).values() if a.get("online"))

    def finished_count(self) -> int:
        status = self.status() or {}
        return (status.get("counts") or {}).get("finished", 0)

    def wait_finished(self, n: int, timeout: float) -> dict:
        wait_for(lambda: self.finished_count() >= n, timeout, f"{n} jobs to finish", every=1.0)
        return self.status()

    def finished_events(self) -> list[dict]:
        return log_records(self.run_dir, "job_finished")

    def ledger_records(self) -> list[dict]:
        """The trainers' ledger records so far (trainer/ledger.py); unreadable lines skipped."""
        return read_ledgers(self.run_dir)[0]

    def ledger_verdict(self, totals: dict[int, float],
                       deaths: dict[int, float] | None = None) -> LedgerVerdict:
        """Exactly-once as the trainers saw it, judged from their ledgers alone."""
        return judge_run_dir(self.run_dir, totals, deaths)


def log_records(run_dir: Path, event: str, component: str = "scheduler") -> list[dict]:
    """The JSON log records of one event in RUN_DIR/<component>*.log (unreadable lines are
    skipped: a process killed mid-write leaves half a line)."""
    return [rec for path in sorted(Path(run_dir).glob(f"{component}*.log"))
            for rec in read_records(path)[0] if rec["event"] == event]
