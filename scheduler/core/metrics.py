"""Run metrics: JCT statistics, makespan, queueing delay, GPU utilisation, preemptions.

The 99th percentile is `sorted(jct)[int(0.99 * n)]`, the convention of the published numbers.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Sequence

from scheduler.core.state import Job


@dataclass(frozen=True, slots=True)
class JobOutcome:
    job_id: int
    num_gpu: int
    model: str
    submit: float
    start: float | None
    end: float | None
    preemptions: int
    starts: int
    # what the run was made of, where the core knows it (a report from a log does not):
    # wall seconds holding GPUs (restart overheads included), seconds the job needs alone,
    # and seconds of restart overhead charged ((re)starts times its restart overhead)
    running: float | None = None
    alone: float | None = None
    overhead: float | None = None
    # the GPU types it ran on, in the order first used ("|" between; "": none stated)
    gpu_type: str = ""

    @property
    def jct(self) -> float:
        return self.end - self.submit

    @property
    def queueing(self) -> float:
        return self.start - self.submit

    @classmethod
    def of(cls, job: Job, gpu_type: str = "") -> "JobOutcome":
        return cls(job.id, job.num_gpu, job.model, job.submit_time, job.first_start,
                   job.finish_time, job.preemptions, job.starts, job.attained,
                   job.record.iterations * job.solo_time,
                   (job.starts + job.relaunches) * job.restart_overhead, gpu_type)


@dataclass(frozen=True, slots=True)
class Summary:
    jobs: int
    avg_jct: float
    p50_jct: float
    p99_jct: float
    makespan: float
    avg_queueing: float
    gpu_utilisation: float  # time-weighted busy fraction of all GPUs over the makespan
    preemptions: int


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


def summarize(outcomes: Sequence[JobOutcome], utilisation: Sequence[tuple[float, int]],
              total_gpus: int) -> Summary:
    done = [o for o in outcomes if o.end is not None]
    if not done:
        return Summary(0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0)
    jct = [o.jct for o in done]
    makespan = max(o.end for o in done)
    start = min(o.submit for o in done)
    busy = 0.0
    for (t0, gpus), (t1, _) in zip(utilisation, list(utilisation[1:]) + [(makespan, 0)]):
        busy += gpus * max(min(t1, makespan) - t0, 0.0)
    span = makespan - start
    return Summary(
        jobs=len(done),
        avg_jct=sum(jct) / len(jct),
        p50_jct=percentile(jct, 0.5),
        p99_jct=percentile(jct, 0.99),
        makespan=makespan,
        avg_queueing=sum(o.queueing for o in done if o.start is not None) / len(done),
        gpu_utilisation=busy / (span * total_gpus) if span > 0 else 0.0,
        preemptions=sum(o.preemptions for o in done),
    )


def summary_dict(policy: str, summary: Summary, wall_s: float, **extra) -> dict:
    return {"policy": policy, **asdict(summary), "wall_s": wall_s, **extra}


def dumps(record: dict) -> str:
    """Strict JSON: a NaN or infinity raises here rather than printing `NaN`, which no JSON
    parser reads (the inputs are bounded so that none reaches this)."""
    return json.dumps(record, sort_keys=False, allow_nan=False)
