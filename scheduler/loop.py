"""The one driver loop: the backend says what happened, the core plans, the backend acts.

Each turn: the backend hands a `Tick` (the time, the events since the last turn, and the
iterations each running job did); the loop gives the events to the core, advances it and asks
for a round; the plan comes with its changes against what runs (`Plan.changes`), and the
backend acts on them (stops, regroups in place, launches) and reports what did not go as
planned (`Outcome`s), which the loop gives back to the core before the next round.

The loop is the core's only writer: every change reaches the core as an event
(scheduler/events.py) the loop applies here, so a backend never shares the core with
another thread and nothing waits on a lock around it. What other threads read is the
snapshot a backend takes after each round (`on_round`).

Two backends implement `Backend`: the simulated cluster (scheduler/sim/cluster.py: virtual
time) and the agent cluster (scheduler/live/cluster.py: node agents over ZeroMQ). The loop
has no clock, socket or file; whatever needs one is the backend's.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Callable, Iterable, Mapping, NamedTuple, Protocol, Sequence

from scheduler.core.engine import Core, SchedulingError
from scheduler.core.state import Plan
from scheduler.events import (Checkpointed, Event, Finished, LaunchFailed, MemoryMeasured,
                              NodeOnline, OverheadMeasured, ProfileMeasured, Requeued,
                              RunFailed, RunsAlone, SlowdownMeasured, SpeedMeasured, StopTook,
                              Submitted)
from traces.record import JobRecord


class Tick(NamedTuple):
    """A turn of the loop: it is `now`; since the last turn these jobs `finished`, these
    `arrived` (record, submit time), these nodes were `lost` or came `back`, and each running
    job did `done[job id]` iterations. `ended`: when a finished job ended, where that was
    before `now` (a cluster that plans only on a period sees ends between its rounds).
    `events`: what else happened, in order (scheduler/events.py), applied before the rest."""

    now: float
    done: dict[int, float]
    finished: Sequence[int] = ()
    arrived: Sequence[tuple[JobRecord, float]] = ()
    lost: Sequence[int] = ()
    back: Sequence[int] = ()
    ended: Mapping[int, float] = MappingProxyType({})
    events: Sequence[Event] = ()


Outcome = LaunchFailed | StopTook


class Backend(Protocol):
    """What the loop needs of a cluster, simulated or real."""

    def tick(self, core: Core) -> Tick | None:
        """Wait for the next round to be due; None: the run is over."""

    def act(self, core: Core, plan: Plan) -> Iterable[Outcome]:
        """Make the cluster run `plan` (its changes); what did not go as planned."""

    def round_failed(self, error: Exception) -> bool:
        """A turn raised: True to go on with the next, False to end the run with it."""

    def refused(self, event: Event, error: SchedulingError) -> None:
        """The core refused an event (nothing changed): the backend says so where it must."""


class Loop:
    """Runs a core against a backend until the backend says the run is over."""

    def __init__(self, core: Core, backend: Backend,
                 on_round: Callable[[float, Plan, Core], None] | None = None):
        self.core, self.backend = core, backend
        self.on_round = on_round  # sees every round's plan and the core after it; never writes
        self.rounds = 0

    def run(self) -> None:
        backend = self.backend
        while True:
            tick = backend.tick(self.core)
            if tick is None:
                return
            self.turn(tick)

    def turn(self, tick: Tick) -> Plan | None:
        """`step`, with a failure the backend's to judge: it goes on (the live scheduler
        logs the round and carries on) or it ends the run (the simulator raises)."""
        try:
            return self.step(tick)
        except Exception as error:
            if not self.backend.round_failed(error):
                raise
            return None

    def step(self, tick: Tick) -> Plan:
        """One turn: events in, advance, round, act, outcomes in."""
        core, backend = self.core, self.backend
        now, done, finished, arrived, lost, back, ended, events = tick
        if events:
            self.apply(events)
        for job_id in finished:
            core.finish(job_id, ended.get(job_id, now))
        for record, at in arrived:
            core.submit(record, at)
        core.advance(now, done)
        if lost or back:
            for node in lost:
                self._node_lost(node, now)
            for node in back:
                core.set_node_online(node, True)
        plan = core.round(now)
        self.rounds += 1
        outcomes = backend.act(core, plan)
        if outcomes:
            self.apply(outcomes, now)
        if self.on_round is not None:
            self.on_round(now, plan, core)
        return plan

    def apply(self, events: Iterable[Event], now: float | None = None) -> None:
        """Each event into the core, in order; one the core refuses changes nothing and goes
        back to the backend (`refused`). `now`: when outcomes of the round at `now` happened
        (a failed launch waits again from then)."""
        for event in events:
            try:
                self._apply(event, self.core.now if now is None else now)
            except SchedulingError as error:
                self.backend.refused(event, error)

    def _apply(self, event: Event, now: float) -> None:
        core = self.core
        kind = type(event)
        if kind is Submitted:
            core.submit(event.record, max(event.at, core.now))
        elif kind is Finished:
            core.finish(event.job_id, event.at)
        elif kind is Requeued:
            core.stop(event.job_id, event.at)
            if event.alone:
                core.run_alone(event.job_id)
            core.set_remaining(event.job_id, event.remaining)
        elif kind is RunFailed:
            core.stop(event.job_id, event.at, preempted=False)
            core.set_remaining(event.job_id, event.remaining)
            core.hold(event.job_id, event.not_before)
        elif kind is Checkpointed:
            core.set_remaining(event.job_id, event.remaining)
        elif kind is RunsAlone:
            core.run_alone(event.job_id)
        elif kind is NodeOnline:
            core.set_node_online(event.node, event.online)
        elif kind is ProfileMeasured:
            core.update_profile(event.job_id, event.profile, solo_time=sum(event.profile))
        elif kind is MemoryMeasured:
            core.note_gpu_memory(event.job_id, event.gb)
        elif kind is OverheadMeasured:
            core.set_restart_overhead(event.job_id, event.seconds)
        elif kind is SpeedMeasured:
            core.calibrate_speed(event.model, event.gpu_type, event.speed)
        elif kind is SlowdownMeasured:
            core.calibrate_slowdown(event.members, event.factor)
        elif kind is LaunchFailed:
            core.stop(event.job_id, now)
        elif kind is StopTook:
            core.note_stop_time(event.job_id, event.seconds)
        else:  # pragma: no cover (a backend's bug)
            raise TypeError(f"unknown event {event!r}")

    def _node_lost(self, node: int, now: float) -> None:
        """A node's agent is gone: it takes no work, and what ran there waits again."""
        core = self.core
        core.set_node_online(node, False)
        for job_id, group in list(core.placed.items()):
            if any(piece.node == node for piece in group.placement):
                core.stop(job_id, now)
