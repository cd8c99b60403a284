"""Inside a Slurm allocation: start Interlace on it, and stop it the way Slurm users expect.

Why a supervisor and not a shell script: the order of shutdown matters. Every agent must
checkpoint its trainers and report before the scheduler and the broker go, so that the
journal is closed with nothing in flight and a requeued start resumes from it. Slurm's own
signals reach the steps all at once; this process also stops them in order when it is the
one told (the time limit's warning signal, or SIGTERM to the batch step), and on the warning
it requeues the job itself, since Slurm never requeues a job that ran out of time.

Layout: the broker, the scheduler and the feeder run here, in the batch step on the first
node; each node's agent is a job step of its own (`steps.agent_step`). Everything lives in
the run directory on the shared file system: keys/, spec.csv, endpoints.json, journal.db,
checkpoints/, ledger/ and every component's log.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from broker.keys import generate
from scheduler.tools.slurm import steps
from scheduler.tools.slurm.allocation import Allocation

ROOT = Path(__file__).resolve().parents[3]  # the checkout: PYTHONPATH of every step
DONE, CANCELLED, TIME_LIMIT, FAILED = "done", "cancelled", "time limit", "failed"


@dataclass(frozen=True)
class Settings:
    """What `interlace-slurm run` was told."""

    run_dir: Path
    time_scale: float = 1.0
    policy: str = "muri-s"
    trace: str | None = None  # None: no feeder, jobs come from interlace-submit
    host: str | None = None  # the broker's interface; None: this node's address
    requeue: bool = True  # on the time-limit warning, requeue after checkpointing
    stop_timeout: float = 20.0  # seconds the agent steps get to checkpoint and exit
    slurm_gpus: bool = False  # GPUs came from Slurm's GRES: ask for them in each step
    scheduler_args: tuple[str, ...] = ()
    agent_args: tuple[str, ...] = ()


class Stop:
    """Why the launcher should stop (set once, from a signal handler or the loop)."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.reason = ""

    def set(self, reason: str) -> None:
        if not self.event.is_set():
            self.reason = reason
            self.event.set()


class Launcher:
    def __init__(self, settings: Settings, alloc: Allocation, log: Any,
                 python: str = sys.executable):
        self.s, self.alloc, self.log, self.python = settings, alloc, log, python
        self.run_dir = Path(settings.run_dir).resolve()
        self.procs: dict[str, subprocess.Popen] = {}
        self.env = dict(os.environ, PYTHONUNBUFFERED="1",
                        PYTHONPATH=os.pathsep.join(
                            [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))

    # -- start ----------------------------------------------------------------------------
    def prepare(self) -> None:
        """Keys (kept across requeues), the spec of this allocation, no stale endpoints."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        agents = [f"agent-{self.alloc.agent_name(i)}" for i in range(len(self.alloc.nodes))]
        generate(self.run_dir / steps.KEYS, ["scheduler", "feeder", "submit", *agents])
        (self.run_dir / "spec.csv").write_text(self.alloc.spec_csv())
        (self.run_dir / "endpoints.json").unlink(missing_ok=True)  # a requeue's old ports

    def start(self) -> None:
        run, key = self.run_dir, lambda name: str(steps.client_key(self.run_dir, name))
        endpoints = str(run / "endpoints.json")
        host = self.s.host or socket.gethostbyname(socket.gethostname())
        self._spawn("broker", [self.python, "-m", "broker.broker", "--host", host, "--keys",
                               str(run / steps.KEYS), "--endpoints-file", endpoints,
                               "--run-dir", str(run)])
        self._await(lambda: Path(endpoints).exists(), 60, "the broker's endpoints file")
        self._spawn("scheduler", [self.python, "-m", "scheduler.live", "--spec",
                                  str(run / "spec.csv"), "--policy", self.s.policy,
                                  "--endpoints", endpoints, "--run-dir", str(run),
                                  "--time-scale", repr(self.s.time_scale),
                                  "--client-key", key("scheduler"), *self.s.scheduler_args])
        for i in range(len(self.alloc.nodes)):
            self._spawn(steps.step_name(self.alloc, i), steps.agent_step(
                self.python, self.alloc, i, run, self.s.time_scale,
                slurm_gpus=self.s.slurm_gpus, agent_args=self.s.agent_args))
        if self.s.trace:
            catch_up = ["--speedup"] if self.alloc.restarts else []  # re-fed jobs are dropped
            self._spawn("feeder", [self.python, "-m", "traces.feeder", self.s.trace,
                                   "--endpoints", endpoints, "--time-scale",
                                   repr(self.s.time_scale), "--run-dir", str(run), "--wait",
                                   "--patience", "120", "--client-key", key("feeder"),
                                   *catch_up])
        self.log.info("slurm_started", job=self.alloc.job_id, nodes=list(self.alloc.nodes),
                      restarts=self.alloc.restarts, gpus_per_node=self.alloc.gpus_per_node,
                      broker_host=host, trace=self.s.trace)

    def _spawn(self, name: str, argv: list[str]) -> None:
        """Each in a session of its own, so Slurm's signal to the batch step reaches only
        this process, which stops them in order. Above all `srun` must not get it: srun
        turns a SIGTERM into a SIGKILL of its step, killing an agent mid-checkpoint."""
        with open(self.run_dir / f"{name}.stderr", "ab") as out:
            self.procs[name] = subprocess.Popen(argv, env=self.env, stdout=out,
                                                stderr=subprocess.STDOUT,
                                                stdin=subprocess.DEVNULL,
                                                start_new_session=True)

    def _await(self, predicate, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline or any(p.poll() is not None
                                                  for p in self.procs.values()):
                raise RuntimeError(f"gave up waiting for {what}; see {self.run_dir}")
            time.sleep(0.1)

    # -- run ------------------------------------------------------------------------------
    def supervise(self, stop: Stop, tick: float = 0.5) -> str:
        """Until told to stop, the trace is done, or the broker or the scheduler dies."""
        gone: set[str] = set()
        while not stop.event.wait(tick):
            for name, proc in self.procs.items():
                rc = proc.poll()
                if rc is None or name in gone:
                    continue
                gone.add(name)
                if name == "feeder" and rc == 0:
                    self.log.info("trace_done")
                    stop.set(DONE)
                    continue
                self.log.warning("component_exited", name=name, rc=rc)
                if name in ("feeder", "broker", "scheduler"):  # an agent's loss is survivable
                    stop.set(FAILED)
        return stop.reason

    # -- stop -----------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Agents first (each checkpoints its trainers and reports them stopped), then the
        feeder, the scheduler (closing its journal) and the broker last."""
        agents = [n for n in self.procs if n.startswith(steps.STEP_PREFIX)]
        if any(self.procs[n].poll() is None for n in agents):
            self._signal_steps(signal.SIGTERM)
        deadline = time.monotonic() + self.s.stop_timeout  # one deadline for all of them
        for name in agents:
            self._reap(name, max(0.0, deadline - time.monotonic()))
        for name in ("feeder", "scheduler", "broker"):  # each stops in about a second
            if name in self.procs:
                self._signal(name, signal.SIGTERM)
                self._reap(name, 10.0)

    def _signal_steps(self, sig: signal.Signals) -> None:
        """`scancel --signal` without --batch reaches every step but the batch step: the
        agents themselves, not their `srun`s (which would make SIGTERM a SIGKILL)."""
        done = subprocess.run(["scancel", f"--signal={sig.name.removeprefix('SIG')}",
                               self.alloc.job_id], capture_output=True, text=True, timeout=60,
                              env=self.env)
        if done.returncode != 0:
            self.log.error("slurm_signal_failed", signal=sig.name, error=done.stderr.strip())

    def _signal(self, name: str, sig: int) -> None:
        proc = self.procs[name]
        if proc.poll() is None:
            try:
                proc.send_signal(sig)
            except ProcessLookupError:
                pass

    def _reap(self, name: str, timeout: float) -> None:
        proc = self.procs[name]
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.log.error("component_killed", name=name, after_s=timeout)
            proc.kill()
            rc = proc.wait(timeout=30)
        self.log.info("component_stopped", name=name, rc=rc)

    def requeue(self) -> bool:
        """Ask Slurm to run this job again (it resumes from the journal and checkpoints)."""
        done = subprocess.run(["scontrol", "requeue", self.alloc.job_id], capture_output=True,
                              text=True, timeout=60, env=self.env)
        self.log.info("slurm_requeue", job=self.alloc.job_id, rc=done.returncode,
                      error=done.stderr.strip() or None)
        return done.returncode == 0


def run(settings: Settings, alloc: Allocation, stop: Stop, log: Any) -> int:
    """Start, supervise, stop in order; requeue on the time-limit warning. Exit status: 0
    when the trace finished or the job was requeued, 1 when a component failed, 143 after a
    cancel (SIGTERM)."""
    launcher = Launcher(settings, alloc, log)
    launcher.prepare()
    try:
        launcher.start()
        reason = launcher.supervise(stop)
    except RuntimeError as err:
        log.error("slurm_start_failed", error=str(err))
        reason = FAILED
    log.info("slurm_stopping", reason=reason)
    launcher.shutdown()
    if reason == TIME_LIMIT and settings.requeue:
        return 0 if launcher.requeue() else 1
    return {DONE: 0, CANCELLED: 143, TIME_LIMIT: 0}.get(reason, 1)
