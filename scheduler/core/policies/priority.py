"""Exclusive-GPU policies that differ only in the order they serve jobs: FIFO, SRTF, SRSF."""
from __future__ import annotations

from operator import attrgetter
from typing import Callable, Sequence

from scheduler.core.policies.base import ArtifactLoop, Policy, Replay, RoundContext, place_in_order
from scheduler.core.policies.order import CarriedOrder
from scheduler.core.state import JobView, Plan


class PriorityPolicy(Policy):
    """Sort the runnable jobs by a key each round, then place greedily (smaller jobs backfill).

    `artifact_loop` says how the artifact's loop for the built-in that this instance is took
    events (see ArtifactLoop); the simulator's own for any other."""

    plans_partial = True  # a partial queue is planned from the order as kept (among)

    def __init__(self, model, name: str, key: Callable[[JobView], float], *,
                 artifact_loop: ArtifactLoop = ArtifactLoop()):
        super().__init__(model)
        self.name = name
        self.key = key
        self.artifact_loop = artifact_loop
        self._kept = CarriedOrder(key)  # the carried order, kept between rounds
        self._replay = Replay()  # last round's placements, reused where this round repeats them

    def queue_order(self, pending: Sequence[JobView]) -> list[JobView]:
        return sorted(pending, key=self._kept.key)  # stable: the order given among ties

    def on_submit(self, job: JobView, now: float) -> None:
        self._kept.add(job)

    def on_finish(self, job: JobView, now: float) -> None:
        self._kept.remove(job)

    def on_change(self, job: JobView) -> None:
        self._kept.touch(job)

    def on_changes(self, jobs) -> None:
        self._kept.touch_all(jobs)

    def plan(self, ctx: RoundContext) -> Plan:
        order, sizes = self._kept.sync(), self._kept.sizes
        if ctx.partial:
            order, sizes = self._kept.among(ctx.queue), None
        elif len(order) != len(ctx.queue):  # a caller that did not report every job
            order = self._kept.rebuild(ctx.queue)
        return Plan(tuple(place_in_order(ctx, order, sizes, self._replay)))


# The artifact's loops for all three compare event times exactly; its FIFO loop also takes
# only exactly equal ends, where its SRTF and SRSF loops group ends close to each other.

def fifo(model) -> PriorityPolicy:
    # keys read by attrgetter (no Python frame per job re-keyed); the same values
    return PriorityPolicy(model, "fifo", attrgetter("record.submit_time"),
                          artifact_loop=ArtifactLoop(exact_events=True))


def srtf(model) -> PriorityPolicy:
    return PriorityPolicy(model, "srtf", attrgetter("remaining_estimate"),
                          artifact_loop=ArtifactLoop(exact_events=True, groups_ends=True))


def srsf(model) -> PriorityPolicy:
    return PriorityPolicy(model, "srsf", lambda j: j.remaining_estimate * j.num_gpu,
                          artifact_loop=ArtifactLoop(exact_events=True, groups_ends=True))
