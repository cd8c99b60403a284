"""Exclusive-GPU policies that differ only in the order they serve jobs: FIFO, SRTF, SRSF."""
from __future__ import annotations

from operator import attrgetter
from typing import Callable, Sequence

from scheduler.core.policies.base import Policy, Replay, RoundContext, place_in_order
from scheduler.core.policies.order import CarriedOrder
from scheduler.core.state import Job, Plan


class PriorityPolicy(Policy):
    """Sort the runnable jobs by a key each round, then place greedily (smaller jobs backfill)."""

    def __init__(self, preset, name: str, key: Callable[[Job], float]):
        super().__init__(preset)
        self.name = name
        self.key = key
        self._kept = CarriedOrder(key)  # the carried order, kept between rounds
        self._replay = Replay()  # last round's placements, reused where this round repeats them

    def queue_order(self, pending: Sequence[Job]) -> list[Job]:
        return sorted(pending, key=self._kept.key)  # stable: the order given among ties

    def on_submit(self, job: Job, now: float) -> None:
        self._kept.add(job)

    def on_finish(self, job: Job, now: float) -> None:
        self._kept.remove(job)

    def on_change(self, job: Job) -> None:
        self._kept.touch(job)

    def on_changes(self, jobs) -> None:
        self._kept.touch_all(jobs)

    def plan(self, ctx: RoundContext) -> Plan:
        order = self._kept.sync()
        if len(order) != len(ctx.queue):  # a caller that did not report every job
            order = self._kept.rebuild(ctx.queue)
        return Plan(tuple(place_in_order(ctx, order, self._kept.sizes, self._replay)))


def fifo(preset) -> PriorityPolicy:
    # keys read by attrgetter (no Python frame per job re-keyed); the same values
    return PriorityPolicy(preset, "fifo", attrgetter("record.submit_time"))


def srtf(preset) -> PriorityPolicy:
    return PriorityPolicy(preset, "srtf", attrgetter("remaining_estimate"))


def srsf(preset) -> PriorityPolicy:
    return PriorityPolicy(preset, "srsf", lambda j: j.remaining_estimate * j.num_gpu)
