"""Largest-first: each round, serve the jobs wanting the most GPUs first (earliest submitted
first among equals), each on GPUs of its own; smaller jobs fill what is left.

Why a cluster might want it: a big job waiting behind a stream of small ones may never find
its GPUs free at once; serving big jobs first bounds that wait, at the cost of the small
jobs' JCT. A plain rule, written the way any policy is (see docs/policies.md of Interlace).
"""
from __future__ import annotations

import bisect
from typing import Sequence

from scheduler.core.policies import Policy, RoundContext
from scheduler.core.policies.base import place_in_order
from scheduler.core.state import JobView, Plan


def priority(job: JobView) -> tuple[int, float, int]:
    """Smaller is served first: most GPUs, then earliest submitted, then lowest id."""
    return (-job.num_gpu, job.submit_time, job.id)


class LargestFirst(Policy):
    """Keeps its runnable jobs sorted by `priority` through the core's hooks (a job's GPU
    count and submit time never change, so nothing needs re-sorting), and places them in
    that order on an emptied cluster each round: preemptive, as a newcomer may outrank a
    running job. Under tenants it plans only the jobs the round admits."""

    name = "largest-first"
    plans_partial = True  # plan() names only ctx.queue's jobs, also when some are held back

    def __init__(self, model):
        super().__init__(model)
        self._jobs: list[JobView] = []  # the runnable jobs, in priority order

    def on_submit(self, job: JobView, now: float) -> None:
        bisect.insort(self._jobs, job, key=priority)

    def on_finish(self, job: JobView, now: float) -> None:
        self._jobs.remove(job)

    def queue_order(self, pending: Sequence[JobView]) -> list[JobView]:
        return sorted(pending, key=priority)  # as a tenant's jobs are offered to admission

    def plan(self, ctx: RoundContext) -> Plan:
        jobs = self._jobs
        if ctx.partial:  # a tenant layer holds some back this round: only the queue's
            admitted = {job.id for job in ctx.queue}
            jobs = [job for job in jobs if job.id in admitted]
        return Plan(tuple(place_in_order(ctx, jobs)))
