"""Tiresias 2D-LAS: discrete queues by attained GPU-service, FIFO within a queue."""
from __future__ import annotations

import math
from itertools import chain

from scheduler.core.policies.base import Policy, Replay, RoundContext, greedy, place_units
from scheduler.core.policies.order import fits_monotone
from scheduler.core.state import Job, Plan, Status


class Tiresias(Policy):
    """Jobs start in queue 0 and are demoted when their attained GPU-seconds pass a limit.

    Admission places jobs in queue order (consolidated); a job that does not fit waits while
    smaller ones behind it may run. The paper preset admits by free-GPU count instead, as the
    published artifact does (`admit_by_gpu_count`). After each pass the jobs left waiting
    move to the back of their queue. Starvation promotion is optional.
    """

    name = "tiresias"

    def __init__(self, preset):
        super().__init__(preset)
        self.limits = tuple(preset.tiresias_limits)
        # each queue's limit less the demotion slack, worked out once (the same floats)
        self._thresholds = tuple(limit - preset.tiresias_demotion_slack for limit in self.limits)
        self.queues: list[list[Job]] = [[] for _ in range(len(self.limits) + 1)]
        self.sizes: dict[int, int] = {}  # #GPUs -> how many jobs of that size are queued
        self._replay = Replay()  # last round's placements, reused where this round repeats them

    def on_submit(self, job: Job, now: float) -> None:
        job.queue = 0
        self.queues[0].append(job)
        self.sizes[job.num_gpu] = self.sizes.get(job.num_gpu, 0) + 1

    def on_finish(self, job: Job, now: float) -> None:
        self.queues[job.queue].remove(job)
        left = self.sizes[job.num_gpu] - 1
        if left:
            self.sizes[job.num_gpu] = left
        else:
            del self.sizes[job.num_gpu]

    def on_advance(self, job: Job, now: float) -> None:
        q = job.queue
        thresholds = self._thresholds
        if q >= len(thresholds):
            return
        if job.queue_attained * job.num_gpu >= thresholds[q]:
            self._demote(job, q)
        elif math.ceil(self.limits[q] / job.num_gpu) - job.queue_attained + now <= now:
            # (_demotion_time, inlined: the same arithmetic)
            # Short of the limit by less than the clock resolves: the wakeup is now itself.
            # The next event comes at this same instant, where the artifact's sum
            # (attained + now) - last may round it over the limit; if that event still
            # leaves it short, another would change nothing, forever: it is demoted then.
            if job.policy_data.get("tiresias_short_at") == now:
                self._demote(job, q)
            else:
                job.policy_data["tiresias_short_at"] = now

    def _demote(self, job: Job, q: int) -> None:
        self.queues[q].remove(job)
        job.queue = q + 1
        self.queues[q + 1].append(job)

    def _promote_starved(self, now: float) -> None:
        """Optional: a job that waited long enough relative to its service goes back to
        queue 0 (off in the published artifact)."""
        factor = self.preset.tiresias_promote
        for q, queue in enumerate(self.queues[1:], start=1):
            for job in list(queue):
                if job.status is not Status.PENDING or job.queue_attained <= 0:
                    continue
                waited = job.pending_since_run + (now - (job.pending_mark or now))
                if waited >= int(job.queue_attained * factor):
                    queue.remove(job)
                    job.queue, job.queue_attained, job.pending_since_run = 0, 0.0, 0.0
                    job.pending_mark = now
                    job.promotions += 1
                    self.queues[0].append(job)

    def plan(self, ctx: RoundContext) -> Plan:
        if self.preset.tiresias_promote > 0:
            self._promote_starved(ctx.now)
        if self.preset.admit_by_gpu_count:
            chosen, admitted_at, spots = self._admit_by_count(ctx)
        else:
            chosen, admitted_at, spots = self._admit_placed(ctx)
        self._to_front(spots)
        # largest first, admission order among equal sizes (a stable sort)
        order = sorted(range(len(chosen)), key=[-job.num_gpu for job in chosen].__getitem__)
        chosen = [chosen[i] for i in order]
        if not ctx.previous:  # place_units' replay, without the units
            placements = self._replay.place_all(ctx.cluster, [job.num_gpu for job in chosen])
        else:
            placements = place_units(ctx, [(job.num_gpu, (job,)) for job in chosen])
        if admitted_at is not None and any(s is None for s in placements):
            # largest-first (or staying put) packed worse than admission did: the admission
            # placements fit together, so every admitted job runs, on those GPUs
            placements = [admitted_at[i] for i in order]
        # () only under admit_by_gpu_count: the artifact's job that runs without GPUs
        groups = self._replay.groups(chosen, [s if s is not None else () for s in placements])
        return Plan(tuple(groups), wakeup=self._next_demotion(chosen, ctx.now))

    def _admit_by_count(self, ctx: RoundContext) -> tuple[list[Job], None, list[list[int]]]:
        """The artifact's admission (paper preset): by free-GPU count, whatever the nodes.
        Returns the jobs, no placements, and where each queue's admitted jobs stand in it."""
        free = ctx.cluster.spec.total_gpus
        left = dict(self.sizes)  # Remaining, inlined: this visits every admitted job
        smallest = min(left, default=math.inf)
        chosen: list[Job] = []
        spots: list[list[int]] = []
        for queue in self.queues:
            here: list[int] = []
            spots.append(here)
            for i, job in enumerate(queue):
                if free < smallest:
                    break  # no job left is small enough
                gpus = job.num_gpu
                count = left[gpus] - 1
                if count:
                    left[gpus] = count
                else:
                    del left[gpus]
                    if gpus == smallest:
                        smallest = min(left, default=math.inf)
                if free >= gpus:
                    chosen.append(job)
                    here.append(i)
                    free -= gpus
            else:
                continue
            break
        return chosen, None, spots

    def _admit_placed(self, ctx: RoundContext) -> tuple[list[Job], list[tuple], list[list[int]]]:
        """Admission by placement, in queue order: a job no node can take now waits, and the
        smaller jobs behind it may still fit. Returns the jobs, where each was placed, and
        where each queue's admitted jobs stand in it.

        Requests that cannot fit are skipped without searching the nodes (see
        base.greedy), and the walk ends when no job left could fit."""
        cluster = ctx.cluster
        cluster.reset()
        chosen, where, positions = greedy(cluster, chain.from_iterable(self.queues), self.sizes,
                                          fits_monotone(ctx.preset))
        # positions count over the queues end to end: turn them into (queue, place in it)
        spots: list[list[int]] = [[] for _ in self.queues]
        queue, start = 0, 0
        for position in positions:
            while position >= start + len(self.queues[queue]):
                start += len(self.queues[queue])
                queue += 1
            spots[queue].append(position - start)
        return chosen, where, spots

    def _to_front(self, spots: list[list[int]]) -> None:
        """The admitted jobs go to the front of their queues, in order; those left waiting
        keep their order behind them."""
        for queue, here in zip(self.queues, spots):
            if here and here[-1] != len(here) - 1:  # not already the front
                front = [queue[i] for i in here]
                for i in reversed(here):
                    del queue[i]
                queue[:0] = front

    def _demotion_time(self, job: Job, q: int, now: float) -> float:
        """When a job running from now on reaches queue q's limit (the artifact's arithmetic:
        whole seconds per GPU share, minus the service attained in this queue)."""
        return math.ceil(self.limits[q] / job.num_gpu) - job.queue_attained + now

    def _next_demotion(self, chosen: list[Job], now: float) -> float | None:
        limits, ceil = self.limits, math.ceil
        last = len(limits)
        # _demotion_time of each, inlined (the same arithmetic, in the same order)
        times = [ceil(limits[j.queue] / j.num_gpu) - j.queue_attained + now
                 for j in chosen if j.queue < last]
        return max(min(times), now) if times else None  # never a wakeup in the past
