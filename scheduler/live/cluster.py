"""The agent cluster: the driver loop's backend in the live scheduler.

Between rounds it serves the main thread's duties: queued events out to subscribers,
trainers' telemetry in, agents whose heartbeats are overdue declared dead, stray trainers
stopped. When a round is due (an event woke it, `round_s` passed, or the policy's wake-up
came) it hands the loop a `Tick`: the trace clock, the iterations each running job did, as
telemetry reported them, and the events every thread left in the state's inbox since the
last (submissions, ends, requeues, measurements: scheduler/events.py), in order. The loop
is the core's only writer; after each round the state's view is taken for readers.
"""
from __future__ import annotations

import math
import threading
import time
from typing import Any, Callable

from scheduler.core.engine import Core
from scheduler.core.state import Plan, Status
from scheduler.live import recovery, telemetry
from scheduler.live.agents import declare_dead
from scheduler.live.executor import RoundExecutor
from scheduler.live.gateway import AgentGateway
from scheduler.live.journal import JournalFull
from scheduler.live.state import LiveState
from scheduler.core.engine import SchedulingError
from scheduler.events import Event, ProfileMeasured
from scheduler.loop import Outcome, Tick


class AgentCluster:
    """Node agents over ZeroMQ, as scheduler/loop.py's Backend."""

    def __init__(self, state: LiveState, gateway: AgentGateway):
        self.state, self.gateway = state, gateway
        self.executor = RoundExecutor(state, gateway)
        self.stop = threading.Event()  # set: the run is over
        self.alive: Callable[[], bool] = lambda: True  # false: the run is over too
        # the main thread's sockets (set by the service's run, or by a test driving it)
        self.requester: Any = None
        self.subscriber: Any = None
        self.publisher: Any = None
        self._refusals_said = (0, -math.inf)  # (total, wall) when the counts were last logged
        self._reasons: list[str] = []
        self._ticked = 0.0  # perf_counter when the last Tick was handed out

    def tick(self, core: Core) -> Tick | None:
        """Serve until a round is due; None once `stop` is set (or `alive` says no)."""
        while not self.stop.is_set() and self.alive():
            tick = self.poll(wait=0.05)
            if tick is not None:
                return tick
        return None

    def poll(self, wait: float = 0.0) -> Tick | None:
        """One pass of the main thread's duties (telemetry waited for up to `wait` s); a Tick
        when a round is due."""
        state = self.state
        if self.publisher is not None:
            telemetry.publish(state, self.publisher)
        if self.subscriber is not None:
            telemetry.pump(state, self.subscriber, wait=wait)
        wall = state.clock()
        for name in self.gateway.overdue(wall):
            declare_dead(state, name, f"no heartbeat for {state.opt.agent_timeout:g}s")
        self.executor.stop_strays(self.requester)
        self._say_refusals(wall)
        with state.lock:  # a round for what came meanwhile
            due = state.rounds.due(wall, state.now(), state.opt.round_s,
                                   state.opt.round_interval)
            if due and not recovery.pending(state, wall):
                return self.due()
        return None

    def due(self) -> Tick:
        """The round's Tick, now: the clock, what telemetry says each running job did, and
        the events since the last."""
        state = self.state
        with state.lock:
            self._reasons = state.rounds.take_reasons()
            events = state.inbox.take()
            done = {}
            for job in state.core.running_jobs():
                seen = state.measured.progress.get(job.id)
                if seen is not None:
                    done[job.id] = max(seen - (job.record.iterations - job.remaining), 0.0)
            now = state.now()
        self._ticked = time.perf_counter()
        return Tick(now, done, events=events)

    def act(self, core: Core, plan: Plan) -> list[Outcome]:
        """Make the agents run the plan (the time since the Tick was the core's planning)."""
        planning = time.perf_counter() - self._ticked
        outcomes = self.executor.apply(self.requester, plan, self._reasons, planning)
        self.state.metrics.round_done(time.perf_counter() - self._ticked)
        return outcomes

    def round_failed(self, error: Exception) -> bool:
        """Log the failed round with the jobs it touched and go on: the next one is due a
        full round_s later (or at the next event), never at once, so a round that always
        fails is no hot loop. The running jobs stay where they are meanwhile."""
        state = self.state
        with state.lock:
            state.rounds.failures += 1
            state.rounds.last = state.clock()
            state.rounds.wakeup = None  # a stale wake-up in the past would be due at once
            running = [j.id for j in state.core.running_jobs()]
            queued = [j.id for j in state.core.queue if j.status is Status.PENDING]
            state.log.error("round_failed", error=f"{type(error).__name__}: {error}",
                            running=running, queued=queued, failures=state.rounds.failures,
                            exc_info=None if isinstance(error, JournalFull) else error)
        return True

    def refused(self, event: Event, error: SchedulingError) -> None:
        """An event the core refused (nothing changed): counted and logged; a refused
        profile estimate must not seed the next."""
        state = self.state
        with state.lock:
            job_id = getattr(event, "job_id", None)
            if isinstance(event, ProfileMeasured):
                state.measured.profiles.forget(event.job_id)
            state.refusals.refuse(f"{type(event).__name__}:refused_by_core",
                                  getattr(event, "sender", "") or "scheduler", str(error),
                                  job_id=job_id)

    def _say_refusals(self, wall: float, every: float = 30.0) -> None:
        """The refusal counts in the log, when they changed, at most every `every` s."""
        refusals = self.state.refusals
        total, said = refusals.total(), self._refusals_said
        if total != said[0] and wall - said[1] >= every:
            self._refusals_said = (total, wall)
            self.state.log.info("refusals", total=total, refused=refusals.counts())
