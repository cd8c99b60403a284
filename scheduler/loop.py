"""The one driver loop: the backend says what happened, the core plans, the backend acts.

Each turn: the backend hands a `Tick` (the time, the events since the last turn, and the
iterations each running job did); the loop gives the events to the core, advances it and asks
for a round; the plan comes with its changes against what runs (`Plan.changes`), and the
backend acts on them (stops, regroups in place, launches) and reports what did not go as
planned (`Outcome`s), which the loop gives back to the core before the next round.

Two backends implement `Backend`: the simulated cluster (scheduler/sim/cluster.py: virtual
time) and the agent cluster (scheduler/live/cluster.py: node agents over ZeroMQ). The loop
has no clock, socket or file; whatever needs one is the backend's.
"""
from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from types import MappingProxyType
from typing import Callable, Iterable, Mapping, NamedTuple, Protocol, Sequence

from scheduler.core.engine import Core
from scheduler.core.state import Plan
from traces.record import JobRecord


class Tick(NamedTuple):
    """A turn of the loop: it is `now`; since the last turn these jobs `finished`, these
    `arrived` (record, submit time), these nodes were `lost` or came `back`, and each running
    job did `done[job id]` iterations. `ended`: when a finished job ended, where that was
    before `now` (a cluster that plans only on a period sees ends between its rounds)."""

    now: float
    done: dict[int, float]
    finished: Sequence[int] = ()
    arrived: Sequence[tuple[JobRecord, float]] = ()
    lost: Sequence[int] = ()
    back: Sequence[int] = ()
    ended: Mapping[int, float] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class LaunchFailed:
    """A job the plan started did not start: it waits again for a round."""

    job_id: int
    reason: str = ""


@dataclass(frozen=True, slots=True)
class StopTook:
    """A job's stop took `seconds` (its trainer checkpointing) before its GPUs were free:
    what a later restart of it costs counts that too."""

    job_id: int
    seconds: float


Outcome = LaunchFailed | StopTook


class Backend(Protocol):
    """What the loop needs of a cluster, simulated or real."""

    def lock(self) -> AbstractContextManager:
        """Held while the loop changes the core (the live backend shares the core with its
        request handlers)."""

    def tick(self, core: Core) -> Tick | None:
        """Wait for the next round to be due; None: the run is over."""

    def act(self, core: Core, plan: Plan) -> Iterable[Outcome]:
        """Make the cluster run `plan` (its changes); what did not go as planned."""

    def round_failed(self, error: Exception) -> bool:
        """A turn raised: True to go on with the next, False to end the run with it."""


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
        now, done, finished, arrived, lost, back, ended = tick
        with backend.lock():
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
            with backend.lock():
                for outcome in outcomes:
                    self._settle(outcome, now)
        if self.on_round is not None:
            self.on_round(now, plan, core)
        return plan

    def _node_lost(self, node: int, now: float) -> None:
        """A node's agent is gone: it takes no work, and what ran there waits again."""
        core = self.core
        core.set_node_online(node, False)
        for job_id, group in list(core.placed.items()):
            if any(piece.node == node for piece in group.placement):
                core.stop(job_id, now)

    def _settle(self, outcome: Outcome, now: float) -> None:
        core = self.core
        if isinstance(outcome, LaunchFailed):
            core.stop(outcome.job_id, now)
        elif isinstance(outcome, StopTook):
            core.note_stop_time(outcome.job_id, outcome.seconds)
        else:  # pragma: no cover (a backend's bug)
            raise TypeError(f"unknown outcome {outcome!r}")
