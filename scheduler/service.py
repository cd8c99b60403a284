"""The live scheduler: `python -m scheduler.service --spec n2g8 --policy muri-s --endpoints F ...`.

The second driver of the scheduling core (the simulator is the first). It turns messages into
core events and the core's plans into `job.stop` / `job.launch` requests to node agents; the
core never learns that it runs live.

Threads: the service thread answers requests (`job.submit`, `agent.*`, `job.finished`,
`job.stopped`, `status.query`), each under `_lock`, and never talks to agents, so a slow agent
never delays an acknowledgement. The main thread subscribes to progress events, watches agent
liveness, runs rounds and sends the blocking requests to agents *outside* the lock, re-checking
what changed meanwhile. Each zmq socket is used only by the thread that created it.

Durability: a job is journaled (SQLite, fsynced) before its submit is acknowledged; a
restarted scheduler rebuilds its queue from the journal and each job's checkpoint, and keeps
the trace clock running from where the journal left it.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Mapping, NamedTuple, Sequence

import structlog

from node_agent import checkpoint
from scheduler import plan_changes
from scheduler.core import Core, SchedulingError
from scheduler.journal import Journal, record_from_map
from scheduler.policies import POLICIES, make_policy
from scheduler.presets import get_preset
from scheduler.profiles import ProfileEstimator
from scheduler.state import NodeSlice, Status
from specs import spec_path
from specs.spec import ClusterSpec, SpecError, load_spec
from traces.record import JobRecord
from traces.validate import validate

SERVICE = "scheduler"
# a status reply lists at most this many jobs (~120 bytes each; frames are capped at 256 KiB)
STATUS_JOBS_LIMIT = 1500
_STATE_ORDER = {"running": 0, "pending": 1, "finished": 2}  # what a cut status list keeps first
STOP_RETRY_S = 0.5  # a job.stop that timed out is sent again after this (or on its report)
STOP_RECHECK_S = 5.0  # a stop not reported this long is asked about again (stops are idempotent)


class Refusal(Exception):
    """A request the scheduler will not act on; becomes HandlerError(code, reason) on the wire."""

    def __init__(self, code: str, reason: str):
        super().__init__(f"{code}: {reason}")
        self.code, self.reason = code, reason


class Placed(NamedTuple):
    """Where and with whom a job runs; a change of either means stop and relaunch."""

    group: tuple[int, ...]
    tt: float
    slices: tuple[NodeSlice, ...]

    @property
    def key(self) -> tuple:
        return self.group, self.slices

    @property
    def nodes(self) -> tuple[int, ...]:
        return tuple(s.node for s in self.slices)


@dataclass
class _Agent:
    """A registered agent as the scheduler last heard from it."""

    gpus: tuple[int, ...]
    cpus: int
    mem: float
    last_seen: float  # monotonic wall seconds
    incarnation: str | None = None  # the agent process that registered (None: not told)


@dataclass
class _StopWait:
    """One stop in progress on one agent, awaited by a round: `done` is set by the agent's
    `job.stopped` report (`result`: its fields) or by the agent's death (`result` None)."""

    done: threading.Event = field(default_factory=threading.Event)
    result: dict[str, Any] | None = None


@dataclass
class Options:
    """Everything the service needs besides the broker's endpoints."""

    spec: ClusterSpec
    policy: str = "muri-s"
    preset: str = "default"
    run_dir: Path = Path("run")
    time_scale: float = 1.0  # trace seconds per wall second
    round_s: float = 5.0  # wall seconds between rounds without any event (a safety net)
    agent_timeout: float = 10.0  # wall seconds without a heartbeat before an agent is dead
    agent_request_timeout: float = 5.0  # per try, for job.stop / job.launch to an agent
    agent_request_retries: int = 3
    journal: Path | None = None  # default: run_dir/journal.db
    checkpoint_dir: Path | None = None  # default: run_dir/checkpoints (where agents write)
    # "emulated": trainers replay the planned pace; "torch": real training of the job's model
    workload: str = "emulated"
    torch_config: dict = field(default_factory=dict)  # workload settings for every torch job
    profile_threshold: float = 0.1  # relative move of a measured profile that re-plans

    @property
    def journal_path(self) -> Path:
        return self.journal or self.run_dir / "journal.db"

    @property
    def checkpoints(self) -> Path:
        return self.checkpoint_dir or self.run_dir / "checkpoints"


def node_name(index: int) -> str:
    return f"n{index}"


def stage_list(stages: Sequence[float]) -> list[float]:
    """Three stage times (data, gpu, net) for the emulated workload; io+cpu fold into data."""
    values = [float(s) for s in stages]
    if len(values) == 4:
        values = [values[0] + values[1], values[2], values[3]]
    return values


class SchedulerService:
    """The live driver. `handle` is the request handler; `run` is the main loop."""

    def __init__(self, endpoints: Any, options: Options, log: Any = None,
                 clock: Callable[[], float] = time.monotonic):
        self.endpoints = endpoints
        self.opt = options
        self.log = log if log is not None else structlog.get_logger(SERVICE)
        self.clock = clock
        self._lock = threading.RLock()
        self._local = threading.local()
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="scheduler-agents")
        self._pool_requesters: list[Any] = []
        spec = options.spec
        # torch trainers cannot change group where they run: a regroup restarts them, and
        # the preset (which the core and the plan comparison read) says so
        preset = get_preset(options.preset, **(
            {"regroup_in_place": False} if options.workload == "torch" else {}))
        self.core = Core(spec, make_policy(options.policy, preset), preset)
        self.journal = Journal(options.journal_path)
        self.agents: dict[str, _Agent] = {}
        self.placed: dict[int, Placed] = {}  # what agents run, as far as we launched it
        # the same by node: node index -> {job: (agent incarnation, launch number) of the
        # launch that placed it there, None if the agent did not say}; see _place/_unplace
        self.on_node: dict[int, dict[int, tuple[str | None, int] | None]] = {}
        self.launching: dict[int, Placed] = {}  # launch requests in flight
        self.aborted: set[int] = set()  # jobs that crashed or finished while launching
        self.stopping: set[int] = set()  # jobs a round is stopping right now
        self.progress: dict[int, float] = {}  # iterations done, per telemetry
        self.profiles = ProfileEstimator(threshold=options.profile_threshold)
        # input refused anywhere (schema, handlers, core): counted by kind, logged once per
        # sender and kind; shared by the service thread's Service and the main thread
        from broker.client import RefusalLog
        self.refusals = RefusalLog(self.log)
        self._refusals_said = (0, -math.inf)  # (total, wall) when the counts were last logged
        self.round_failures = 0  # rounds that raised (logged `round_failed`; the loop goes on)
        self.strays: list[tuple[int, str]] = []  # (job, node) to stop outside a plan
        self._stop_waits: dict[tuple[int, str], list[_StopWait]] = {}  # (job, node) -> waiters
        self.outbox: list[tuple[str, dict[str, Any]]] = []  # events for the main thread to publish
        self.wake_reasons: set[str] = set()
        self.rounds = 0
        self.next_wakeup: float | None = None
        self.finished_before: dict[int, Any] = {}  # journal entries of jobs done before start
        self.awaiting: set[str] = set()  # after a restart: nodes to hear from before a round
        self._last_round = -math.inf
        self._wall0 = clock()
        self._offset = self.journal.clock()
        self._recover()

    # -- time --------------------------------------------------------------------------------
    def now(self) -> float:
        """Trace seconds: scaled wall time since start, continuing a restarted journal."""
        return self._offset + (self.clock() - self._wall0) * self.opt.time_scale

    # -- recovery ----------------------------------------------------------------------------
    def _recover(self) -> None:
        """Queue the journal's unfinished jobs; nodes stay offline until their agents speak."""
        for node in range(self.opt.spec.num_nodes):
            self.core.set_node_online(node, False)
        now = self.now()
        # jobs finished before this start: only status replies still mention them
        self.finished_before = {e.record.job_id: e for e in self.journal.finished()}
        # Trainers may still run where the journal last started its running jobs; until those
        # nodes' agents re-register (and their trainers are found as strays and stopped), a
        # round could start a second copy of such a job elsewhere. See _recovery_pending.
        self.awaiting = self.journal.running_nodes()
        entries = self.journal.unfinished()
        for entry in entries:
            record = entry.record
            try:
                self.core.submit(record, min(entry.submit_trace, now))
            except SchedulingError as err:  # e.g. the spec shrank since it was accepted
                self.log.error("job_unschedulable", job_id=record.job_id, reason=str(err))
                continue
            done = max(entry.iterations_done, self._checkpoint(record.job_id) or 0.0)
            self.core.set_remaining(record.job_id, record.iterations - done)
            if entry.state == "running":  # it was running when the scheduler died
                self.journal.mark_stopped(record.job_id, done, now,
                                          detail={"reason": "scheduler restart"})
        if entries or self._offset:
            self.log.info("recovered", jobs=len(entries), clock=now,
                          awaiting=sorted(self.awaiting),
                          finished=len(self.journal.finished_ids()))
        self.wake_reasons.add("start")

    def _checkpoint(self, job_id: int) -> float | None:
        ckpt = checkpoint.read(self.opt.checkpoints, job_id)
        return ckpt.iterations if ckpt is not None else None

    def _resume_point(self, job_id: int) -> float:
        """Iterations a requeued job will resume from: its checkpoint, or the last safe stop."""
        entry = self.journal.get(job_id)
        known = entry.iterations_done if entry is not None else 0.0
        return max(known, self._checkpoint(job_id) or 0.0)

    # -- requests (service thread) -----------------------------------------------------------
    def handle(self, msg: Any) -> dict[str, Any]:
        """Answer one request; Refusal for anything malformed or not applicable."""
        handler = self._HANDLERS.get(msg.type)
        if handler is None:
            raise Refusal("unsupported", f"the scheduler does not handle {msg.type!r}")
        with self._lock:
            return handler(self, msg)

    def _on_submit(self, msg: Any) -> dict[str, Any]:
        record = self._parse_job(msg["job"])
        now = self.now()
        if not self.journal.submit(record, now):  # durable before the reply
            return {"accepted": False, "job_id": record.job_id, "reason": "duplicate"}
        self.core.submit(record, now)
        self.log.info("job_submitted", job_id=record.job_id, num_gpu=record.num_gpu,
                      iterations=record.iterations, model=record.model_name, submit=now,
                      trace_submit=record.submit_time)
        self._emit_job(record.job_id, "submitted", {"submit": now})
        self.wake_reasons.add("arrival")
        return {"accepted": True, "job_id": record.job_id}

    def _parse_job(self, data: Any) -> JobRecord:
        try:
            record = record_from_map(data)
        except (TypeError, ValueError) as err:
            raise Refusal("bad_job", f"not a job record: {err}") from None
        problems = validate([record], spec=self.opt.spec)
        if problems:
            raise Refusal("bad_job", "; ".join(f"{p.field}: {p.message}" if p.field else p.message
                                               for p in problems))
        if not math.isfinite(record.iterations * record.iteration_time):
            raise Refusal("bad_job", "iterations x iteration_time is not finite")
        return record

    def _node_index(self, name: Any) -> int:
        if isinstance(name, str) and name.startswith("n") and name[1:].isdigit():
            index = int(name[1:])
            if 0 <= index < self.opt.spec.num_nodes and name == node_name(index):
                return index
        raise Refusal("unknown_node", f"{name!r} is not a node of this cluster "
                                      f"(n0..n{self.opt.spec.num_nodes - 1})")

    def _on_register(self, msg: Any) -> dict[str, Any]:
        name = msg["node"]
        index = self._node_index(name)
        gpus = msg["gpus"]
        if not all(isinstance(g, int) and not isinstance(g, bool) for g in gpus):
            raise Refusal("bad_request", f"gpus must be a list of ints, got {gpus!r}")
        running = self._running_list(msg.get("running") or [])
        if len(gpus) < self.opt.spec.gpus_per_node:
            self.log.warning("agent_short_of_gpus", node=name, gpus=list(gpus),
                             spec_gpus=self.opt.spec.gpus_per_node)
        was = name in self.agents
        self.awaiting.discard(name)
        self.agents[name] = _Agent(tuple(gpus), msg["cpus"], msg["mem"], self.clock(),
                                   msg.get("incarnation"))
        self.core.set_node_online(index, True)
        now = self.now()
        reported = dict(running)
        kept, strays, lost = [], [], []
        for job_id, done in running:
            where = self.placed.get(job_id) or self.launching.get(job_id)
            if where is not None and index in where.nodes:
                kept.append(job_id)
                self._note_progress(job_id, done)
            else:
                strays.append(job_id)
                self.strays.append((job_id, name))
        for job_id in list(self.on_node.get(index, ())):
            if job_id not in reported:
                lost.append(job_id)  # the agent restarted and no longer runs it
                self._requeue(job_id, now, f"not running on re-registered {name}", skip=name)
        self.log.info("agent_registered", node=name, gpus=list(gpus), cpus=msg["cpus"],
                      mem=msg["mem"], again=was, kept=kept, strays=strays, lost=lost)
        self.outbox.append(("event.agent", {"node": name, "state": "registered"}))
        self.journal.log_event("agent_registered", now, node=name,
                               detail={"gpus": list(gpus), "strays": strays, "lost": lost})
        self.wake_reasons.add("agent")
        return {"registered": True, "node": name, "strays": strays}

    @staticmethod
    def _running_list(items: Any) -> list[tuple[int, float]]:
        out = []
        for item in items:
            if not isinstance(item, Mapping):
                raise Refusal("bad_request", f"running entries must be maps, got {item!r}")
            job_id, its = item.get("job_id"), item.get("iterations", 0.0)
            if not isinstance(job_id, int) or isinstance(job_id, bool) \
                    or not isinstance(its, (int, float)) or isinstance(its, bool):
                raise Refusal("bad_request", f"running entry needs int job_id and numeric "
                                             f"iterations, got {item!r}")
            out.append((job_id, float(its)))
        return out

    def _on_heartbeat(self, msg: Any) -> dict[str, Any]:
        name = msg["node"]
        index = self._node_index(name)
        agent = self.agents.get(name)
        if agent is None:
            raise Refusal("unknown_agent", f"{name} is not registered (or was declared dead); "
                                           "register again")
        incarnation, launches = msg.get("incarnation"), msg.get("launches")
        if incarnation is not None and agent.incarnation is not None \
                and incarnation != agent.incarnation:
            raise Refusal("unknown_agent", f"{name} restarted since it registered; "
                                           "register again")
        agent.last_seen = self.clock()
        running = self._running_list(msg.get("running") or [])
        here = self.on_node.get(index, {})
        for job_id, done in running:
            if job_id in here:
                self._note_progress(job_id, done)
        if incarnation is not None and isinstance(launches, int):
            self._requeue_vanished(name, index, incarnation, launches, {j for j, _ in running})
        return {}

    def _requeue_vanished(self, name: str, index: int, incarnation: str, launches: int,
                          reported: set[int]) -> None:
        """Jobs placed here that the agent's snapshot no longer shows, though it was taken
        after their launch and with no report queued: they ended unheard (a stop or exit
        lost in a race). Left alone they would hold their GPUs forever; requeue them."""
        for job_id, by in list(self.on_node.get(index, {}).items()):
            if job_id in reported or job_id in self.stopping:
                continue
            if by is None or (by[0] == incarnation and by[1] > launches):
                continue  # launched after the snapshot (or by a scheduler before this one)
            self.log.warning("job_vanished", job_id=job_id, node=name, launch=by,
                             launches=launches)
            self._requeue(job_id, self.now(), f"no longer running on {name}", skip=name)

    def _on_finished(self, msg: Any) -> dict[str, Any]:
        job_id, name, its = msg["job_id"], msg["node"], float(msg["iterations"])
        index = self._node_index(name)
        job = self.core.jobs.get(job_id)
        if job_id in self.finished_before or (job is not None and job.status is Status.DONE):
            return {"finished": True, "already": True}
        if job is None:
            raise Refusal("unknown_job", f"job {job_id} was never submitted here")
        now = self.now()
        if msg["ok"]:
            self._finish(job_id, now, its, name)
            return {"finished": True, "already": False}
        where = self.placed.get(job_id) or self.launching.get(job_id)
        if where is None or index not in where.nodes:
            self.log.info("stale_report", job_id=job_id, node=name, ok=False)
            return {"finished": False, "ignored": True}
        reason = f"trainer failed on {name}: {msg.get('detail', '')}".rstrip(": ")
        self._requeue(job_id, now, reason, skip=name, iterations=its)
        return {"finished": False, "requeued": True}

    def _on_stopped(self, msg: Any) -> dict[str, Any]:
        """A trainer stopped. The end of a stop a round waits for wakes that round (which
        settles the job); one nobody waits for any more (`requested`, e.g. from before a
        scheduler restart) settles it here; any other (its agent shut down) requeues it."""
        job_id, name = msg["job_id"], msg["node"]
        index = self._node_index(name)
        job = self.core.jobs.get(job_id)
        if job_id in self.finished_before:
            return {"ignored": True}
        if job is None:
            raise Refusal("unknown_job", f"job {job_id} was never submitted here")
        waits = self._stop_waits.get((job_id, name))
        if waits:
            for wait in waits:
                if not wait.done.is_set():
                    wait.result = dict(msg.fields)
                    wait.done.set()
            return {"awaited": True}
        if msg.get("requested"):
            return self._settle_unawaited_stop(job, name, msg)
        where = self.placed.get(job_id) or self.launching.get(job_id)
        if job.status is Status.DONE or where is None or index not in where.nodes:
            return {"ignored": True}
        self._requeue(job_id, self.now(), f"stopped by {name}", skip=name,
                      iterations=float(msg["iterations"]))
        return {"requeued": True}

    def _settle_unawaited_stop(self, job: Any, name: str, msg: Any) -> dict[str, Any]:
        """The end of a stop that no round waits for: a job that completed is finished; one
        that runs again (placed or launching) is left alone, never run twice; a waiting one
        resumes from the stop's checkpoint when that is ahead of what is known."""
        job_id, its = job.id, float(msg["iterations"])
        if job.status is Status.DONE:
            return {"ignored": True}
        if msg.get("finished"):
            self._finish(job_id, self.now(), its, name)
            return {"finished": True}
        if job_id in self.placed or job_id in self.launching:
            self.log.info("stale_stop_report", job_id=job_id, node=name, iterations=its)
            return {"ignored": True}
        if its > self._resume_point(job_id):
            now = self.now()
            self.journal.mark_stopped(job_id, its, now, node=name, preempted=False,
                                      detail={"reason": "stop reported after its round"})
            self.core.set_remaining(job_id, job.record.iterations - its)
        self.log.info("late_stop_settled", job_id=job_id, node=name, iterations=its)
        return {"settled": True}

    def _on_status(self, msg: Any) -> dict[str, Any]:
        what = msg.get("what") or "all"
        if what not in ("all", "summary"):
            raise Refusal("bad_request", f"what must be 'all' or 'summary', got {what!r}")
        return self.status(jobs=what == "all")

    _HANDLERS: Mapping[str, Callable[["SchedulerService", Any], dict[str, Any]]]
    _HANDLERS = MappingProxyType({
        "job.submit": _on_submit,
        "agent.register": _on_register,
        "agent.heartbeat": _on_heartbeat,
        "job.finished": _on_finished,
        "job.stopped": _on_stopped,
        "status.query": _on_status,
    })

    # -- state changes shared by both threads (called with _lock held) -----------------------
    def _note_progress(self, job_id: int, done: float) -> None:
        if done > self.progress.get(job_id, -1.0):
            self.progress[job_id] = done

    def _finish(self, job_id: int, now: float, iterations: float, node: str | None) -> None:
        """Journal first, then the core; other ranks are stopped by the main thread."""
        self.journal.mark_finished(job_id, now, iterations, node=node)
        self.core.finish(job_id, now)
        where = self._unplace(job_id) or self.launching.get(job_id)
        if job_id in self.launching:
            self.aborted.add(job_id)
        for other in (where.nodes if where else ()):
            if node_name(other) != node:
                self.strays.append((job_id, node_name(other)))
        self.progress.pop(job_id, None)
        self.profiles.forget(job_id)  # a requeue keeps it: the job runs again, same model
        entry = self.journal.get(job_id)
        submit, start = entry.submit_trace, entry.first_start_trace
        self.log.info("job_finished", job_id=job_id, node=node, iterations=iterations,
                      submit=submit, start=start, end=now, jct=now - submit,
                      queue_delay=None if start is None else start - submit,
                      preemptions=entry.preemptions, model=entry.record.model_name,
                      num_gpu=entry.record.num_gpu, trace_submit=entry.record.submit_time)
        self._emit_job(job_id, "finished", {"submit": submit, "start": start, "end": now})
        self.wake_reasons.add("completion")

    def _requeue(self, job_id: int, now: float, reason: str, skip: str | None = None,
                 iterations: float | None = None) -> None:
        """The job stopped outside a plan: back to the queue, resuming from its checkpoint."""
        where = self._unplace(job_id) or self.launching.get(job_id)
        if job_id in self.launching:
            self.aborted.add(job_id)
        self.core.stop(job_id, now)
        done = self._resume_point(job_id)
        if iterations is not None:
            done = max(done, iterations)
        total = self.core.jobs[job_id].record.iterations
        self.core.set_remaining(job_id, total - done)
        self.progress.pop(job_id, None)
        for other in (where.nodes if where else ()):
            if node_name(other) != skip:
                self.strays.append((job_id, node_name(other)))
        self.journal.mark_stopped(job_id, done, now, node=skip, detail={"reason": reason})
        self.log.info("job_stopped", job_id=job_id, reason=reason, iterations=done, now=now,
                      nodes=[node_name(n) for n in (where.nodes if where else ())])
        self._emit_job(job_id, "stopped", {"reason": reason, "iterations": done})
        self.wake_reasons.add("requeue")

    def _place(self, job_id: int, where: Placed,
               launches: Mapping[int, tuple[str | None, int]]) -> None:
        self.placed[job_id] = where
        for node in where.nodes:
            self.on_node.setdefault(node, {})[job_id] = launches.get(node)

    def _unplace(self, job_id: int) -> Placed | None:
        where = self.placed.pop(job_id, None)
        for node in (where.nodes if where else ()):
            self.on_node[node].pop(job_id, None)
        return where

    def _emit_job(self, job_id: int, state: str, detail: dict[str, Any]) -> None:
        self.outbox.append(("event.job", {"job_id": job_id, "state": state, "detail": detail}))

    def _emit_running(self, job_id: int, where: Placed) -> None:
        self._emit_job(job_id, "running", {"nodes": [node_name(n) for n in where.nodes],
                                           "group": list(where.group), "tt": where.tt})

    def declare_dead(self, name: str, reason: str) -> None:
        """An agent is gone: its node takes no work, its jobs are requeued, and rounds
        waiting for its stops to end stop waiting."""
        with self._lock:
            if self.agents.pop(name, None) is None:
                return
            index = int(name[1:])
            self.core.set_node_online(index, False)
            now = self.now()
            requeued = list(self.on_node.get(index, ()))
            for job_id in requeued:
                self._requeue(job_id, now, f"agent {name} lost: {reason}", skip=name)
            for (_, node), waits in self._stop_waits.items():
                if node == name:
                    for wait in waits:
                        wait.done.set()  # no report will come: result stays None
            self.log.warning("agent_dead", node=name, reason=reason, requeued=requeued)
            self.journal.log_event("agent_dead", now, node=name,
                                   detail={"reason": reason, "requeued": requeued})
            self.outbox.append(("event.agent", {"node": name, "state": "dead"}))
            self.wake_reasons.add("agent")

    # -- status --------------------------------------------------------------------------------
    def job_state(self, job_id: int) -> str:
        job = self.core.jobs[job_id]
        if job.status is Status.DONE:
            return "finished"
        return "running" if job_id in self.placed else "pending"

    def status(self, jobs: bool = True) -> dict[str, Any]:
        """The status.query reply: counts, agents and (unless a summary) every job's state."""
        with self._lock:
            counts = {"pending": 0, "running": 0, "finished": 0}
            listed = []
            wall = self.clock()
            for job_id, job in self.core.jobs.items():
                state = self.job_state(job_id)
                counts[state] += 1
                if jobs:
                    where = self.placed.get(job_id)
                    listed.append({
                        "job_id": job_id, "state": state,
                        "iterations_done": job.record.iterations - job.remaining,
                        "iterations": job.record.iterations, "num_gpu": job.num_gpu,
                        "nodes": [node_name(n) for n in where.nodes] if where else [],
                        "group": list(where.group) if where else [],
                        "preemptions": job.preemptions,
                    })
            for job_id, entry in self.finished_before.items():
                counts["finished"] += 1
                if jobs:
                    listed.append({
                        "job_id": job_id, "state": "finished",
                        "iterations_done": entry.iterations_done,
                        "iterations": entry.record.iterations, "num_gpu": entry.record.num_gpu,
                        "nodes": [], "group": [], "preemptions": entry.preemptions,
                    })
            total = len(listed)
            if total > STATUS_JOBS_LIMIT:
                listed.sort(key=lambda j: (_STATE_ORDER[j["state"]], j["job_id"]))
                del listed[STATUS_JOBS_LIMIT:]
            return {
                "now": self.now(), "policy": self.opt.policy, "rounds": self.rounds,
                "counts": counts,
                "agents": {name: {"online": True, "gpus": list(a.gpus),
                                  "last_heartbeat_s": wall - a.last_seen}
                           for name, a in sorted(self.agents.items())},
                "offline": [node_name(n) for n in sorted(self.core.cluster.offline)],
                "refused": self.refusals.counts(), "round_failures": self.round_failures,
                **({"jobs": listed, "jobs_truncated": total > len(listed)}
                   if jobs else {}),
            }

    # -- the main loop -------------------------------------------------------------------------
    def run(self, stop: threading.Event, ready: threading.Event | None = None) -> int:
        """Serve until `stop` is set. The service thread answers requests meanwhile."""
        from broker.client import Publisher, Requester, Subscriber

        svc_stop, svc_ready = threading.Event(), threading.Event()
        svc_error: list[BaseException] = []
        thread = threading.Thread(target=self._serve, args=(svc_stop, svc_ready, svc_error),
                                  name="scheduler-service", daemon=True)
        thread.start()
        requester = Requester(self.endpoints, SERVICE, timeout=self.opt.agent_request_timeout,
                              retries=self.opt.agent_request_retries)
        publisher = Publisher(self.endpoints, SERVICE)
        subscriber = Subscriber(self.endpoints, ["event.progress", "event.timing"],
                                refusals=self.refusals)
        self.log.info("scheduler_start", policy=self.opt.policy, preset=self.opt.preset,
                      nodes=self.opt.spec.num_nodes, gpus=self.opt.spec.total_gpus,
                      time_scale=self.opt.time_scale, round_s=self.opt.round_s,
                      agent_timeout=self.opt.agent_timeout, pid=os.getpid(), clock=self.now())
        svc_ready.wait(10.0)
        if ready is not None:
            ready.set()
        try:
            while not stop.is_set():
                if not thread.is_alive():
                    self.log.error("service_thread_died", error=repr(svc_error[:1]))
                    return 1
                self._pump(subscriber, wait=0.05)
                self.step(requester)
                self._publish(publisher)
            return 0
        finally:
            svc_stop.set()
            thread.join(timeout=5.0)
            self._pool.shutdown(wait=True)
            for sock in (requester, publisher, subscriber, *self._pool_requesters):
                try:
                    sock.close()
                except Exception:  # closing is best effort on the way out
                    pass
            self.journal.set_clock(self.now())
            self.log.info("scheduler_exit", rounds=self.rounds, clock=self.now(),
                          round_failures=self.round_failures, refused=self.refusals.counts())

    def _serve(self, stop: threading.Event, ready: threading.Event,
               error: list[BaseException]) -> None:
        from broker.client import HandlerError, Service

        def handler(msg: Any) -> dict[str, Any]:
            try:
                return self.handle(msg)
            except Refusal as err:  # counted and logged (once per sender) by the Service
                raise HandlerError(err.code, err.reason) from None
            except HandlerError:
                raise
            except Exception as err:  # a bug costs one request, not the scheduler
                self.log.exception("request_failed", type=msg.type, sender=msg.sender)
                raise HandlerError("internal", f"{type(err).__name__}: {err}") from None

        try:
            service = Service(self.endpoints, SERVICE, handler, heartbeat=0.5,
                              refusals=self.refusals)
        except BaseException as err:
            error.append(err)
            raise
        ready.set()
        try:
            service.serve(stop)
        except BaseException as err:
            error.append(err)
            raise
        finally:
            service.close()

    def _pump(self, subscriber: Any, wait: float) -> None:
        """Fold progress telemetry in; waits up to `wait` for the first event."""
        msg = subscriber.recv(wait)
        count = 0
        while msg is not None and count < 10_000:
            try:
                if msg.type == "event.progress":
                    with self._lock:
                        if msg["job_id"] in self.placed:
                            self._note_progress(msg["job_id"], float(msg["iterations"]))
                elif msg.type == "event.timing":
                    with self._lock:
                        self._note_timing(msg)
            except Exception as err:  # telemetry is advice: a bad event costs itself only
                self.refusals.refuse(f"{msg.type}:internal", msg.sender,
                                     f"{type(err).__name__}: {err}", job_id=msg.get("job_id"))
            count += 1
            msg = subscriber.recv(0)

    def _publish(self, publisher: Any) -> None:
        with self._lock:
            out, self.outbox = self.outbox, []
        for type_, fields in out:
            try:
                publisher.publish(type_, **fields)
            except Exception:  # telemetry is lossy by design; never fatal
                self.log.exception("publish_failed", type=type_)

    def step(self, requester: Any) -> None:
        """One pass of the main loop: liveness, strays, and a round when one is due."""
        wall = self.clock()
        with self._lock:
            dead = [name for name, a in self.agents.items()
                    if wall - a.last_seen > self.opt.agent_timeout]
        for name in dead:
            self.declare_dead(name, f"no heartbeat for {self.opt.agent_timeout:g}s")
        self._stop_strays(requester)
        with self._lock:
            due = bool(self.wake_reasons) or wall - self._last_round >= self.opt.round_s \
                or (self.next_wakeup is not None and self.now() >= self.next_wakeup)
            due = due and not self._recovery_pending(wall)
        if due:
            try:
                self.round(requester)
            except Exception as err:  # a round's bug must not end the scheduler
                self._round_failed(err)
        self._say_refusals(wall)

    def _recovery_pending(self, wall: float) -> bool:
        """After a restart, no round until every node that ran a journaled job has
        re-registered, or an agent timeout has passed (an agent that stays silent that long
        is dead, and its jobs are free to run elsewhere). Called with _lock held."""
        if not self.awaiting:
            return False
        if wall - self._wall0 <= self.opt.agent_timeout:
            return True
        self.log.warning("recovery_gave_up_waiting", nodes=sorted(self.awaiting))
        self.awaiting.clear()
        return False

    def _round_failed(self, err: Exception) -> None:
        """Log the failed round with the jobs it touched; the next one is due a full round_s
        later (or at the next event), never at once, so a round that always fails is no hot
        loop. The running jobs stay where they are meanwhile."""
        with self._lock:
            self.round_failures += 1
            self._last_round = self.clock()
            self.next_wakeup = None  # a stale wake-up in the past would be due at once
            running = [j.id for j in self.core.running_jobs()]
            queued = [j.id for j in self.core.queue if j.status is Status.PENDING]
            self.log.error("round_failed", error=f"{type(err).__name__}: {err}",
                           running=running, queued=queued, failures=self.round_failures,
                           exc_info=err)

    def _say_refusals(self, wall: float, every: float = 30.0) -> None:
        """The refusal counts in the log, when they changed, at most every `every` s."""
        total, said = self.refusals.total(), self._refusals_said
        if total != said[0] and wall - said[1] >= every:
            self._refusals_said = (total, wall)
            self.log.info("refusals", total=total, refused=self.refusals.counts())

    def _stop_strays(self, requester: Any) -> None:
        """Stop trainers that run outside any plan, concurrently, each awaited to its end
        (so a launch that follows finds its GPUs free)."""
        with self._lock:
            strays, self.strays = self.strays, []
            # a stray found when its agent registered may have been placed on that very node
            # since (the launch then found it running and adopted it): it is no stray now
            adopted = [(j, n) for j, n in strays if self._runs_on(j, n)]
            strays = [(j, n) for j, n in strays if not self._runs_on(j, n)]
        for job_id, name in adopted:
            self.log.info("stray_adopted", job_id=job_id, node=name)
        self._concurrently(requester, [(self._stop_stray, job_id, name)
                                       for job_id, name in dict.fromkeys(strays)])

    def _stop_stray(self, requester: Any, job_id: int, name: str) -> None:
        reply = self._stop_everywhere(requester, job_id, [name], lambda: True)[0]
        if reply is None:
            return
        with self._lock:
            job = self.core.jobs.get(job_id)
            its = reply.get("iterations")
            if job is not None and job.status is not Status.DONE \
                    and job_id not in self.placed and job_id not in self.launching \
                    and isinstance(its, (int, float)):
                # a job the scheduler had lost track of (pending, or planned but not
                # launched yet): its stop checkpoint is the truth
                done = max(float(its), self._resume_point(job_id))
                self.core.set_remaining(job_id, job.record.iterations - done)
                if done >= job.record.iterations and job.status is not Status.DONE:
                    self._finish(job_id, self.now(), done, name)  # never launch it again
            if job is not None and reply.get("finished") and job.status is not Status.DONE:
                self._finish(job_id, self.now(), float(its or job.record.iterations), name)
        self.log.info("stray_stopped", job_id=job_id, node=name, iterations=its)

    def _runs_on(self, job_id: int, name: str) -> bool:
        where = self.placed.get(job_id) or self.launching.get(job_id)
        return where is not None and any(node_name(n) == name for n in where.nodes)

    def _agent_request(self, requester: Any, name: str, type_: str,
                       **fields: Any) -> dict[str, Any] | None:
        """A request to an agent; None when it failed."""
        return self._agent_call(requester, name, type_, **fields)[0]

    def _agent_call(self, requester: Any, name: str, type_: str,
                    **fields: Any) -> tuple[dict[str, Any] | None, bool]:
        """(reply body or None, whether it timed out). Heartbeats alone decide an agent is
        dead: a timeout only means this answer did not come (the caller asks again, or a
        launch that may have happened unheard is stopped as a stray). The broker's
        `no_service` still declares the agent dead: the broker lost the agent's service
        heartbeats, and the agent's service thread, never held up by a stop, sends them."""
        from broker.client import RequestFailed, RequestTimeout

        with self._lock:
            if name not in self.agents:  # dead or never came: its re-registration sorts it out
                self.log.info("agent_request_skipped", node=name, type=type_,
                              job_id=fields.get("job_id"))
                return None, False
        try:
            reply = requester.request(f"agent.{name}", type_, **fields)
        except RequestTimeout:
            self.log.warning("agent_request_timeout", node=name, type=type_,
                             job_id=fields.get("job_id"))
            if type_ == "job.launch":
                with self._lock:
                    self.strays.append((fields["job_id"], name))
            return None, True
        except RequestFailed as err:
            self.log.warning("agent_request_refused", node=name, type=type_,
                             job_id=fields.get("job_id"), code=err.code, reason=err.reason)
            if err.code == "no_service":  # the broker no longer knows the agent
                self.declare_dead(name, f"{type_}: {err.reason}")
            return None, False
        return dict(reply.get("body") or {}), False

    # -- rounds ----------------------------------------------------------------------------
    def round(self, requester: Any) -> None:
        """Advance the core, plan, and make the agents run the plan: stops first, then launches."""
        with self._lock:
            now = self.now()
            reasons = sorted(self.wake_reasons) or ["tick"]
            self.wake_reasons.clear()
            done = {}
            for job in self.core.running_jobs():
                seen = self.progress.get(job.id)
                if seen is not None:
                    done[job.id] = max(seen - (job.record.iterations - job.remaining), 0.0)
            self.core.advance(now, done)
            started = time.perf_counter()
            plan = self.core.round(now)
            latency_ms = (time.perf_counter() - started) * 1000.0
            self.rounds += 1
            self._last_round = self.clock()
            self.next_wakeup = plan.wakeup
            desired = {j: Placed(g.jobs, g.tt, g.placement)
                       for g in plan.groups if g.placement for j in g.jobs}
            unplaced = [list(g.jobs) for g in plan.groups if not g.placement]
            if unplaced:  # a policy that plans GPUs without naming them: nothing to launch
                self.log.warning("groups_without_placement", groups=unplaced)
            # one comparison of what agents run with the plan, shared with the simulator: a
            # job that keeps its GPUs and only changes group goes on where it is, at the
            # group's new pace, where the preset says so (see __init__ and _regroup_job)
            changes = plan_changes.compare({j: p.key for j, p in self.placed.items()},
                                           {j: d.key for j, d in desired.items()},
                                           self.core.preset)
            stopping, starting = set(changes.stopping), set(changes.starting)
            in_place = set(changes.regrouped_in_place)
            stops = [(j, p) for j, p in self.placed.items() if j in stopping]
            regroups = [(j, p, desired[j]) for j, p in self.placed.items() if j in in_place]
            launches = [(j, d) for j, d in desired.items() if j in starting]
            groups = [list(g.jobs) for g in plan.groups]
            if stops or launches or reasons != ["tick"] or self.rounds % 10 == 0:
                self.journal.set_clock(now)  # a restart continues the trace clock from here
            self.log.info("round", now=now, latency_ms=latency_ms, groups=groups,
                          reasons=reasons, stops=[j for j, _ in stops],
                          launches=[j for j, _ in launches],
                          regroups=[j for j, _, _ in regroups],
                          pending=sum(1 for j in self.core.queue if j.status is Status.PENDING))
            self.outbox.append(("event.round", {"groups": groups, "latency_ms": latency_ms}))
            changing = {j for j, _ in stops} | in_place
            self.stopping.update(changing)
        # Stops first (a job's GPUs are free only once it checkpointed), then launches; each
        # batch runs concurrently, one requester per worker thread, since every stop or
        # launch waits on a process and a round may move many jobs at once.
        try:
            self._concurrently(requester, [
                (self._stop_job, job_id, was, desired.get(job_id)) for job_id, was in stops]
                + [(self._regroup_job, job_id, was, want) for job_id, was, want in regroups])
        finally:
            with self._lock:
                self.stopping.difference_update(changing)
                # a regroup an agent could not do in place was a stop: launch it again
                launches += [(j, want) for j, _, want in regroups if j not in self.placed]
        # strays found by registrations during this round go before the launches, which
        # could otherwise find a stray trainer running and adopt it
        self._stop_strays(requester)
        self._concurrently(requester, [
            (self._launch_job, job_id, want) for job_id, want in launches])
        # The round is applied (every stop, regroup and launch it sent is answered or failed):
        # its end, for whole-round latency; apply_ms is the time since planning ended.
        self.log.info("round_done", round=self.rounds,
                      apply_ms=(self.clock() - self._last_round) * 1000.0)

    def _concurrently(self, requester: Any, calls: list[tuple]) -> None:
        if len(calls) <= 1:
            for fn, *args in calls:
                fn(requester, *args)
            return
        def work(call: tuple) -> None:
            fn, *args = call
            fn(self._thread_requester(), *args)

        for future in [self._pool.submit(work, call) for call in calls]:
            future.result()

    def _thread_requester(self) -> Any:
        """One Requester per worker thread (a socket is not to be shared across threads);
        kept for the thread's life and closed with the scheduler."""
        from broker.client import Requester

        requester = getattr(self._local, "requester", None)
        if requester is None:
            requester = Requester(self.endpoints, f"{SERVICE}.{threading.get_ident()}",
                                  timeout=self.opt.agent_request_timeout,
                                  retries=self.opt.agent_request_retries)
            self._local.requester = requester
            with self._lock:
                self._pool_requesters.append(requester)
        return requester

    def _stop_job(self, requester: Any, job_id: int, was: Placed,
                  now_placed: Placed | None) -> None:
        """Stop the job everywhere it runs and wait until each agent reports its trainer
        gone (or dies) before its GPUs count as free; then settle it from the checkpoint."""
        reason = "preempted" if now_placed is None else (
            "moved" if now_placed.slices != was.slices else "regrouped")
        replies = [r for r in self._stop_everywhere(
            requester, job_id, [node_name(piece.node) for piece in was.slices],
            lambda: self.placed.get(job_id) is was) if r is not None]
        with self._lock:
            job = self.core.jobs[job_id]
            if self.placed.get(job_id) is not was:
                return  # finished or requeued while we were stopping it
            self._unplace(job_id)
            now = self.now()
            numbers = [float(r["iterations"]) for r in replies
                       if isinstance(r.get("iterations"), (int, float))]
            its = numbers[0] if numbers else self._resume_point(job_id)
            # a trainer that ended on its own just before the stop reached it: done is done,
            # whatever the reply's flag says (a relaunch at its total would run it twice)
            if any(r.get("finished") for r in replies) or its >= job.record.iterations:
                self._finish(job_id, now, its, node_name(was.slices[0].node))
                return
            self.core.set_remaining(job_id, job.record.iterations - its)
            self.progress.pop(job_id, None)
            self.journal.mark_stopped(job_id, its, now, node=node_name(was.slices[0].node),
                                      detail={"reason": reason},
                                      preempted=now_placed is None)
            self.log.info("job_stopped", job_id=job_id, reason=reason, iterations=its, now=now,
                          nodes=[node_name(n) for n in was.nodes])
            self._emit_job(job_id, "stopped", {"reason": reason, "iterations": its})

    def _stop_everywhere(self, requester: Any, job_id: int, names: list[str],
                         current: Callable[[], bool]) -> list[dict[str, Any] | None]:
        """job.stop to each of `names` (all asked before any is awaited, so their trainers
        checkpoint together), then each stop's outcome: the agent's `job.stopped` report, or
        its reply when it had nothing to stop (or stopped before answering); None where the
        agent died, refused, or `current()` (under the lock) says the stop no longer matters."""
        waits = [self._watch_stop(job_id, name) for name in names]
        try:
            asked = [self._ask_stop(requester, job_id, name, wait, current)
                     for name, wait in zip(names, waits)]
            return [self._await_stop(requester, job_id, name, wait, reply, current)
                    for name, wait, reply in zip(names, waits, asked)]
        finally:
            with self._lock:
                for name, wait in zip(names, waits):
                    left = [w for w in self._stop_waits.get((job_id, name), ()) if w is not wait]
                    if left:
                        self._stop_waits[(job_id, name)] = left
                    else:
                        self._stop_waits.pop((job_id, name), None)

    def _watch_stop(self, job_id: int, name: str) -> _StopWait:
        """Registered before the request goes out: the report may beat the reply."""
        wait = _StopWait()
        with self._lock:
            self._stop_waits.setdefault((job_id, name), []).append(wait)
        return wait

    def _stop_matters(self, name: str, current: Callable[[], bool]) -> float | None:
        """Seconds until `name`'s heartbeats are overdue, while the stop still matters; None
        when it does not: the job was settled meanwhile (`current()` false), or the agent is
        dead, declared so here when its heartbeats are overdue (the main loop, which would
        declare it, is waiting on this round)."""
        with self._lock:
            agent = self.agents.get(name)
            if agent is None or not current():
                return None
            left = agent.last_seen + self.opt.agent_timeout - self.clock()
            if left >= 0:
                return left
        self.declare_dead(name, f"no heartbeat for {self.opt.agent_timeout:g}s")
        return None

    def _ask_stop(self, requester: Any, job_id: int, name: str, wait: _StopWait,
                  current: Callable[[], bool]) -> dict[str, Any] | None:
        """The agent's answer to job.stop, asked again after a timeout for as long as the
        agent lives (heartbeats decide that) and the stop matters; a stop is idempotent."""
        while True:
            reply, timed_out = self._agent_call(requester, name, "job.stop", job_id=job_id)
            if reply is not None or not timed_out:
                return reply
            if wait.done.wait(STOP_RETRY_S):  # reported (or the agent died) meanwhile
                return {"stopping": True}
            if self._stop_matters(name, current) is None:
                return None

    def _await_stop(self, requester: Any, job_id: int, name: str, wait: _StopWait,
                    reply: dict[str, Any] | None,
                    current: Callable[[], bool]) -> dict[str, Any] | None:
        """The outcome of a stop the agent answered: its report when the answer was
        `stopping`, awaited until it comes or the agent's heartbeats are overdue. Unreported
        after STOP_RECHECK_S, the agent is asked again: "stopping" still, or (the trainer
        gone and its report lost, e.g. with an agent restart) the checkpoint."""
        recheck = self.clock() + STOP_RECHECK_S
        while reply is not None and reply.get("stopping"):
            if wait.done.is_set():
                return wait.result
            left = self._stop_matters(name, current)
            if left is None:
                return wait.result if wait.done.is_set() else None
            if wait.done.wait(max(0.0, min(left, recheck - self.clock()))):
                return wait.result
            if self.clock() >= recheck:
                self.log.info("stop_unreported", job_id=job_id, node=name,
                              after_s=STOP_RECHECK_S)
                reply = self._ask_stop(requester, job_id, name, wait, current)
                recheck = self.clock() + STOP_RECHECK_S
        return reply

    def _regroup_job(self, requester: Any, job_id: int, was: Placed, want: Placed) -> None:
        """Tell the job's agents its new group and pace; it keeps running where it is. Where
        that fails (an agent that cannot, or is gone), stop it like any move: the launch
        phase of this round starts it again."""
        slot = want.group.index(job_id)
        replies = [self._agent_request(requester, node_name(piece.node), "job.regroup",
                                       job_id=job_id, group=list(want.group), slot=slot,
                                       iteration_time=want.tt)
                   for piece in was.slices]
        with self._lock:
            if self.placed.get(job_id) is not was:
                return  # finished or requeued while we asked
            if all(r is not None and r.get("regrouped") for r in replies):
                self.placed[job_id] = want  # same slices: the node index stays right
                self.log.info("job_regrouped", job_id=job_id, group=list(want.group),
                              slot=slot, tt=want.tt, now=self.now(),
                              nodes=[node_name(n) for n in want.nodes])
                self._emit_running(job_id, want)
                return
        self._stop_job(requester, job_id, was, want)

    def _launch_job(self, requester: Any, job_id: int, want: Placed) -> None:
        with self._lock:
            job = self.core.jobs[job_id]
            plan_now = self.core.plan_now.running().get(job_id)
            offline = [n for n in want.nodes if node_name(n) not in self.agents]
            if job.status is not Status.RUNNING or plan_now is None \
                    or (plan_now.jobs, plan_now.placement) != want.key or offline:
                if offline and job.status is Status.RUNNING:
                    self.core.stop(job_id, self.now())
                    self.wake_reasons.add("launch_skipped")
                return
            start = float(job.record.iterations - job.remaining)
            workload = self._workload(job, want)
            gpus_of = {p.node: self._gpu_ids(p) for p in want.slices}
            self.launching[job_id] = want
            self.aborted.discard(job_id)
            # journaled as started when the launch goes out: a job may even finish before
            # the launch reply is back, and its first start must be known for its JCT report
            self.journal.mark_started(job_id, start, self.now(), node=node_name(want.nodes[0]),
                                      detail={"nodes": [node_name(n) for n in want.nodes]})
        launched: list[int] = []
        seqs: dict[int, tuple[str | None, int]] = {}
        failed = None
        ranks = {"rank": 0, "world_size": sum(len(g) for g in gpus_of.values())} \
            if workload["kind"] == "torch" else {}
        for piece in want.slices:
            name = node_name(piece.node)
            reply = self._agent_request(requester, name, "job.launch", job_id=job_id,
                                        gpus=gpus_of[piece.node], group=list(want.group),
                                        slot=want.group.index(job_id), workload=workload,
                                        start_iteration=start, **ranks)
            if reply is None:
                failed = name
                break
            if isinstance(reply.get("launch_seq"), int):
                seqs[piece.node] = (reply.get("incarnation"), reply["launch_seq"])
            if ranks:  # rank 0's agent chose the rendezvous; the other slices join it
                ranks["rank"] += len(gpus_of[piece.node])
                if "master_port" in reply and "master_port" not in ranks:
                    ranks.update(master_addr=str(reply.get("master_addr") or "127.0.0.1"),
                                 master_port=int(reply["master_port"]))
            launched.append(piece.node)
        with self._lock:
            self.launching.pop(job_id, None)
            aborted = job_id in self.aborted
            self.aborted.discard(job_id)
            job = self.core.jobs[job_id]
            lost = [n for n in want.nodes if node_name(n) not in self.agents]
            if failed is None and not aborted and not lost and job.status is Status.RUNNING:
                self._place(job_id, want, seqs)
                now = self.now()
                entry = self.journal.get(job_id)
                self.log.info("job_started", job_id=job_id,
                              node=node_name(want.nodes[0]),
                              nodes=[node_name(n) for n in want.nodes],
                              gpus={node_name(n): g for n, g in gpus_of.items()},
                              group=list(want.group), slot=want.group.index(job_id),
                              tt=want.tt, start_iteration=start, now=now,
                              submit=entry.submit_trace, first_start=entry.first_start_trace)
                self._emit_running(job_id, want)
                return
            # undo: ranks that did start must not run on
            for node in launched:
                self.strays.append((job_id, node_name(node)))
            if aborted or job.status is not Status.RUNNING:  # finished or requeued meanwhile
                self.log.info("launch_aborted", job_id=job_id, state=self.job_state(job_id))
                return
            now = self.now()
            self.core.stop(job_id, now)
            self.journal.mark_stopped(job_id, start, now, node=failed,
                                      detail={"reason": "launch failed"})
            # no immediate round: an agent that refuses would be asked again at once, forever;
            # the next tick retries
            self.log.warning("launch_failed", job_id=job_id, node=failed,
                             lost=[node_name(n) for n in lost])

    def _workload(self, job: Any, want: Any) -> dict[str, Any]:
        if self.opt.workload == "torch":
            return {"kind": "torch", "iterations": job.record.iterations, "model": job.model,
                    "batch_size": 0, "config": dict(self.opt.torch_config)}
        return {"kind": "emulated", "iterations": job.record.iterations,
                "iteration_time": want.tt, "stages": stage_list(job.profile)}

    def _note_timing(self, msg: Any) -> None:
        """A trainer measured its stages (trace seconds): fold them into the job's profile;
        a move big enough re-weights the matching at once."""
        job = self.core.jobs.get(msg["job_id"])
        if job is None or job.status is not Status.RUNNING:
            return
        overhead = msg.get("restart_overhead")
        try:
            if overhead is not None and overhead != job.restart_overhead:
                self.core.set_restart_overhead(job.id, overhead)  # weighs future regroups
            profile = self.profiles.fold(job.id, job.profile, msg["stages"])
            if profile is None:
                return
            self.core.update_profile(job.id, profile, solo_time=sum(profile))
        except SchedulingError as err:  # the core is the last line: refused, nothing changed
            self.profiles.forget(job.id)  # the estimate it refused must not seed the next
            self.refusals.refuse("event.timing:refused_by_core", msg.sender, str(err),
                                 job_id=job.id)
            return
        self.wake_reasons.add("profile")
        self.log.info("profile_updated", job_id=job.id, profile=[round(t, 6) for t in profile],
                      measured=dict(msg["stages"]))

    def _gpu_ids(self, piece: NodeSlice) -> list[int]:
        """The agent's own GPU ids for the spec's GPU indices on that node."""
        agent = self.agents.get(node_name(piece.node))
        ids = agent.gpus if agent is not None else ()
        return [ids[g] if g < len(ids) else g for g in piece.gpus]

    def close(self) -> None:
        self.journal.close()


# -- command line ----------------------------------------------------------------------------
def _load_spec(text: str) -> ClusterSpec:
    path = Path(text)
    return load_spec(path if path.suffix == ".csv" or path.exists() else spec_path(text))


def parse_args(argv: Sequence[str] | None = None) -> tuple[argparse.Namespace, ClusterSpec]:
    p = argparse.ArgumentParser(prog="python -m scheduler.service",
                                description=__doc__.split("\n")[0])
    from specs import available_specs
    p.add_argument("--spec", required=True, help="cluster spec: a CSV path or a packaged name ("
                   f"{', '.join(available_specs())})")
    p.add_argument("--policy", default="muri-s", choices=sorted(POLICIES))
    p.add_argument("--preset", default="default", help="model preset (default: default)")
    p.add_argument("--endpoints", required=True, help="the broker's endpoints file")
    p.add_argument("--run-dir", required=True,
                   help="scheduler.log, journal.db; agents' checkpoints/ are read from here")
    p.add_argument("--time-scale", type=float, default=1.0, help="trace seconds per wall second")
    p.add_argument("--round", type=float, default=5.0, dest="round_s",
                   help="wall seconds between rounds when nothing happens (default 5.0); "
                        "arrivals, completions and agent changes start a round at once")
    p.add_argument("--agent-timeout", type=float, default=10.0,
                   help="wall seconds without a heartbeat before an agent is dead (default 10)")
    p.add_argument("--journal", default=None, help="journal path (default RUN_DIR/journal.db)")
    p.add_argument("--checkpoint-dir", default=None,
                   help="where agents write checkpoints (default RUN_DIR/checkpoints)")
    p.add_argument("--wait-endpoints", type=float, default=30.0,
                   help="seconds to wait for the endpoints file to appear")
    p.add_argument("--workload", default="emulated", choices=["emulated", "torch"],
                   help="emulated: trainers replay the planned pace (default); torch: real "
                        "training of each job's model (needs the train extra)")
    p.add_argument("--torch-config", default="{}",
                   help="JSON settings for every torch workload, e.g. '{\"input_size\": 16}'")
    p.add_argument("--log-level", default="info")
    from broker.keys import add_client_key_argument
    add_client_key_argument(p)
    a = p.parse_args(argv)
    try:
        a.torch_config = json.loads(a.torch_config)
        if not isinstance(a.torch_config, dict):
            raise ValueError("not a JSON object")
    except ValueError as err:
        p.error(f"--torch-config must be a JSON object: {err}")
    if not (a.time_scale > 0 and a.round_s > 0 and a.agent_timeout > 0):
        p.error("--time-scale, --round and --agent-timeout must be > 0")
    try:
        get_preset(a.preset)
        spec = _load_spec(a.spec)
    except (ValueError, SpecError) as err:
        p.error(str(err).splitlines()[0])
    return a, spec


def main(argv: Sequence[str] | None = None) -> int:
    """Exit status 0 after a clean stop; 1 with one line on stderr naming the file when the
    run dir, the journal or the endpoints cannot be had; 2 for a usage error."""
    args, spec = parse_args(argv)
    import sqlite3

    from broker.curve import component_endpoints
    from broker.logs import configure_logging
    from scheduler.journal import JournalError

    run_dir = Path(args.run_dir).resolve()
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        print(f"{SERVICE}: {run_dir}: cannot create the run directory ({err.strerror or err})",
              file=sys.stderr)
        return 1
    # opened once here, before anything waits for the broker, so an unwritable or corrupt
    # journal is one line at once (not a traceback once the broker is up)
    journal_path = Path(args.journal).resolve() if args.journal else run_dir / "journal.db"
    try:
        Journal(journal_path).close()
    except (OSError, sqlite3.Error, JournalError) as err:
        print(f"{SERVICE}: {journal_path}: cannot use the journal ({err})", file=sys.stderr)
        return 1
    log = configure_logging(SERVICE, run_dir, level=args.log_level)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    endpoints = component_endpoints("scheduler", args.endpoints, args.wait_endpoints,
                                    args.client_key, stop, log)
    if endpoints is None:
        return 1
    options = Options(spec=spec, policy=args.policy, preset=args.preset, run_dir=run_dir,
                      time_scale=args.time_scale, round_s=args.round_s,
                      agent_timeout=args.agent_timeout,
                      journal=Path(args.journal) if args.journal else None,
                      checkpoint_dir=Path(args.checkpoint_dir) if args.checkpoint_dir else None,
                      workload=args.workload, torch_config=args.torch_config)
    try:
        service = SchedulerService(endpoints, options, log=log)
    except (OSError, sqlite3.Error, JournalError) as err:  # changed since the check above
        log.error("journal_unusable", path=str(journal_path), error=str(err))
        return 1
    try:
        return service.run(stop)
    finally:
        service.close()


if __name__ == "__main__":
    sys.exit(main())
