"""The node agent: `python -m node_agent.agent --node NAME --gpus 0,1,2,3 --endpoints FILE ...`.

One per node. It registers with the scheduler and heartbeats, serves `job.launch` / `job.stop`
as service `agent.<NAME>`, runs the trainers of each job (one process for an emulated job, one
rank per GPU for a torch job), runs a stage gate for every group that shares its GPUs, and
tells the scheduler how each trainer ended. State changes travel request/reply and are retried until acknowledged
(`job.finished`, `job.stopped`); only telemetry goes over the lossy bus (from the trainers).

Threads: the service thread answers requests (launch/stop touch the job table under a lock)
and never waits on a trainer: a stop is answered at once (`stopping`) and carried out by a
thread of its own, which reports its end as `job.stopped` (`requested`) through the outbox.
The main thread registers, heartbeats, reaps exited trainers and delivers the outbox. Each
zmq socket is used by the one thread that created it.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import socket
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from broker.messages import MessageError
from trainer import checkpoint
from trainer import ledger, pace
from trainer.exits import EXIT_FINISHED, EXIT_STOPPED

PROJECT_ROOT = Path(__file__).resolve().parent.parent  # so trainers import this very checkout


def _all_ints(items: Any) -> bool:
    """Every item a plain int (a bool is an int to Python, never a job id or a GPU here)."""
    return all(isinstance(i, int) and not isinstance(i, bool) for i in items)


@dataclass(frozen=True)
class AgentConfig:
    node: str
    gpus: tuple[int, ...]
    cpus: int
    mem: float
    endpoints_file: str
    run_dir: Path
    time_scale: float = 1.0
    heartbeat: float = 0.5
    report_every: float = 0.2
    stop_timeout: float = 10.0
    request_timeout: float = 2.0
    request_retries: int = 2
    address: str = "127.0.0.1"  # where other nodes reach this node's rank-0 rendezvous
    gate_stall_timeout: float = 30.0
    client_key: str | None = None  # CURVE secret certificate; also handed to its trainers
    wait_endpoints: float = 30.0  # seconds to wait for the broker's endpoints file

    @property
    def name(self) -> str:
        return f"agent.{self.node}"

    @property
    def checkpoint_dir(self) -> Path:
        return self.run_dir / "checkpoints"

    @property
    def trainer_dir(self) -> Path:
        return self.run_dir / "trainers"


@dataclass
class _Job:
    job_id: int
    procs: list  # subprocess.Popen per rank on this node, lowest rank first
    gpus: tuple[int, ...]
    total: float
    group: list = field(default_factory=list)
    slot: int = 0
    start: float = 0.0  # start_iteration of the launch: a floor until the first checkpoint
    stopping: bool = False
    started: float = field(default_factory=time.monotonic)
    gate: tuple = ()  # key of the group's stage gate here, if the job shares its GPUs
    pace_file: Path | None = None  # emulated: where a regroup in place tells the new pace

    @property
    def proc(self) -> subprocess.Popen:
        """The lead process (lowest rank here): its exit is the job's exit on this node."""
        return self.procs[0]


class _BadRequest(Exception):
    """A request this agent refuses; turned into HandlerError(code, reason) at the boundary."""

    def __init__(self, code: str, reason: str):
        super().__init__(f"{code}: {reason}")
        self.code, self.reason = code, reason


def free_port(host: str = "127.0.0.1") -> int:
    """A port free now, for a job's rendezvous; never a fixed one (the OS picks it)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _sigterm(job: "_Job") -> None:
    for proc in job.procs:
        if proc.poll() is None:
            try:
                proc.terminate()
            except ProcessLookupError:
                pass


def _describe_exit(rc: int) -> str:
    if rc < 0:
        try:
            return f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exit status {rc}"


def _tail(path: Path, limit: int = 400) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - limit))
            return fh.read().decode("utf-8", "replace").strip()
    except OSError:
        return ""


class Agent:
    """The job table and the rules for launching, stopping and reporting trainers.

    Messages to the scheduler are queued in `outbox` (type, fields) and delivered by the main
    loop; the table is guarded by `_lock` because the service thread changes it too.
    """

    def __init__(self, cfg: AgentConfig, log: Any):
        self.cfg = cfg
        self.log = log
        self._lock = threading.Lock()
        self._jobs: dict[int, _Job] = {}
        self._gates: dict[tuple, Any] = {}  # group (job ids in slot order) -> StageGate
        self._stoppers: dict[int, threading.Thread] = {}  # job -> the thread stopping it
        self.outbox: collections.deque[tuple[str, dict[str, Any]]] = collections.deque()
        # Heartbeats carry (incarnation, launches) taken with the job table, and each launch
        # reply its own number: the scheduler can then tell a job this agent no longer runs
        # from one launched after the heartbeat's snapshot, and a restarted agent from this one.
        self.incarnation = os.urandom(8).hex()
        self.launches = 0

    # -- requests from the scheduler (service thread) ---------------------------------------
    def handle(self, msg: Any) -> dict[str, Any]:
        """Answer one request; raises _BadRequest for anything it will not do."""
        if msg.type == "job.launch":
            return self._launch(msg)
        if msg.type == "job.stop":
            return self._stop(int(msg["job_id"]))
        if msg.type == "job.regroup":
            return self._regroup(msg)
        if msg.type == "status.query":
            return {"node": self.cfg.node, "gpus": list(self.cfg.gpus), "running": self.running()}
        raise _BadRequest("unsupported", f"agent {self.cfg.node} does not handle {msg.type!r}")

    def _launch(self, msg: Any) -> dict[str, Any]:
        job_id = int(msg["job_id"])
        gpus = self._check_gpus(msg["gpus"])
        workload = self._check_workload(msg["workload"])
        total = workload["iterations"]
        rank, world = int(msg.get("rank") or 0), int(msg.get("world_size") or 1)
        if not 0 <= rank < world:
            raise _BadRequest("bad_request", f"rank {rank} is not within world size {world}")
        start = float(msg["start_iteration"])
        if not start >= 0:
            raise _BadRequest("bad_request", f"start_iteration must be >= 0, got {start}")
        with self._lock:
            self._collect_locked()
            job = self._jobs.get(job_id)
            if job is not None and job.stopping:
                raise _BadRequest("busy", f"job {job_id} is being stopped; retry after the stop")
            if job is not None:
                return {"launched": False, "already_running": True, "pid": job.proc.pid,
                        "gpus": list(job.gpus), "incarnation": self.incarnation,
                        "launch_seq": self.launches}
            group = tuple(int(j) for j in msg["group"])
            rendezvous = {}
            if workload["kind"] == "torch" and world > 1:
                port = msg.get("master_port") or (free_port() if rank == 0 else None)
                if not port:
                    raise _BadRequest("bad_request", "rank > 0 needs rank 0's master_port")
                rendezvous = {"master_addr": msg.get("master_addr") or self.cfg.address,
                              "master_port": int(port)}
            gate = self._gate_for(group, workload) if len(group) > 1 else None
            pace_file = self.cfg.trainer_dir / f"{job_id}.pace" \
                if workload["kind"] == "emulated" else None
            procs = self._spawn(job_id, gpus, workload, start, rank, world, rendezvous, gate,
                                pace_file)
            self._jobs[job_id] = _Job(job_id=job_id, procs=procs, gpus=gpus, total=total,
                                      group=list(group), slot=int(msg["slot"]), start=start,
                                      gate=group if gate is not None else (),
                                      pace_file=pace_file)
            self.launches += 1
            seq = self.launches
        self.log.info("job_launched", job=job_id, pids=[p.pid for p in procs], gpus=list(gpus),
                      total=total, kind=workload["kind"], start_iteration=start, rank=rank,
                      world_size=world, gate=gate.endpoint if gate is not None else None,
                      **rendezvous)
        return {"launched": True, "already_running": False, "pid": procs[0].pid,
                "gpus": list(gpus), "incarnation": self.incarnation, "launch_seq": seq,
                **rendezvous}

    def _regroup(self, msg: Any) -> dict[str, Any]:
        """The job goes on, on the same GPUs, with other group members: its trainer takes the
        group's new pace from its pace file, with no restart. Gated (torch) trainers cannot
        change groups in place yet: `unsupported`, and the scheduler restarts them instead."""
        job_id = int(msg["job_id"])
        tt = float(msg["iteration_time"])
        if not tt > 0:
            raise _BadRequest("bad_request", f"iteration_time must be > 0, got {tt}")
        group = list(msg["group"])
        if job_id not in group or not _all_ints(group):
            raise _BadRequest("bad_request", f"group must list job ids with {job_id}: {group!r}")
        with self._lock:
            self._collect_locked()
            job = self._jobs.get(job_id)
            if job is None or job.stopping:
                raise _BadRequest("not_running", f"job {job_id} does not run on {self.cfg.node}")
            if job.pace_file is None:
                raise _BadRequest("unsupported", f"job {job_id}'s trainer cannot be regrouped "
                                                 "in place")
            pace.write(job.pace_file, tt)
            job.group, job.slot = group, int(msg["slot"])
            start = job.start
        its = self.iterations(job_id, start)
        self.log.info("job_regrouped", job=job_id, group=group, iteration_time=tt,
                      iterations=its)
        return {"regrouped": True, "iterations": its}

    def _check_gpus(self, gpus: Any) -> tuple[int, ...]:
        if not gpus or not _all_ints(gpus):
            raise _BadRequest("bad_request", f"gpus must be a non-empty list of ints, got {gpus!r}")
        if len(set(gpus)) != len(gpus):
            raise _BadRequest("bad_request", f"gpus lists a GPU twice: {gpus!r}")
        unknown = sorted(set(gpus) - set(self.cfg.gpus))
        if unknown:
            raise _BadRequest("bad_gpus", f"node {self.cfg.node} has no GPUs {unknown}")
        return tuple(gpus)

    @staticmethod
    def _check_workload(w: dict) -> dict[str, Any]:
        """The launch's workload, checked: `emulated` (iterations, iteration_time, stages) or
        `torch` (iterations, model from the workload registry, optional batch_size/config)."""
        kind = w.get("kind")
        if kind == "torch":
            from workloads.registry import TORCH_NAMES

            try:
                total = float(w["iterations"])
                model = str(w["model"])
                batch = int(w.get("batch_size") or 0)
                config = dict(w.get("config") or {})
            except (KeyError, TypeError, ValueError) as err:
                raise _BadRequest("bad_workload", f"a torch workload needs iterations and model: "
                                                  f"{err!r}") from None
            if model not in TORCH_NAMES or not total > 0 or batch < 0:
                raise _BadRequest("bad_workload", f"need a model among {sorted(TORCH_NAMES)}, "
                                                  f"iterations > 0, batch_size >= 0; got {w!r}")
            return {"kind": kind, "iterations": total, "model": model, "batch_size": batch,
                    "config": config}
        if kind != "emulated":
            raise _BadRequest("unsupported_workload", f"workload kind {kind!r} is not supported")
        try:
            total, tt = float(w["iterations"]), float(w["iteration_time"])
            stages = tuple(float(s) for s in w["stages"])
        except (KeyError, TypeError, ValueError) as err:
            raise _BadRequest("bad_workload", f"workload needs iterations, iteration_time, "
                                              f"stages: {err!r}") from None
        if not (total > 0 and tt > 0 and len(stages) == 3 and all(s >= 0 for s in stages)):
            raise _BadRequest("bad_workload", "need iterations > 0, iteration_time > 0 and three "
                                              f"non-negative stage times, got {w!r}")
        return {"kind": kind, "iterations": total, "iteration_time": tt, "stages": stages}

    def _gate_for(self, group: tuple, workload: dict) -> Any:
        """The group's stage gate on this node, started by its first member's launch. Only
        torch trainers take turns; emulated ones replay the planner's pace (no gate)."""
        if workload["kind"] != "torch":
            return None
        gate = self._gates.get(group)
        if gate is None:
            from node_agent.gate import StageGate
            from trainer.stages import STAGES

            gate = StageGate(group, STAGES, name=f"{self.cfg.node}:{'-'.join(map(str, group))}",
                             log=self.log, stall_timeout=self.cfg.gate_stall_timeout).start()
            self._gates[group] = gate
        return gate

    def _release_gate(self, job: _Job) -> None:
        """A member left: drop it from its gate; close the gate when no member runs here."""
        gate = self._gates.get(job.gate) if job.gate else None
        if gate is None:
            return
        gate.remove(job.job_id)
        if not any(j.gate == job.gate for j in self._jobs.values() if j is not job):
            self._gates.pop(job.gate, None)
            gate.close()

    def _spawn(self, job_id: int, gpus: tuple[int, ...], workload: dict, start: float,
               rank: int, world: int, rendezvous: dict, gate: Any,
               pace_file: Path | None = None) -> list[subprocess.Popen]:
        """Start the job's processes here: one for an emulated job, one rank per GPU for a
        torch job (ranks rank..rank+len(gpus)-1; the lowest one takes the gate's turns)."""
        cfg = self.cfg
        cfg.trainer_dir.mkdir(parents=True, exist_ok=True)
        common = [sys.executable, "-m", "trainer.run", "--job-id", str(job_id), "--node",
                  cfg.node, "--endpoints", cfg.endpoints_file, "--checkpoint-dir",
                  str(cfg.checkpoint_dir), "--iterations", repr(workload["iterations"]),
                  "--time-scale", repr(cfg.time_scale), "--report-every", repr(cfg.report_every),
                  "--start-iteration", repr(start), "--run-dir", str(cfg.run_dir)]
        common += ["--client-key", cfg.client_key] if cfg.client_key else []
        if workload["kind"] == "emulated":
            cmd = common + ["--iteration-time", repr(workload["iteration_time"]), "--stages",
                            ",".join(repr(s) for s in workload["stages"])]
            if pace_file is not None:  # fresh for each launch: no stale pace
                pace.write(pace_file, workload["iteration_time"])
                cmd += ["--pace-file", str(pace_file)]
            return [self._popen(job_id, cmd, gpus, "")]
        ranks = len(gpus) if world > 1 else 1  # world counts every GPU of the job
        procs = []
        for i in range(ranks):
            cmd = common + ["--workload", workload["model"], "--rank", str(rank + i),
                            "--world-size", str(world)]
            if workload["batch_size"]:
                cmd += ["--batch-size", str(workload["batch_size"])]
            if workload["config"]:
                cmd += ["--workload-config", json.dumps(workload["config"])]
            if rendezvous:
                cmd += ["--master-addr", rendezvous["master_addr"], "--master-port",
                        str(rendezvous["master_port"])]
            if gate is not None and i == 0:
                cmd += ["--gate", gate.endpoint]
            suffix = f".r{rank + i}" if world > 1 else ""
            procs.append(self._popen(job_id, cmd, gpus[i:i + 1] if ranks > 1 else gpus, suffix))
        return procs

    def _popen(self, job_id: int, cmd: list[str], gpus: tuple[int, ...],
               suffix: str) -> subprocess.Popen:
        env = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES=",".join(map(str, gpus)),
                   PYTHONPATH=os.pathsep.join(p for p in (str(PROJECT_ROOT),
                                                           os.environ.get("PYTHONPATH")) if p))
        with open(self.cfg.trainer_dir / f"{job_id}{suffix}.stderr", "ab") as err:
            # own session: a Ctrl-C meant for the agent must not reach trainers unannounced;
            # the agent stops them itself, with checkpoints
            return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=err, env=env, cwd=str(PROJECT_ROOT),
                                    start_new_session=True, close_fds=True)

    def _stop(self, job_id: int) -> dict[str, Any]:
        """Answered at once: a running job is SIGTERMed and reported `stopping`; the wait for
        its checkpoint runs on a thread of its own (`_finish_stop`), so this service thread
        answers other requests meanwhile and the scheduler's request never waits on a trainer.
        A repeated stop answers `stopping` again; a job not running here, its checkpoint."""
        with self._lock:
            self._collect_locked()
            job = self._jobs.get(job_id)
            again = job is not None and job.stopping
            if job is not None and not again:
                job.stopping = True
                _sigterm(job)  # before the reply: the stop is under way once answered
                stopper = threading.Thread(target=self._finish_stop, args=(job,),
                                           name=f"agent-stop-{job_id}", daemon=True)
                self._stoppers[job_id] = stopper
                stopper.start()  # under the lock: stop_all never finds it unstarted
        if job is None:  # a trainer that exited before the stop came may have finished
            ckpt = checkpoint.read(self.cfg.checkpoint_dir, job_id)
            return {"iterations": ckpt.iterations if ckpt is not None else 0.0,
                    "was_running": False, "finished": bool(ckpt is not None and ckpt.done),
                    "exit_code": None}
        its = self.iterations(job_id, job.start)
        if not again:
            self.log.info("job_stopping", job=job_id, pids=[p.pid for p in job.procs],
                          iterations=its)
        return {"stopping": True, "iterations": its, "was_running": True, "finished": False,
                "exit_code": None}

    def _finish_stop(self, job: _Job) -> None:
        """A stop thread: wait for the trainer's checkpoint (SIGKILL after the stop timeout),
        then drop the job and queue its `job.stopped` report as one step, so a heartbeat never
        shows the job gone before the report of how it ended."""
        rc = None
        try:
            rc = self._terminate(job)
        except Exception:  # never leave the job stuck in `stopping`
            self.log.exception("stop_failed", job=job.job_id)
        its = self.iterations(job.job_id, job.start)
        finished = rc == EXIT_FINISHED  # it completed as the stop arrived
        report = {"job_id": job.job_id, "node": self.cfg.node, "iterations": its,
                  "requested": True, "finished": finished}
        if rc is not None:
            report["exit_code"] = rc
        with self._lock:
            if self._jobs.get(job.job_id) is job:
                del self._jobs[job.job_id]
            self._stoppers.pop(job.job_id, None)
            self.outbox.append(("job.stopped", report))
        self.log.info("job_stopped", job=job.job_id, iterations=its, exit=rc, finished=finished)

    def _terminate(self, job: _Job) -> int:
        """SIGTERM every rank, wait (bounded), SIGKILL; returns the lead's exit status."""
        _sigterm(job)
        deadline = time.monotonic() + self.cfg.stop_timeout
        codes = []
        for proc in job.procs:
            try:
                codes.append(proc.wait(max(0.0, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                self.log.warning("trainer_kill", job=job.job_id, pid=proc.pid,
                                 after_s=self.cfg.stop_timeout)
                proc.kill()
                codes.append(proc.wait())
                ledger.note_reaped(self.cfg.run_dir, self.cfg.node, job.job_id, proc.pid)
        with self._lock:
            self._release_gate(job)
        return codes[0]

    # -- the main loop's side ------------------------------------------------------------------
    def collect(self) -> None:
        """Reap exited trainers (not being stopped) and queue what the scheduler must hear."""
        with self._lock:
            self._collect_locked()

    def _collect_locked(self) -> None:
        for job_id, job in list(self._jobs.items()):
            if job.stopping:
                continue
            rc = job.proc.poll()
            if rc is None:
                continue
            for rank in job.procs[1:]:  # the lead is done: the other ranks here follow it
                if rank.poll() is None:
                    rank.terminate()
            del self._jobs[job_id]
            self._release_gate(job)
            its = self.iterations(job_id, job.start)
            base = {"job_id": job_id, "node": self.cfg.node, "iterations": its}
            if rc == EXIT_FINISHED:
                self.outbox.append(("job.finished", dict(base, ok=True)))
            elif rc == EXIT_STOPPED:  # stopped by someone other than the scheduler
                self.outbox.append(("job.stopped", base))
            else:
                detail = _describe_exit(rc)
                tail = _tail(self.cfg.trainer_dir / f"{job_id}.stderr") if rc > 0 else ""
                if tail:  # a Python crash ends its stderr with the exception line
                    detail += ": " + tail.splitlines()[-1][-300:]
                self.outbox.append(("job.finished", dict(base, ok=False, detail=detail)))
            self.log.info("trainer_exited", job=job_id, exit=rc, iterations=its)

    def running(self) -> list[dict[str, Any]]:
        return self.snapshot(reported=False)["running"]

    def snapshot(self, reported: bool = True) -> dict[str, Any] | None:
        """What a heartbeat or registration tells: the jobs running and how many launches
        came before, taken together. With `reported`, None while a report is queued: a job
        that left the table must be reported before a heartbeat may show it missing."""
        with self._lock:
            if reported and self.outbox:
                return None
            jobs = sorted((j.job_id, j.start) for j in self._jobs.values())
            launches = self.launches
        return {"running": [{"job_id": j, "iterations": self.iterations(j, start)}
                            for j, start in jobs],
                "incarnation": self.incarnation, "launches": launches}

    def iterations(self, job_id: int, floor: float = 0.0) -> float:
        """Iterations done: the checkpoint's, never less than where the launch started it
        (a trainer stopped before its first checkpoint must not report its progress lost)."""
        return max(checkpoint.iterations(self.cfg.checkpoint_dir, job_id), floor)

    def stop_all(self) -> list[tuple[_Job, int]]:
        """Stop every trainer (SIGTERM all first, then wait each); returns (job, exit status)
        of those not already being stopped on request, whose threads queue their own reports
        and are waited for here."""
        with self._lock:
            jobs = [job for job in self._jobs.values() if not job.stopping]
            for job in jobs:
                job.stopping = True
            stoppers = list(self._stoppers.values())
        for job in jobs:
            _sigterm(job)
        out = [(job, self._terminate(job)) for job in jobs]
        with self._lock:
            for job in jobs:
                self._jobs.pop(job.job_id, None)
        for stopper in stoppers:
            stopper.join(self.cfg.stop_timeout + 5.0)
        return out


def _serve(cfg: AgentConfig, endpoints: Any, agent: Agent, stop: threading.Event,
           log: Any) -> None:
    """The service thread: answers requests until `stop`; refusals become error replies."""
    from broker.client import HandlerError, Service

    def handler(msg: Any) -> dict[str, Any]:
        try:
            return agent.handle(msg)
        except _BadRequest as err:
            log.warning("request_refused", type=msg.type, code=err.code, reason=err.reason)
            raise HandlerError(err.code, err.reason) from None
        except HandlerError:
            raise
        except Exception as err:  # a bug here must cost one request, not the agent
            log.exception("request_failed", type=msg.type)
            raise HandlerError("internal", f"{type(err).__name__}: {err}") from None

    service = Service(endpoints, cfg.name, handler, heartbeat=cfg.heartbeat)
    try:
        service.serve(stop)
    finally:
        service.close()


TRANSIENT_CODES = frozenset({"no_service"})  # the broker, not the scheduler, said no: try again


class _Link:
    """The main thread's conversation with the scheduler: register, heartbeat, deliver outbox.

    Every call blocks at most the Requester's timeout x tries; after a failure the next try
    waits one heartbeat interval, so a missing scheduler costs a trickle of requests, not a storm.
    """

    def __init__(self, cfg: AgentConfig, endpoints: Any, agent: Agent, log: Any):
        from broker.client import RequestFailed, Requester, RequestTimeout

        self.cfg, self.agent, self.log = cfg, agent, log
        self._failed, self._timeout = RequestFailed, RequestTimeout
        self.req = Requester(endpoints, cfg.name, timeout=cfg.request_timeout,
                             retries=cfg.request_retries)
        self.registered = False
        self.next_heartbeat = 0.0
        self.retry_at = 0.0
        self._complaint: str | None = None  # last failure logged, so a long outage logs once

    def _send(self, type_: str, **fields: Any) -> str:
        """One request: "ok", "retry" (not heard, or we must register first) or "refused"."""
        try:
            self.req.request("scheduler", type_, **fields)
            if self._complaint is not None:
                self.log.info("scheduler_reachable", after=self._complaint)
                self._complaint = None
            return "ok"
        except self._timeout:
            self._complain(type_, "timeout", "no reply")
            return "retry"
        except MessageError as err:  # our own message breaks the schema: a bug, never retried
            self.log.error("request_invalid", type=type_, code=err.code, reason=err.reason)
            return "refused"
        except self._failed as err:
            if err.code == "unknown_agent":
                self.registered = False
                self.log.warning("scheduler_forgot_agent", type=type_)
                return "retry"
            if err.code in TRANSIENT_CODES:
                self._complain(type_, err.code, err.reason)
                return "retry"
            self.log.error("request_refused", type=type_, code=err.code, reason=err.reason)
            return "refused"

    def _complain(self, type_: str, code: str, reason: str) -> None:
        if self._complaint != code:
            self.log.warning("scheduler_unreachable", type=type_, code=code, reason=reason)
            self._complaint = code

    def step(self) -> None:
        now = time.monotonic()
        if now < self.retry_at:
            return
        if not self.registered and not self._register():
            self.retry_at = time.monotonic() + self.cfg.heartbeat
            return
        if not self.deliver():  # before the heartbeat: a job gone from `running` is reported
            self.retry_at = time.monotonic() + self.cfg.heartbeat
            return
        if self.registered and now >= self.next_heartbeat:
            beat = self.agent.snapshot()
            if beat is None:  # a trainer ended meanwhile: its report goes first, next tick
                return
            self.next_heartbeat = now + self.cfg.heartbeat
            self._send("agent.heartbeat", node=self.cfg.node, **beat)

    def _register(self) -> bool:
        # reports queued are delivered once registered; a job they concern that the scheduler
        # thinks runs here is requeued at registration, and the report then settles it
        beat = self.agent.snapshot(reported=False)
        outcome = self._send("agent.register", node=self.cfg.node, gpus=list(self.cfg.gpus),
                             cpus=self.cfg.cpus, mem=self.cfg.mem, **beat)
        if outcome == "ok":
            self.registered = True
            self.next_heartbeat = time.monotonic() + self.cfg.heartbeat
            self.log.info("registered", gpus=list(self.cfg.gpus))
        return self.registered

    def deliver(self, once: bool = False) -> bool:
        """Send queued messages in order; True when the outbox is empty.

        A message the scheduler did not hear stays queued for the next try; with `once`
        (shutdown) each message gets one try and is dropped either way.
        """
        while self.agent.outbox and (self.registered or once):
            type_, fields = self.agent.outbox[0]
            outcome = self._send(type_, **fields)
            if outcome == "retry" and not once:
                return False
            self.agent.outbox.popleft()
            self.log.info("delivered" if outcome == "ok" else "undelivered", type=type_,
                          job=fields["job_id"], outcome=outcome, **{k: v for k, v in fields.items()
                                                                     if k in ("ok", "iterations")})
        return not self.agent.outbox


def run(cfg: AgentConfig, stop: threading.Event, log: Any) -> int:
    """Serve until `stop` is set, then stop all trainers (checkpointing) and say so."""
    from broker.curve import component_endpoints

    endpoints = component_endpoints(f"node-agent {cfg.node}", cfg.endpoints_file,
                                    cfg.wait_endpoints, cfg.client_key, stop, log)
    if endpoints is None:
        return 1
    agent = Agent(cfg, log)
    svc_stop = threading.Event()
    svc = threading.Thread(target=_serve, args=(cfg, endpoints, agent, svc_stop, log),
                           name="agent-service", daemon=True)
    svc.start()
    link = _Link(cfg, endpoints, agent, log)
    tick = min(0.05, cfg.heartbeat / 4)
    log.info("agent_start", node=cfg.node, gpus=list(cfg.gpus), cpus=cfg.cpus, mem=cfg.mem,
             pid=os.getpid(), time_scale=cfg.time_scale)
    try:
        while not stop.is_set():
            agent.collect()
            try:
                link.step()
            except Exception:  # a bug in one exchange must not take the node's trainers down
                log.exception("link_step_failed")
                link.retry_at = time.monotonic() + cfg.heartbeat
            if not svc.is_alive():
                log.error("service_thread_died")
                return 1
            stop.wait(tick)
    finally:
        svc_stop.set()  # no launches from here on
        svc.join(timeout=5.0)
        for job, rc in agent.stop_all():
            its = agent.iterations(job.job_id, job.start)
            kind = "job.finished" if rc == EXIT_FINISHED else "job.stopped"
            fields = {"job_id": job.job_id, "node": cfg.node, "iterations": its}
            agent.outbox.append((kind, dict(fields, ok=True) if kind == "job.finished" else fields))
        agent.collect()
        link.deliver(once=True)
        link.req.close()
        log.info("agent_exit", node=cfg.node)
    return 0


def parse_args(argv: Sequence[str] | None = None) -> tuple[AgentConfig, str]:
    p = argparse.ArgumentParser(prog="python -m node_agent.agent",
                                description=__doc__.split("\n")[0])
    p.add_argument("--node", required=True, help="node name; the service is agent.<NODE>")
    p.add_argument("--gpus", required=True, help="GPU indices of this node, e.g. 0,1,2,3")
    p.add_argument("--cpus", type=int, default=os.cpu_count() or 1)
    p.add_argument("--mem", type=float, default=0.0, help="memory in GB")
    p.add_argument("--endpoints", required=True, help="the broker's endpoints file")
    p.add_argument("--wait-endpoints", type=float, default=30.0, metavar="S",
                   help="seconds to wait for the endpoints file (the broker may be starting)")
    p.add_argument("--run-dir", required=True, help="logs, trainers/ and checkpoints/ go here")
    p.add_argument("--time-scale", type=float, default=1.0, help="trace seconds per wall second")
    p.add_argument("--heartbeat", type=float, default=0.5, help="seconds between heartbeats")
    p.add_argument("--report-every", type=float, default=0.2,
                   help="trainers' wall seconds between telemetry/checkpoints")
    p.add_argument("--stop-timeout", type=float, default=10.0,
                   help="seconds a trainer gets to checkpoint after SIGTERM before SIGKILL")
    p.add_argument("--address", default="127.0.0.1",
                   help="this node's address for torch rendezvous (other nodes connect to it)")
    p.add_argument("--log-level", default="info")
    from broker.keys import add_client_key_argument
    add_client_key_argument(p)
    a = p.parse_args(argv)
    try:
        gpus = tuple(int(g) for g in a.gpus.split(",") if g.strip() != "")
    except ValueError:
        p.error(f"--gpus must be comma-separated integers, got {a.gpus!r}")
    if not gpus or len(set(gpus)) != len(gpus):
        p.error(f"--gpus must list distinct GPU indices, got {a.gpus!r}")
    if not (a.time_scale > 0 and a.heartbeat > 0 and a.report_every > 0 and a.stop_timeout > 0):
        p.error("--time-scale, --heartbeat, --report-every and --stop-timeout must be > 0")
    if not a.wait_endpoints >= 0:
        p.error("--wait-endpoints must be >= 0")
    cfg = AgentConfig(node=a.node, gpus=gpus, cpus=a.cpus, mem=a.mem,
                      endpoints_file=str(Path(a.endpoints).resolve()),
                      run_dir=Path(a.run_dir).resolve(), time_scale=a.time_scale,
                      heartbeat=a.heartbeat, report_every=a.report_every,
                      stop_timeout=a.stop_timeout, address=a.address,
                      wait_endpoints=a.wait_endpoints,
                      client_key=str(Path(a.client_key).resolve()) if a.client_key else None)
    return cfg, a.log_level


def main(argv: Sequence[str] | None = None) -> int:
    cfg, level = parse_args(argv)
    import structlog

    from broker.logs import configure_logging

    cfg.run_dir.mkdir(parents=True, exist_ok=True)
    configure_logging(f"agent-{cfg.node}", cfg.run_dir, level=level)
    log = structlog.get_logger().bind(node=cfg.node)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    return run(cfg, stop, log)


if __name__ == "__main__":
    sys.exit(main())
