"""Exclusive-GPU policies that differ only in the order they serve jobs: FIFO, SRTF, SRSF."""
from __future__ import annotations

from typing import Callable

from scheduler.policies.base import Policy, RoundContext, place_in_order
from scheduler.state import Job, Plan


class PriorityPolicy(Policy):
    """Sort the runnable jobs by a key each round, then place greedily (smaller jobs backfill)."""

    def __init__(self, preset, name: str, key: Callable[[Job], float]):
        super().__init__(preset)
        self.name = name
        self.key = key

    def plan(self, ctx: RoundContext) -> Plan:
        order = self.carried_order(ctx.queue)
        order.sort(key=self.key)
        return Plan(tuple(place_in_order(ctx, order)))


def fifo(preset) -> PriorityPolicy:
    return PriorityPolicy(preset, "fifo", lambda j: j.submit_time)


def srtf(preset) -> PriorityPolicy:
    return PriorityPolicy(preset, "srtf", lambda j: j.remaining_estimate)


def srsf(preset) -> PriorityPolicy:
    return PriorityPolicy(preset, "srsf", lambda j: j.remaining_estimate * j.num_gpu)
