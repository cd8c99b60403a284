"""The emulated workload: a job that holds each stage for its profiled time and does nothing else.

It lets the live system replay a trace at a chosen time scale without GPUs or torch: progress
is a pure function of elapsed wall time, so a trainer that is delayed (loaded machine) catches
up instead of drifting, and the measured rate equals the configured one. The model
(`EmulatedSpec`, `EmulatedRun`) is free of I/O and clocks (the caller passes `now`) so it can
be tested exactly; `EmulatedWorkload` runs it as the stages of the trainer's stage loop.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping

STAGE_NAMES = ("data", "gpu", "net")
#: Below this much time left, hold() spins instead of sleeping (sleep overshoots ~0.1 ms).
SPIN_S = 0.0005
#: The longest an emulated stage sleeps between two looks at its trainer (stop, pace, reports).
CHUNK_WALL_S = 0.02
#: The shortest wall time of one emulated iteration of the stage loop: shorter trace
#: iterations are emulated several at a time, so a fast time scale costs no more CPU.
MIN_ITERATION_WALL_S = 0.02


@dataclass(frozen=True)
class EmulatedSpec:
    """One emulated job. Times are trace seconds; `time_scale` is trace seconds per wall second."""

    total: float
    iteration_time: float
    stages: tuple[float, ...]
    time_scale: float = 1.0

    def __post_init__(self) -> None:
        if not self.total > 0:
            raise ValueError(f"total iterations must be > 0, got {self.total}")
        if not self.iteration_time > 0:
            raise ValueError(f"iteration_time must be > 0, got {self.iteration_time}")
        if not self.time_scale > 0:
            raise ValueError(f"time_scale must be > 0, got {self.time_scale}")
        if len(self.stages) != len(STAGE_NAMES) or any(not s >= 0 for s in self.stages):
            raise ValueError(f"stages must be {len(STAGE_NAMES)} non-negative numbers, "
                             f"got {self.stages}")

    @property
    def wall_per_iteration(self) -> float:
        return self.iteration_time / self.time_scale

    def stage_map(self) -> dict[str, float]:
        """The per-stage times a real trainer would measure; in emulation, the configured ones."""
        return {name: float(t) for name, t in zip(STAGE_NAMES, self.stages)}


class EmulatedRun:
    """Progress of one emulated job from `start` iterations, begun at wall time `t0`."""

    def __init__(self, spec: EmulatedSpec, start: float, t0: float):
        self.spec = spec
        self.start = min(max(0.0, float(start)), spec.total)
        self.t0 = t0
        # the end as a time, so "finished" does not hinge on float rounding of a division
        self.t_end = t0 + (spec.total - self.start) * spec.wall_per_iteration

    def finished(self, now: float) -> bool:
        return now >= self.t_end

    def iterations(self, now: float) -> float:
        if self.finished(now):
            return self.spec.total
        done = self.start + max(0.0, now - self.t0) / self.spec.wall_per_iteration
        return min(done, self.spec.total)

    def wall_left(self, now: float) -> float:
        """Wall seconds until the last iteration completes (0 when done)."""
        return max(0.0, self.t_end - now)

    def time_at(self, iterations: float) -> float:
        """The wall time at which `iterations` are done (the end's exactly at the total)."""
        if iterations >= self.spec.total:
            return self.t_end
        return self.t0 + max(0.0, iterations - self.start) * self.spec.wall_per_iteration


class EmulatedWorkload:
    """An emulated job as a workload of the trainer's stage loop: stages that sleep.

    One iteration of the loop covers `span()` trace iterations from where the last one ended
    (one, or as many as last MIN_ITERATION_WALL_S), the last cut at the total. Its io stage
    (load) holds until the data stages' share of it is done, cpu (prepare) takes no time,
    gpu (compute) holds until the gpu stages' share, and net (apply) until its end: the net
    stages and the rest of the group's iteration time (the other members' turns). Each hold
    ends at a point of the run's progress, itself a function of wall time, so a late trainer
    catches up. Between sleeps of at most CHUNK_WALL_S a hold calls `between(position)`,
    which returns True to abandon the iteration (a stop: the position says how far it got).
    """

    device = None  # no device to wait for: the stage loop times it with time.monotonic

    def __init__(self, spec: EmulatedSpec, start: float,
                 between: Callable[[float], bool] = lambda position: False,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep):
        self.run = EmulatedRun(spec, start=start, t0=clock())
        self.between, self.clock, self.sleep = between, clock, sleep
        self._began = self.run.start  # where the current iteration of the loop began

    @property
    def spec(self) -> EmulatedSpec:
        return self.run.spec

    def position(self) -> float:
        """Iterations done now (fractional)."""
        return self.run.iterations(self.clock())

    def repace(self, iteration_time: float) -> None:
        """Go on from where the job is at a new iteration time (regrouped in place)."""
        now = self.clock()
        self.run = EmulatedRun(dataclasses.replace(self.spec, iteration_time=iteration_time),
                               start=self.run.iterations(now), t0=now)

    def span(self) -> float:
        return max(1.0, MIN_ITERATION_WALL_S / self.spec.wall_per_iteration)

    # -- the stages ------------------------------------------------------------------------
    def load(self, step: int) -> int:
        self._hold(self._share(1))
        return step

    def prepare(self, raw: Any) -> Any:
        return raw

    def compute(self, batch: Any) -> float:
        self._hold(self._share(2))
        return 0.0

    def apply(self) -> None:
        end = min(self._began + self.span(), self.spec.total)
        self._hold(1.0)
        self._began = end

    def _share(self, stages: int) -> float:
        """The part of an iteration by the end of its first `stages` stages (at most all)."""
        return min(1.0, sum(self.spec.stages[:stages]) / self.spec.iteration_time)

    def _hold(self, share: float) -> None:
        target = min(self._began + share * self.span(), self.spec.total)
        while True:
            now = self.clock()
            if now >= self.run.time_at(target):
                return
            if self.between(self.run.iterations(now)):
                return
            left = self.run.time_at(target) - self.clock()  # between() may have re-paced
            if left > 0:
                self.sleep(min(CHUNK_WALL_S, left))


# -- the gated stage loop ---------------------------------------------------------------------
# Why: interleaving is only real if each stage actually occupies its resource for its profiled
# time while the gate makes the group take turns. This loop does exactly that, with wall-clock
# holds instead of work, and measures what a real trainer would report.


@dataclass(frozen=True)
class GatedResult:
    """What one gated run measured (seconds, time.monotonic)."""

    iterations: int
    stage_means: dict[str, float]  # mean time holding each stage
    wait_means: dict[str, float]  # mean time waiting for each stage's turn
    iteration_time: float  # mean wall time of one iteration, waits included
    started: float  # monotonic time the first iteration began
    iteration_ends: tuple[float, ...]  # monotonic time each iteration ended


def hold(seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
    """Occupy the caller for `seconds`: sleep most of it, spin the last SPIN_S for accuracy."""
    deadline = clock() + seconds
    while True:
        left = deadline - clock()
        if left <= 0:
            return
        if left > 2 * SPIN_S:
            time.sleep(left - SPIN_S)


def run_gated(stages: Mapping[str, float], iterations: int, gate: Any,
              clock: Callable[[], float] = time.monotonic) -> GatedResult:
    """Run `iterations` emulated iterations, holding each stage (in mapping order, wall seconds)
    under `gate.turn(stage)`; `gate` is a trainer.gate_client GateClient or NullGate."""
    if iterations < 1:
        raise ValueError(f"iterations must be >= 1, got {iterations}")
    if not stages or any(not t >= 0 for t in stages.values()):
        raise ValueError(f"stages must be non-negative wall times, got {dict(stages)}")
    held = {name: 0.0 for name in stages}
    waited = {name: 0.0 for name in stages}
    ends = []
    started = clock()
    for _ in range(iterations):
        for name, seconds in stages.items():
            asked = clock()
            with gate.turn(name):
                granted = clock()
                hold(seconds, clock)
                held[name] += clock() - granted
            waited[name] += granted - asked
        ends.append(clock())
    return GatedResult(
        iterations=iterations,
        stage_means={name: t / iterations for name, t in held.items()},
        wait_means={name: t / iterations for name, t in waited.items()},
        iteration_time=(ends[-1] - started) / iterations,
        started=started,
        iteration_ends=tuple(ends),
    )
