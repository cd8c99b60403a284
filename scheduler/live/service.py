"""The live scheduler: the second driver of the scheduling core (the simulator is the first).

It turns messages into core events and the core's plans into `job.stop` / `job.launch`
requests to node agents; the core never learns that it runs live. This module only wires the
parts (docs/architecture.md has the map):

* state.py     what the scheduler knows, its lock, and the transitions both threads make;
* handlers.py  requests, on the service thread (`job.submit`, `agent.*`, `job.finished`,
               `job.stopped`, `status.query`); never talks to an agent;
* cluster.py   the driver loop's backend (scheduler/loop.py runs it on the main thread):
               telemetry, liveness and strays between rounds; executor.py acts on each
               plan: stop, regroup, launch;
* gateway.py   requests to agents and their liveness; telemetry.py progress in, events out;
* recovery.py  a restart from the journal (journal.py) and the checkpoints.

Threads: the service thread answers requests, each under the state's lock. The main thread
pumps telemetry, watches liveness, runs rounds and sends the blocking requests to agents
*outside* the lock, re-checking what changed meanwhile. Each zmq socket is used only by the
thread that created it.

Durability: a job is journaled (SQLite, fsynced) before its submit is acknowledged; a
restarted scheduler rebuilds its queue from the journal and each job's checkpoint, and keeps
the trace clock running from where the journal left it.
"""
from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable

import structlog

from broker.refusal import Refusal, as_handler
from scheduler.live import recovery, status
from scheduler.live.agents import declare_dead as declare_agent_dead
from scheduler.live.cluster import AgentCluster
from scheduler.live.gateway import SERVICE, AgentGateway
from scheduler.live.handlers import Handlers
from scheduler.live.journal import JournalFull
from scheduler.live.options import Options
from scheduler.live.state import LiveState
from scheduler.loop import Loop


class SchedulerService:
    """The live driver. `handle` is the request handler; `run` is the main loop."""

    def __init__(self, endpoints: Any, options: Options, log: Any = None,
                 clock: Callable[[], float] = time.monotonic):
        self.endpoints = endpoints
        self.opt = options
        self.log = log if log is not None else structlog.get_logger(SERVICE)
        self.clock = clock
        self.state = LiveState(options, self.log, clock)
        self.handlers = Handlers(self.state)
        self.gateway = AgentGateway(self.state, endpoints)
        self.cluster = AgentCluster(self.state, self.gateway)
        # the loop writes the core; after each round it leaves a view of it for readers
        self.loop = Loop(self.state.core, self.cluster,
                         on_round=lambda now, plan, core: self.state.publish_view())
        if options.metrics is not None:  # observed from now on, served while `run` runs
            from scheduler.live.metrics import SchedulerMetrics
            self.state.metrics = SchedulerMetrics(self.state)
            self.state.journal.on_write = self.state.metrics.journal_write
        recovery.recover(self.state)
        # what the journal holds into the core at once, and a view of it for the first
        # readers (no round yet: those wait for the agents)
        self.loop.apply(self.state.inbox.take())
        self.state.publish_view()

    def now(self) -> float:
        return self.state.now()

    def handle(self, msg: Any) -> dict[str, Any]:
        """Answer one request; Refusal for anything malformed or not applicable, and for a
        change the journal has no room for (`disk_full`: the operator's problem, said so)."""
        try:
            return self.handlers.handle(msg)
        except JournalFull as err:
            raise Refusal("disk_full", str(err)) from None

    def declare_dead(self, name: str, reason: str) -> None:
        declare_agent_dead(self.state, name, reason)

    def job_state(self, job_id: int) -> str:
        return status.job_state(self.state, job_id)

    def status(self, jobs: bool = True) -> dict[str, Any]:
        return status.status(self.state, jobs)

    def round(self, requester: Any) -> None:
        """A round now, whether due or not (a test's, or an operator's)."""
        self.cluster.requester = requester
        self.loop.turn(self.cluster.due())

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
                                refusals=self.state.refusals)
        self.log.info("scheduler_start", policy=self.opt.policy, preset=self.opt.preset,
                      nodes=self.opt.spec.num_nodes, gpus=self.opt.spec.total_gpus,
                      time_scale=self.opt.time_scale, round_s=self.opt.round_s,
                      agent_timeout=self.opt.agent_timeout, pid=os.getpid(), clock=self.now())
        svc_ready.wait(10.0)
        metrics_server = self._serve_metrics()
        cluster = self.cluster
        cluster.requester, cluster.publisher, cluster.subscriber = requester, publisher, subscriber
        # the loop ends when `stop` is set, or when the service thread died: a scheduler
        # that cannot answer requests must not go on planning
        cluster.stop, cluster.alive = stop, thread.is_alive
        if ready is not None:
            ready.set()
        try:
            self.loop.run()
            if not thread.is_alive():
                self.log.error("service_thread_died", error=repr(svc_error[:1]))
                return 1
            return 0
        finally:
            svc_stop.set()
            thread.join(timeout=5.0)
            if metrics_server is not None:
                metrics_server.close()
            for sock in (requester, publisher, subscriber, *self.gateway.close()):
                try:
                    sock.close()
                except Exception:  # closing is best effort on the way out
                    pass
            try:
                self.state.journal.set_clock(self.now())
            except JournalFull as err:  # a restart continues from the clock saved before
                self.log.warning("clock_not_saved", detail=str(err))
            self.log.info("scheduler_exit", rounds=self.state.rounds.count, clock=self.now(),
                          round_failures=self.state.rounds.failures,
                          refused=self.state.refusals.counts())

    def _serve_metrics(self) -> Any:
        """The /metrics HTTP server when --metrics asked for one (None otherwise)."""
        if self.opt.metrics is None:
            return None
        from broker.metrics_http import MetricsServer, MetricsUnavailable

        host, port = self.opt.metrics
        try:
            return MetricsServer(self.state.metrics.registry, host, port,
                                 key=self.opt.metrics_key, insecure=self.opt.metrics_insecure,
                                 key_always=self.opt.metrics_key_always,
                                 log=self.log)
        except MetricsUnavailable as err:
            self.log.error("metrics_unavailable", detail=str(err))
            raise SystemExit(f"scheduler: {err}") from None

    def _serve(self, stop: threading.Event, ready: threading.Event,
               error: list[BaseException]) -> None:
        from broker.client import Service

        try:  # refusals are counted and logged (once per sender) by the Service
            # a batch of requests is answered after one durable commit: group commit
            service = Service(self.endpoints, SERVICE, as_handler(self.handle, self.log),
                              heartbeat=0.5, refusals=self.state.refusals,
                              before_replies=self.state.journal.sync,
                              on_caught_up=self.state.note_caught_up)
            self.state.sync_before_reply = True
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

    def step(self, requester: Any) -> None:
        """One pass of the main loop: liveness, strays, and a round when one is due."""
        self.cluster.requester = requester
        tick = self.cluster.poll()
        if tick is not None:
            self.loop.turn(tick)

    def close(self) -> None:
        self.state.journal.close()
