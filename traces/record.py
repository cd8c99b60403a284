"""The one in-memory form of a trace job, whatever file format it came from."""

from __future__ import annotations

from dataclasses import dataclass

# Muri's published traces give three per-iteration stage times (resource_time_0..2).
STAGES_3 = ("data", "gpu", "net")
# The live system times the four stages separately.
STAGES_4 = ("io", "cpu", "gpu", "net")


@dataclass(frozen=True, slots=True)
class JobRecord:
    """A trace job in seconds, exactly as the trace states it (no calibration applied).

    Frozen so that the scheduler can share records between states without copying.
    """

    job_id: int
    num_gpu: int
    submit_time: float
    iterations: int
    model_name: str
    batch_size: int
    duration: float
    interval: float
    iteration_time: float
    stage_times: tuple[float, ...]
    priority: int = 0

    @property
    def stage_names(self) -> tuple[str, ...]:
        """Names for stage_times, so callers need not count the tuple themselves."""
        return STAGES_4 if len(self.stage_times) == 4 else STAGES_3
