"""Seeded synthetic traces shaped like Microsoft's Philly cluster, for runs without real data.

Philly's published statistics: most jobs use 1 or 8 GPUs, a few use 16-32; run times are
heavy-tailed from minutes to days. Arrivals are Poisson. Per-iteration stage times come from
the MODELS catalogue with a few percent of noise, so interleaving has realistic material.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

import numpy as np

from specs.limits import MAX_TRACE_SECONDS
from specs.tenants import Tenancy
from traces.models import MODELS
from traces.record import JobRecord

GPU_MIX: Mapping[int, float] = {1: 0.40, 2: 0.05, 4: 0.15, 8: 0.30, 16: 0.05, 32: 0.05}
# all-reduce time relative to the catalogue's 8-GPU value (more peers, longer ring)
NET_SCALE: Mapping[int, float] = {1: 0.0, 2: 0.6, 4: 0.8, 8: 1.0, 16: 1.5, 32: 2.0}
STAGE_NOISE = 0.05  # sigma of the multiplicative lognormal noise on each stage time


def generate(
    n_jobs: int,
    seed: int,
    *,
    arrival: str = "poisson",
    mean_interarrival: float = 1800.0,
    max_gpus: int = 32,
    backlog: bool = False,
    median_duration: float = 3600.0,
    duration_sigma: float = 1.8,
    min_duration: float = 60.0,
    max_duration: float = 5 * 86400.0,
) -> list[JobRecord]:
    """`n_jobs` jobs, identical for identical arguments, ids 0.. in submit order.

    arrival: "poisson" (exponential gaps) or "uniform" (evenly spaced), both with mean
    `mean_interarrival` seconds; backlog=True submits everything at 0. Durations are
    lognormal around `median_duration`, clipped to [min_duration, max_duration]. Job GPU
    counts follow GPU_MIX restricted to counts <= max_gpus. Times are rounded to what the
    CSV shows (whole ms; 0.1 ms for stages) so a written trace reads back identically.
    """
    if n_jobs < 0:
        raise ValueError(f"n_jobs must be >= 0, got {n_jobs}")
    if max_gpus < 1:
        raise ValueError(f"max_gpus must be >= 1, got {max_gpus}")
    if arrival not in ("poisson", "uniform"):
        raise ValueError(f"arrival must be 'poisson' or 'uniform', got {arrival!r}")
    if not mean_interarrival >= 0:
        raise ValueError(f"mean_interarrival must be >= 0, got {mean_interarrival}")
    if not 0 < min_duration <= max_duration or median_duration <= 0 or duration_sigma < 0:
        raise ValueError("need 0 < min_duration <= max_duration, median_duration > 0, sigma >= 0")

    rng = np.random.default_rng(seed)
    sizes = [g for g in GPU_MIX if g <= max_gpus]
    weights = np.array([GPU_MIX[g] for g in sizes])
    models = list(MODELS.values())

    num_gpus = rng.choice(sizes, size=n_jobs, p=weights / weights.sum())
    model_index = rng.integers(len(models), size=n_jobs)
    durations = np.clip(
        rng.lognormal(np.log(median_duration), duration_sigma, size=n_jobs),
        min_duration,
        max_duration,
    )
    noise = rng.lognormal(0.0, STAGE_NOISE, size=(n_jobs, 3))
    priorities = rng.integers(2, size=n_jobs)
    if arrival == "poisson":
        gaps = rng.exponential(mean_interarrival, size=n_jobs)
    else:
        gaps = np.full(n_jobs, float(mean_interarrival))
    gaps[:1] = 0.0  # the trace starts with its first job
    submit_ms = np.zeros(n_jobs, dtype=np.int64) if backlog else np.rint(np.cumsum(gaps) * 1000)

    jobs: list[JobRecord] = []
    previous_ms = 0
    for i in range(n_jobs):
        gpus = int(num_gpus[i])
        profile = models[int(model_index[i])]
        scale = [float(noise[i, 0]), float(noise[i, 1]), float(noise[i, 2]) * NET_SCALE[gpus]]
        # round(seconds, 4) is the float nearest the 0.1 ms value, so the CSV shows e.g. 781.9
        stages = tuple(round(t * f, 4) for t, f in zip(profile.stage_times, scale))
        # keep the catalogue's ratio of measured iteration time to summed stages
        ratio = profile.iteration_time / sum(profile.stage_times)
        iteration_ms = max(1, round(sum(stages) * 1000 * ratio))
        iterations = max(1, min(round(float(durations[i]) * 1000 / iteration_ms),
                                int(MAX_TRACE_SECONDS * 1000) // iteration_ms))  # a readable trace
        this_ms = int(submit_ms[i])
        jobs.append(
            JobRecord(
                job_id=i,
                num_gpu=gpus,
                submit_time=this_ms / 1000,
                iterations=iterations,
                model_name=profile.name,
                batch_size=profile.batch_size,
                duration=iterations * iteration_ms / 1000,
                interval=(this_ms - previous_ms) / 1000,
                iteration_time=iteration_ms / 1000,
                stage_times=stages,
                priority=int(priorities[i]),
            )
        )
        previous_ms = this_ms
    return jobs


def spread_over(records: list[JobRecord], tenancy: Tenancy, seed: int) -> list[JobRecord]:
    """`records`, each given a tenant of `tenancy` that may hold it (quota + borrow_limit at
    least its GPUs), drawn in proportion to that sum; ValueError naming a job none may."""
    rng = np.random.default_rng([seed, 1])  # a stream apart from the jobs' own
    tenants = sorted(tenancy.tenants.values(), key=lambda t: t.name)
    most = np.array([t.quota + t.borrow_limit for t in tenants], dtype=float)
    out = []
    for record in records:
        weights = np.where(most >= record.num_gpu, most, 0.0)
        if not weights.sum():
            raise ValueError(f"job {record.job_id} needs {record.num_gpu} GPUs; no tenant "
                             f"may hold more than {int(most.max())}")
        pick = tenants[int(rng.choice(len(tenants), p=weights / weights.sum()))]
        out.append(dataclasses.replace(record, tenant=pick.name))
    return out
