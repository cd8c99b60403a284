"""The one in-memory form of a trace job, whatever file format it came from."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

# The names a job may carry beyond Muri's schema: whom it runs for, and its class.
NAMES = ("tenant", "priority_class")

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
    # a user's own program (`interlace-submit -- python train.py`): its argv and the
    # directory it runs in; empty for the packaged workloads
    command: tuple[str, ...] = ()
    workdir: str = ""
    # GPU memory the job needs on each of its GPUs (GB); 0: not stated. Co-located jobs
    # hold theirs at once, so a group forms only where the sum fits (docs/concepts.md).
    gpu_mem_gb: float = 0.0
    # GPU types the job may run on (any one of them; all its GPUs of one type); (): any
    gpu_types: tuple[str, ...] = ()
    # the tenant (team) the job runs for; "": none named (a tenants file's default, if any)
    tenant: str = ""
    # its priority class in the tenants file; "": none named (the file's default_class)
    priority_class: str = ""
    # relaunches after failures of its own program in a row, before it is failed (live
    # scheduler); None: the scheduler's bound (--max-failures). Never in a trace file.
    max_restarts: int | None = None
    # a command run in a directory of its own on its node (RUN/jobs/job-<id>), not `workdir`
    own_workdir: bool = False
    # where a command writes its progress (a path in its working directory, or absolute);
    # "": the agent's default file (INTERLACE_PROGRESS_FILE)
    progress_file: str = ""

    @property
    def stage_names(self) -> tuple[str, ...]:
        """Names for stage_times, so callers need not count the tuple themselves."""
        return STAGES_4 if len(self.stage_times) == 4 else STAGES_3


# The wire and journal form lives with the record: the feeder, the scheduler's request
# handlers and its journal all speak it, and none of them should import another for it.
def record_to_map(record: JobRecord) -> dict[str, Any]:
    """The wire and journal form of a record (a plain map; stage_times as a list)."""
    out = dataclasses.asdict(record)
    out["stage_times"] = list(record.stage_times)
    if record.command:
        out["command"] = list(record.command)
    else:  # a packaged job's map stays as it always was (traces, journals, older peers)
        del out["command"], out["workdir"]
    if not record.gpu_mem_gb:
        del out["gpu_mem_gb"]
    if record.gpu_types:
        out["gpu_types"] = list(record.gpu_types)
    else:
        del out["gpu_types"]
    for name in NAMES:
        if not out[name]:
            del out[name]
    if record.max_restarts is None:
        del out["max_restarts"]
    if not record.own_workdir:
        del out["own_workdir"]
    if not record.progress_file:
        del out["progress_file"]
    return out


def record_from_map(data: Mapping[str, Any]) -> JobRecord:
    """JobRecord from its map form; TypeError/ValueError when fields are missing or extra."""
    if not isinstance(data, Mapping):
        raise TypeError(f"a job must be a map, got {type(data).__name__}")
    fields = dict(data)
    stages = fields.get("stage_times")
    if isinstance(stages, (list, tuple)):
        fields["stage_times"] = tuple(stages)
    command = fields.get("command")
    if isinstance(command, (list, tuple)):
        fields["command"] = tuple(command)
    types = fields.get("gpu_types")
    if isinstance(types, (list, tuple)):
        fields["gpu_types"] = tuple(types)
    return JobRecord(**fields)
