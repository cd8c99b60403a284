"""Where each waiting job stands: its place in the queue and a projected start, for users.

Why its own module: it is a read-only estimate for `status.query` (and the commands and views
built on it), computed per query in O(jobs log jobs) and never on the round's path.

Position: the job's place among the pending jobs in the policy's order (`pending_order`).
1 is next.

Expected start, in wall seconds from now (None when it cannot be projected). Assumes:
* each running group frees its GPUs when its slowest member finishes: remaining iterations
  x the group's iteration time (measured where profiled, else the trace's estimate);
* waiting jobs start strictly in position order, each once enough GPUs are free (no
  backfill, no interleaving with a running group, no preemption, no future arrivals), and
  then run alone for remaining iterations x their solo iteration time;
* the GPUs of the nodes whose agents are online, each node its own pool's count; a job
  larger than those never starts (None).
It ignores placement (a job may need its GPUs on fewer nodes, or in one pool, or of the
types it asked for), so it can be optimistic.
"""
from __future__ import annotations

import heapq
from typing import Any, Sequence

from scheduler.core.state import Status


def pending_order(core: Any) -> list[Any]:
    """The pending jobs in the policy's order (`Policy.queue_order`), ties in submission
    order. Read-only: the policy's state is not touched."""
    return core.policy.queue_order([j for j in core.queue if j.status is Status.PENDING])


def projection(core: Any, time_scale: float, node_gpus: Sequence[int] | None = None
               ) -> dict[int, tuple[int, float | None]]:
    """job id -> (position, expected start in wall seconds from now or None), pending only.
    `node_gpus`: each node's GPUs (the spec's `node_gpus()`, which is built when not given)."""
    if node_gpus is None:
        node_gpus = core.spec.node_gpus()
    capacity = core.spec.total_gpus - sum(node_gpus[n] for n in core.cluster.offline)
    releases: list[tuple[float, int]] = []  # (trace seconds from now, GPUs freed)
    busy = 0
    for group in core.plan_now.groups:
        members = [core.jobs[j] for j in group.jobs if j in core.jobs]
        live = [j for j in members if j.status is Status.RUNNING]
        if not live:
            continue
        busy += group.num_gpu
        end = max(j.remaining * (group.tt or j.solo_time) for j in live)
        releases.append((end, group.num_gpu))
    heapq.heapify(releases)
    free, clock = capacity - busy, 0.0
    out: dict[int, tuple[int, float | None]] = {}
    blocked = False
    for position, job in enumerate(pending_order(core), start=1):
        if blocked or job.num_gpu > capacity:
            blocked = True  # in-order starts: nothing after a job that never starts starts
            out[job.id] = (position, None)
            continue
        while free < job.num_gpu and releases:
            at, gpus = heapq.heappop(releases)
            clock, free = max(clock, at), free + gpus
        free -= job.num_gpu
        heapq.heappush(releases, (clock + job.remaining * job.solo_time, job.num_gpu))
        out[job.id] = (position, clock / time_scale)
    return out
