"""Tiresias 2D-LAS: discrete queues by attained GPU-service, FIFO within a queue."""
from __future__ import annotations

import math
from itertools import chain
from typing import Sequence

from scheduler.core.policies.admission import AdmissionWalk
from scheduler.core.policies.base import (ArtifactLoop, Policy, Replay, RoundContext, greedy,
                                          place_units)
from scheduler.core.policies.order import fits_monotone
from scheduler.core.policies.settings import TiresiasSettings
from scheduler.core.state import JobView, Plan, Status


class Tiresias(Policy):
    """Jobs start in queue 0 and are demoted when their attained GPU-seconds pass a limit.

    Admission places jobs in queue order (consolidated); a job that does not fit waits while
    smaller ones behind it may run. The simulator's artifact mode admits by free-GPU count
    instead, as the published artifact does (`admit_by_gpu_count`). After each pass the jobs
    left waiting move to the back of their queue. Starvation promotion is optional.

    Its state is its own, by job id (jobs are read-only to it): each job's queue, and the
    accounts of a job promoted back to queue 0, whose service and wait count from then on
    (a job never promoted counts the core's: its attained service, its wait since first run).
    """

    name = "tiresias"
    plans_partial = True  # a partial queue: only its queues' jobs that ctx.queue has (_visible)
    artifact_loop = ArtifactLoop(exact_events=True)  # exact event times, exact ends

    def __init__(self, model, settings: TiresiasSettings = TiresiasSettings()):
        super().__init__(model)
        self.limits = tuple(settings.limits)
        self.promote = settings.promote
        self.admit_by_gpu_count = settings.admit_by_gpu_count
        self.runs_unplaced = settings.admit_by_gpu_count
        # each queue's limit less the demotion slack, worked out once (the same floats)
        self._thresholds = tuple(limit - settings.demotion_slack for limit in self.limits)
        self._bottom = len(self.limits)  # the last queue's index
        self.queues: list[list[JobView]] = [[] for _ in range(len(self.limits) + 1)]
        self.queue_of: dict[int, int] = {}  # job id -> the index of its queue
        self._promoted: dict[int, _Promoted] = {}  # job id -> its accounts since promotion
        self.promotions: dict[int, int] = {}  # job id -> how often it was promoted (kept)
        self._running_sum = model.running_sum  # how the core sums service (its model's)
        # job id -> when it was last found short of its limit by less than the clock resolves
        self._short_at: dict[int, float] = {}
        self.sizes: dict[int, int] = {}  # #GPUs -> how many jobs of that size are queued
        self._replay = Replay()  # last round's placements, reused where this round repeats them

    def on_submit(self, job: JobView, now: float) -> None:
        self.queue_of[job.id] = 0
        self.queues[0].append(job)
        self.sizes[job.num_gpu] = self.sizes.get(job.num_gpu, 0) + 1

    def on_finish(self, job: JobView, now: float) -> None:
        self.queues[self.queue_of.pop(job.id)].remove(job)
        self._promoted.pop(job.id, None)
        self._short_at.pop(job.id, None)
        left = self.sizes[job.num_gpu] - 1
        if left:
            self.sizes[job.num_gpu] = left
        else:
            del self.sizes[job.num_gpu]

    def served(self, job: JobView) -> float:
        """Wall seconds the job ran in its queue: since its last promotion, if any."""
        promoted = self._promoted.get(job.id)
        return job.attained if promoted is None else promoted.served

    def on_changes(self, jobs: Sequence[JobView]) -> None:
        """Time moved on for the running `jobs` (the core's one call per advance, each job
        brought up to date to now, its `last_update`): a job past its queue's limit is
        demoted. Taken in bulk: this runs for every running job at every event."""
        queue_of, bottom, promoted = self.queue_of, self._bottom, self._promoted
        thresholds, limits, ceil = self._thresholds, self.limits, math.ceil
        for job in jobs:
            served = job.attained  # served(job), inlined
            if promoted:  # a promoted job's service is summed in every queue
                accounts = promoted.get(job.id)
                if accounts is not None:
                    served = accounts.advance(job.last_update, self._running_sum)
            q = queue_of[job.id]
            if q >= bottom:  # the last queue: no limit
                continue
            if served * job.num_gpu >= thresholds[q]:
                self._demote(job, q)
                continue
            now = job.last_update
            if ceil(limits[q] / job.num_gpu) - served + now <= now:
                # (_demotion_time, inlined: the same arithmetic)
                # Short of the limit by less than the clock resolves: the wakeup is now
                # itself. The next event comes at this same instant, where the artifact's
                # sum (attained + now) - last may round it over the limit; if that event
                # still leaves it short, another would change nothing, forever: it is
                # demoted then.
                if self._short_at.get(job.id) == now:
                    self._demote(job, q)
                else:
                    self._short_at[job.id] = now

    def _demote(self, job: JobView, q: int) -> None:
        self.queues[q].remove(job)
        self.queue_of[job.id] = q + 1
        self.queues[q + 1].append(job)

    def _waited(self, job: JobView, now: float) -> float:
        """Seconds the job waited after its first run (since its last promotion, if any)."""
        promoted = self._promoted.get(job.id)
        if promoted is None:
            return job.pending_since_run + (now - (job.pending_mark or now))
        return promoted.waited_until(job, now)

    def _promote_starved(self, now: float) -> None:
        """Optional: a job that waited long enough relative to its service goes back to
        queue 0 (off in the published artifact)."""
        factor = self.promote
        for queue in self.queues[1:]:
            for job in list(queue):
                if job.status is not Status.PENDING:
                    continue
                served = self.served(job)
                if served <= 0:
                    continue
                if self._waited(job, now) >= int(served * factor):
                    queue.remove(job)
                    self._promoted[job.id] = _Promoted(now)
                    self.queue_of[job.id] = 0
                    self.promotions[job.id] = self.promotions.get(job.id, 0) + 1
                    self.queues[0].append(job)

    def plan(self, ctx: RoundContext) -> Plan:
        if self.promote > 0:
            self._promote_starved(ctx.now)
        queues, sizes, at = self._visible(ctx)
        if self.admit_by_gpu_count:
            chosen, admitted_at, spots = self._admit_by_count(ctx, queues, sizes)
        else:
            chosen, admitted_at, spots = self._admit_placed(ctx, queues, sizes)
        if at is not None:  # positions among the queue's jobs: in the whole queues
            spots = [[where[i] for i in here] for where, here in zip(at, spots)]
        if self._promoted:
            self._resume_promoted(chosen, ctx.now)
        self._to_front(spots)
        # largest first, admission order among equal sizes (a stable sort)
        order = sorted(range(len(chosen)), key=[-job.num_gpu for job in chosen].__getitem__)
        chosen = [chosen[i] for i in order]
        if not ctx.previous and not ctx.cluster.pooled:  # place_units' replay, without units
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

    def _resume_promoted(self, chosen: list[JobView], now: float) -> None:
        """Promoted jobs this round starts count their service from now (the core starts
        every waiting job a plan runs, at the round's time)."""
        promoted = self._promoted
        for job in chosen:
            accounts = promoted.get(job.id)
            if accounts is not None and job.status is Status.PENDING:
                accounts.start(job, now)

    def _visible(self, ctx: RoundContext) -> tuple[list[list[JobView]], dict[int, int],
                                                   list[list[int]] | None]:
        """Its queues as this round plans them, their jobs counted by #GPUs, and (with jobs
        held back: ctx.partial) where each shown job stands in its whole queue."""
        if not ctx.partial:
            return self.queues, self.sizes, None
        live = {id(j) for j in ctx.queue}
        at = [[i for i, job in enumerate(queue) if id(job) in live] for queue in self.queues]
        queues = [[queue[i] for i in where] for queue, where in zip(self.queues, at)]
        sizes: dict[int, int] = {}
        for job in chain.from_iterable(queues):
            sizes[job.num_gpu] = sizes.get(job.num_gpu, 0) + 1
        return queues, sizes, at

    def _admit_by_count(self, ctx: RoundContext, queues: list[list[JobView]],
                        sizes: dict[int, int]) -> tuple[list[JobView], None, list[list[int]]]:
        """The artifact's admission (its mode in the simulator): by free-GPU count, whatever
        the nodes. Returns the jobs, no placements, and where each queue's admitted jobs
        stand in it."""
        # a count that did not cover a job covers no bigger one: requests are monotone
        walk = AdmissionWalk(sizes, ctx.cluster.spec.total_gpus, monotone=True)
        chosen: list[JobView] = []
        spots: list[list[int]] = []
        for queue in queues:  # one walk, queue after queue
            here = walk.over(queue)
            spots.append(here)
            chosen.extend(map(queue.__getitem__, here))
            if walk.ended:
                break
        return chosen, None, spots

    def _admit_placed(self, ctx: RoundContext, queues: list[list[JobView]],
                      sizes: dict[int, int]) -> tuple[list[JobView], list[tuple], list[list[int]]]:
        """Admission by placement, in queue order: a job no node can take now waits, and the
        smaller jobs behind it may still fit (base.greedy). Returns the jobs, where each was
        placed, and where each queue's admitted jobs stand in it."""
        cluster = ctx.cluster
        cluster.reset()
        chosen, where, positions = greedy(cluster, chain.from_iterable(queues), sizes,
                                          fits_monotone(ctx.model))
        # positions count over the queues end to end: turn them into (queue, place in it)
        spots: list[list[int]] = [[] for _ in queues]
        queue, start = 0, 0
        for position in positions:
            while position >= start + len(queues[queue]):
                start += len(queues[queue])
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

    def _demotion_time(self, job: JobView, q: int, now: float) -> float:
        """When a job running from now on reaches queue q's limit (the artifact's arithmetic:
        whole seconds per GPU share, minus the service attained in this queue)."""
        return math.ceil(self.limits[q] / job.num_gpu) - self.served(job) + now

    def _next_demotion(self, chosen: list[JobView], now: float) -> float | None:
        limits, ceil, queue_of = self.limits, math.ceil, self.queue_of
        last = len(limits)
        # _demotion_time of each, inlined (the same arithmetic, in the same order; a job's
        # service is its attained service where none was promoted)
        if self._promoted:
            served = self.served
            times = [ceil(limits[queue_of[j.id]] / j.num_gpu) - served(j) + now
                     for j in chosen if queue_of[j.id] < last]
        else:
            times = [ceil(limits[queue_of[j.id]] / j.num_gpu) - j.attained + now
                     for j in chosen if queue_of[j.id] < last]
        return max(min(times), now) if times else None  # never a wakeup in the past


class _Promoted:
    """A promoted job's service and wait since its promotion, summed as the core sums its
    own (`attained`, `pending_since_run`) at the same moments: when the job starts (in the
    round that runs it), as time moves on while it runs, and while it waits."""

    __slots__ = ("served", "since", "waited", "mark", "resumed")

    def __init__(self, now: float):
        self.served = 0.0  # wall seconds run since the promotion
        self.since = now  # when its service was last counted (while it runs)
        self.waited = 0.0  # seconds waited since the promotion, up to its last start
        self.mark = now  # when its wait began, until it starts again (then the core's mark)
        self.resumed = False  # started since the promotion

    def start(self, job: JobView, now: float) -> None:
        """The round at `now` starts the (waiting) job."""
        mark = job.pending_mark if self.resumed else self.mark
        if mark is not None:
            self.waited += now - mark
        self.resumed = True
        self.since = now

    def advance(self, now: float, running_sum: bool) -> float:
        """Time moved on to `now` while it ran: its service so far."""
        if running_sum:  # the cost model's float order, as the core's
            self.served = (self.served + now) - self.since
        else:
            self.served += now - self.since
        self.since = now
        return self.served

    def waited_until(self, job: JobView, now: float) -> float:
        mark = job.pending_mark if self.resumed else self.mark
        return self.waited + (now - (mark or now))
