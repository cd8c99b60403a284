"""What the live scheduler knows, shared by its threads, and the changes both threads make.

One object, one lock (`lock`, re-entrant): the service thread's handlers and the main
thread's rounds both read and change it, always under the lock, and never talk to an agent
while holding it. `finish`, `requeue` and `declare_dead` are the transitions both threads
make: each writes the journal first, then the core, then the ledger, logs and queues events.
"""
from __future__ import annotations

import math
import threading
from typing import Any, Callable

from scheduler.core.engine import Core
from scheduler.live.gatefeed import GateFeed
from scheduler.live.journal import Journal
from scheduler.live.ledger import Ledger, Placed, node_name
from scheduler.live.metrics import NoMetrics
from scheduler.live.options import Options
from scheduler.live.stopwaits import StopWaits
from scheduler.plugins import make_policy
from scheduler.core.presets import get_preset
from scheduler.core.profiles import ProfileEstimator
from trainer import checkpoint


class LiveState:
    """The core, the journal, the ledger, the agents and the clock of one live scheduler."""

    def __init__(self, options: Options, log: Any, clock: Callable[[], float]):
        from broker.client import RefusalLog

        self.opt, self.log, self.clock = options, log, clock
        self.lock = threading.RLock()
        # torch trainers cannot change group where they run: a regroup restarts them, and
        # the preset (which the core and the plan comparison read) says so
        preset = get_preset(options.preset, **(
            {"regroup_in_place": False} if options.workload == "torch" else {}))
        self.core = Core(options.spec, make_policy(options.policy, preset), preset)
        self.journal = Journal(options.journal_path)
        self.ledger = Ledger()
        self.agents: dict[str, Any] = {}  # name -> gateway.AgentSeen
        self.progress: dict[int, float] = {}  # iterations done, per telemetry
        self.profiles = ProfileEstimator(threshold=options.profile_threshold)
        # input refused anywhere (schema, handlers, core): counted by kind, logged once per
        # sender and kind; shared by the service thread's Service and the main thread
        self.refusals = RefusalLog(log)
        self.stop_waits = StopWaits()
        self.metrics = NoMetrics()  # SchedulerMetrics under --metrics (metrics.py)
        self.gate_feed = GateFeed()  # the agents' measured gate turns (web view)
        self.outbox: list[tuple[str, dict[str, Any]]] = []  # events for the main thread
        self.wake_reasons: set[str] = set()
        self.rounds = 0
        self.round_failures = 0  # rounds that raised (logged `round_failed`; the loop goes on)
        self.last_round = -math.inf
        self.next_wakeup: float | None = None
        self.finished_before: dict[int, Any] = {}  # journal entries of jobs done before start
        self.cancelled: set[int] = set()  # jobs a user cancelled (the core holds them as done)
        self.awaiting: set[str] = set()  # after a restart: nodes to hear from before a round
        self.wall0 = clock()
        self.offset = self.journal.clock()

    def now(self) -> float:
        """Trace seconds: scaled wall time since start, continuing a restarted journal."""
        return self.offset + (self.clock() - self.wall0) * self.opt.time_scale

    # -- progress and resume points ----------------------------------------------------------
    def note_progress(self, job_id: int, done: float) -> None:
        if done > self.progress.get(job_id, -1.0):
            self.progress[job_id] = done

    def checkpoint_of(self, job_id: int) -> float | None:
        ckpt = checkpoint.read(self.opt.checkpoints, job_id)
        return ckpt.iterations if ckpt is not None else None

    def resume_point(self, job_id: int) -> float:
        """Iterations a requeued job will resume from: its checkpoint, or the last safe stop."""
        entry = self.journal.get(job_id)
        known = entry.iterations_done if entry is not None else 0.0
        return max(known, self.checkpoint_of(job_id) or 0.0)

    # -- events for subscribers --------------------------------------------------------------
    def emit_job(self, job_id: int, state: str, detail: dict[str, Any]) -> None:
        self.outbox.append(("event.job", {"job_id": job_id, "state": state, "detail": detail}))

    def emit_running(self, job_id: int, where: Placed) -> None:
        self.emit_job(job_id, "running", {"nodes": [node_name(n) for n in where.nodes],
                                          "group": list(where.group), "tt": where.tt})

    # -- transitions shared by both threads (called with the lock held) ----------------------
    def finish(self, job_id: int, now: float, iterations: float, node: str | None) -> None:
        """Journal first, then the core; other ranks are stopped by the main thread."""
        self.journal.mark_finished(job_id, now, iterations, node=node)
        self.core.finish(job_id, now)
        self.ledger.release(job_id, keep=node)
        self.progress.pop(job_id, None)
        self.profiles.forget(job_id)  # a requeue keeps it: the job runs again, same model
        entry = self.journal.get(job_id)
        submit, start = entry.submit_trace, entry.first_start_trace
        self.log.info("job_finished", job_id=job_id, node=node, iterations=iterations,
                      submit=submit, start=start, end=now, jct=now - submit,
                      queue_delay=None if start is None else start - submit,
                      preemptions=entry.preemptions, model=entry.record.model_name,
                      num_gpu=entry.record.num_gpu, trace_submit=entry.record.submit_time)
        self.emit_job(job_id, "finished", {"submit": submit, "start": start, "end": now})
        self.metrics.job_finished(now - submit, None if start is None else start - submit)
        self.wake_reasons.add("completion")

    def requeue(self, job_id: int, now: float, reason: str, skip: str | None = None,
                iterations: float | None = None) -> None:
        """The job stopped outside a plan: back to the queue, resuming from its checkpoint.
        A job whose checkpoint already holds every iteration finished unheard (its agent died
        before passing the trainer's end on): it is finished here, not launched once more."""
        done = self.resume_point(job_id)
        if iterations is not None:
            done = max(done, iterations)
        total = self.core.jobs[job_id].record.iterations
        if done >= total:
            self.log.info("job_finished_unheard", job_id=job_id, reason=reason,
                          iterations=done, node=skip)
            self.finish(job_id, now, done, skip)
            return
        where = self.ledger.release(job_id, keep=skip)
        self.core.stop(job_id, now)
        self.core.set_remaining(job_id, total - done)
        self.progress.pop(job_id, None)
        self.journal.mark_stopped(job_id, done, now, node=skip, detail={"reason": reason})
        self.log.info("job_stopped", job_id=job_id, reason=reason, iterations=done, now=now,
                      nodes=[node_name(n) for n in (where.nodes if where else ())])
        self.emit_job(job_id, "stopped", {"reason": reason, "iterations": done})
        self.wake_reasons.add("requeue")

    def declare_dead(self, name: str, reason: str) -> None:
        """An agent is gone: its node takes no work, its jobs are requeued, and rounds
        waiting for its stops to end stop waiting."""
        with self.lock:
            if self.agents.pop(name, None) is None:
                return
            index = int(name[1:])
            self.core.set_node_online(index, False)
            now = self.now()
            requeued = list(self.ledger.on(index))
            for job_id in requeued:
                self.requeue(job_id, now, f"agent {name} lost: {reason}", skip=name)
            self.stop_waits.node_gone(name)
            self.log.warning("agent_dead", node=name, reason=reason, requeued=requeued)
            self.journal.log_event("agent_dead", now, node=name,
                                   detail={"reason": reason, "requeued": requeued})
            self.outbox.append(("event.agent", {"node": name, "state": "dead"}))
            self.wake_reasons.add("agent")
