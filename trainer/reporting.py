"""What a job tells the planner, and how often: progress with its stage times, in trace seconds.

Why its own piece of `trainer.api.Job`: the planner folds each report into the job's profile,
so what goes in one (a window of measured iterations, or a profile stated up front) and when
one is due are part of the trainer contract, the same for every trainer. A report is an
`event.progress` then an `event.timing` (trainer/telemetry.py); a measured one leaves out a
launch's first iteration (start-up, not the pace) and carries the launch's restart overhead
once it is known.
"""
from __future__ import annotations

from typing import Any, Callable, Protocol

from trainer.stages import TimingWindow

FIRST_REPORT_AFTER = 20  # iterations after which a launch reports at once (short launches count)


class Profile(Protocol):
    """Stage times stated rather than measured, in trace seconds (e.g. an EmulatedSpec)."""

    iteration_time: float

    def stage_map(self) -> dict[str, float]: ...


class Reporter:
    """A job's reports: `due(now)`, then `publish(iterations)` and `schedule(now)`.

    `telemetry` is a trainer.telemetry.Telemetry, or None (nothing is ever due); measured
    wall seconds are multiplied by `time_scale`. A stated `profile` is reported as it is, at
    once and then every `every` seconds; measured times are reported every `every` seconds,
    or as soon as a launch has FIRST_REPORT_AFTER iterations, whichever comes first.
    """

    def __init__(self, telemetry: Any, time_scale: float, every: float, now: float):
        self.telemetry = telemetry
        self.time_scale = float(time_scale)
        self.every = float(every)
        self.window = TimingWindow()
        self.profile: Profile | None = None
        self.restart_overhead: float | None = None  # wall seconds, once measured
        # GB of GPU memory the job holds on each GPU, or None: nothing to say (a torch
        # trainer on CUDA measures its peak; others state the declared figure)
        self.gpu_memory: Callable[[], float | None] = lambda: None
        self._next = now + self.every
        self._reported = False

    def due(self, now: float) -> bool:
        if self.telemetry is None:
            return False
        if now >= self._next:
            return True
        return not self._reported and (
            self.profile is not None or self.window.iterations >= FIRST_REPORT_AFTER)

    def schedule(self, now: float) -> None:
        """The next report is due `every` seconds from `now`."""
        self._next = now + self.every

    def publish(self, iterations: float) -> None:
        """Report `iterations` done with the stage times since the last report (a measured
        job with no measured iteration since then has none, and says nothing)."""
        if self.telemetry is None:
            return
        memory = self.gpu_memory()
        if self.profile is not None:
            self.telemetry.publish(iterations, self.profile.stage_map(),
                                   self.profile.iteration_time, gpu_mem_gb=memory)
        elif self.window.iterations == 0:
            return
        else:
            summary, scale = self.window.summary(), self.time_scale
            overhead = self.restart_overhead
            self.telemetry.publish(
                iterations, {k: v * scale for k, v in summary["stages"].items()},
                summary["iteration_time"] * scale,
                restart_overhead=None if overhead is None else overhead * scale,
                gpu_mem_gb=memory)
        self.window.reset()
        self._reported = True

    def close(self) -> None:
        if self.telemetry is not None:
            self.telemetry.close()
            self.telemetry = None
