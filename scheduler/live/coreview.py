"""What the live scheduler's readers see of the core: an immutable view, taken by the loop's
thread after each round.

The core has one writer, the loop; the service thread (status, submissions), the web view
and the metrics scrape run beside it and never touch the core. They read the last `CoreView`
instead: taking one reference is atomic, so no reader holds up a round and no round holds up
a reader. A view is as old as the last round; a job submitted since is not in it yet (status
says `arrived`, as the core would).
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Any, Mapping, NamedTuple, Sequence

from scheduler.core.state import Status
from scheduler.core.waiting import Waiting, why_waiting
from scheduler.live.queue_view import projection
from scheduler.live.tenant_metrics import TenantSnapshot, snapshot as tenant_snapshot


class JobView(NamedTuple):
    """One job as the core had it after the round."""

    id: int
    status: Status
    iterations: float
    remaining: float
    num_gpu: int
    preemptions: int
    model: str
    profile: tuple[float, ...]
    solo_time: float
    gpu_mem_gb: float
    alone: bool
    submit_time: float
    first_start: float | None
    running_since: float | None
    tt: float | None  # its group's iteration time, while the core places it
    tenant: str  # "" without a tenants file


class CoreView(NamedTuple):
    """The core after a round, for readers (see the module's docstring)."""

    now: float  # the core's trace clock at the round
    jobs: Mapping[int, JobView]  # every job of this run, in submission order
    waiting: Mapping[int, Waiting]  # why each pending job waits (core/waiting.py)
    queue: Mapping[int, tuple[int, float | None]]  # pending: position, expected start (wall s)
    offline: frozenset[int]
    tenants: TenantSnapshot | None
    speeds: Any  # the core's TypeSpeeds (replaced, never changed, by a calibration)


def take(core: Any, time_scale: float, node_gpus: Sequence[int]) -> CoreView:
    """The view of `core` now; call it only from the loop's thread. O(jobs log jobs)."""
    layer = core.tenants
    whose = layer.tenant if layer is not None else {}
    placed = core.placed
    jobs = {}
    for job_id, job in core.jobs.items():
        group = placed.get(job_id)
        record = job.record
        jobs[job_id] = JobView(
            job_id, job.status, record.iterations, job.remaining, job.num_gpu,
            job.preemptions, job.model, job.profile, job.solo_time, job.gpu_mem_gb, job.alone,
            record.submit_time, job.first_start, job.running_since,
            group.tt if group is not None else None, whose.get(job_id, ""))
    return CoreView(core.now, MappingProxyType(jobs), MappingProxyType(why_waiting(core)),
                    MappingProxyType(projection(core, time_scale, node_gpus)),
                    frozenset(core.cluster.offline), tenant_snapshot(core), core.speeds)
