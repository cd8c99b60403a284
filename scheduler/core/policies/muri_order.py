"""Muri's carried order, kept from round to round instead of re-sorted over the whole backlog.

The rule (Policy.carried_order, as the artifact does it): each round sorts the runnable jobs
stably by priority, starting from the list as the last round left it, with jobs new to it
appended in submission order; and placement then sorts that same list stably by #GPUs,
largest first. So among jobs of equal priority the order is: jobs that went through a round
by #GPUs (largest first), then by their place in the last round's priority order; after
them the jobs new to the list, in submission order. The paper preset's results depend on it.

Kept here per #GPU class, each an `order.CarriedOrder` (whose tie labels keep the last
round's order within a class, moving only jobs whose key changed) keyed on
(priority, 0, -#GPUs) for a job that has been through a round and (priority, 1, arrival
number) for one that has not. Two jobs of different classes never have equal keys, so the
classes merge into one order by key alone. After a round, the jobs new to it take the
settled key; that is a smaller key, so CarriedOrder places each after the jobs of its
priority and #GPUs that had been through a round already, in their arrival order: where the
stable sorts put them.

A round walks the merged order lazily and stops where admission stops, so it costs what is
admitted, not the backlog.
"""
from __future__ import annotations

import heapq
from itertools import count
from typing import Callable, Iterator, Sequence

from scheduler.core.policies.order import CarriedOrder
from scheduler.core.state import Job


class MuriOrder:
    """The runnable jobs in Muri's carried order, per #GPU class; `key` is the priority (the
    queue view sorts pending jobs by it). The owner reports arrivals (`add`), departures
    (`remove`) and jobs whose priority may have changed (`touch`), calls `sync` before a
    round and `settle` after it."""

    def __init__(self, key: Callable[[Job], float]):
        self.key = key
        self._classes: dict[int, CarriedOrder] = {}
        self._fresh: dict[int, tuple[int, Job]] = {}  # id(job) -> (arrival number, job)
        # until the job's first round
        self._arrivals = count()
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def _entry_key(self, job: Job) -> tuple:
        fresh = self._fresh.get(id(job))
        if fresh is None:
            return (self.key(job), 0, -job.record.num_gpu)
        return (self.key(job), 1, fresh[0])

    def add(self, job: Job) -> None:
        gpus = job.record.num_gpu
        order = self._classes.get(gpus)
        if order is None:
            order = self._classes[gpus] = CarriedOrder(self._entry_key)
        self._fresh[id(job)] = (next(self._arrivals), job)
        order.add(job)
        self._size += 1

    def remove(self, job: Job) -> None:
        order = self._classes.get(job.record.num_gpu)
        if order is None:
            return
        before = len(order)
        order.remove(job)
        if len(order) == before:
            return  # not in the order
        self._fresh.pop(id(job), None)
        self._size -= 1
        if not len(order):
            del self._classes[job.record.num_gpu]

    def touch(self, job: Job) -> None:
        order = self._classes.get(job.record.num_gpu)
        if order is not None:
            order.touch(job)

    def touch_all(self, jobs: Sequence[Job]) -> None:
        classes = self._classes
        for job in jobs:
            order = classes.get(job.record.num_gpu)
            if order is not None:
                order.touch(job)

    def sync(self) -> dict[int, list[Job]]:
        """#GPUs -> that class's jobs in order, for this round (not to be changed)."""
        return {gpus: order.sync() for gpus, order in self._classes.items()}

    def walk(self) -> Iterator[Job]:
        """Every job in the carried order (after `sync`), lazily: the classes merged."""
        classes = self._classes
        if len(classes) == 1:
            return iter(next(iter(classes.values())).sync())

        def entry(job: Job) -> tuple:
            return classes[job.record.num_gpu].entry(job)

        return heapq.merge(*(order.sync() for order in classes.values()), key=entry)

    def placing_order(self, jobs: list[Job]) -> list[Job]:
        """`jobs` (all in the order) as the placement sort leaves them: #GPUs descending,
        the carried order within."""
        classes = self._classes
        return sorted(jobs, key=lambda j: (-j.record.num_gpu, classes[j.record.num_gpu].entry(j)))

    def settle(self) -> None:
        """A round has sorted every job: those new to it take the settled key."""
        fresh, classes = self._fresh, self._classes
        if not fresh:
            return
        for order in classes.values():
            order.sync()  # every job has its place (and its arrival key) first
        jobs = [job for _, job in fresh.values()]
        fresh.clear()
        for job in jobs:
            classes[job.record.num_gpu].touch(job)

    def rebuild(self, order: Sequence[Job]) -> None:
        """Start again so that the next round sorts `order` stably by priority (for a caller
        whose queue is not what this order was told)."""
        self.__init__(self.key)
        for job in order:
            self.add(job)

