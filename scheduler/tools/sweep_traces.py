"""A sweep's traces: read once by the sweep (so a bad name fails before any run), and the
meaning of a seed.

Seed 0 is the trace as it is. Seed s > 0 is a sample of the same workload: every gap between
successive submissions and every job's iteration count is scaled by its own lognormal factor
(median 1, sigma JITTER), drawn from numpy's default_rng(s). Models, GPU counts and stage
times stay; a job's duration follows its iterations. The same (trace, seed) always gives the
same jobs, on any machine, so a run's row can be recomputed anywhere.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Sequence

import numpy as np

from traces import default_trace_path, read_trace
from traces.record import JobRecord

JITTER = 0.2  # sigma of log(scale) for arrival gaps and iteration counts

SEED_HELP = (f"seed 0 is each trace as it is; seed s > 0 scales every arrival gap and every "
             f"job's iteration count by independent lognormal factors (median 1, sigma "
             f"{JITTER:g}) drawn from numpy default_rng(s)")


def trace_path(value: str) -> Path:
    """A CSV path, or a packaged trace's name: what `interlace-sim --trace` accepts."""
    path = Path(value)
    if path.exists() or path.suffix == ".csv" or "/" in value:
        return path
    return default_trace_path(value)


def load(value: str, spec) -> list[JobRecord]:
    """The trace's jobs, checked against the spec; TraceError lists every problem."""
    return read_trace(trace_path(value), spec=spec)


def perturb(records: Sequence[JobRecord], seed: int) -> list[JobRecord]:
    """The jobs for `seed` (see the module's docstring); seed 0 returns them unchanged."""
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    ordered = sorted(records, key=lambda r: (r.submit_time, r.job_id))
    if seed == 0 or not ordered:
        return list(ordered)
    rng = np.random.default_rng(seed)
    gap_scale = rng.lognormal(0.0, JITTER, size=len(ordered))
    work_scale = rng.lognormal(0.0, JITTER, size=len(ordered))
    out = []
    previous, moved = ordered[0].submit_time, ordered[0].submit_time
    for record, gap_k, work_k in zip(ordered, gap_scale, work_scale):
        moved += (record.submit_time - previous) * float(gap_k)
        previous = record.submit_time
        iterations = max(1, round(record.iterations * float(work_k)))
        out.append(dataclasses.replace(
            record,
            submit_time=round(moved, 3),  # whole ms, as a trace file holds it
            iterations=iterations,
            duration=round(record.duration * iterations / record.iterations, 3),
        ))
    return out
