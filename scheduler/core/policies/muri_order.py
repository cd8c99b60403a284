"""Muri's carried order, kept from round to round instead of re-sorted over the whole backlog.

The rule (Policy.carried_order, as the artifact does it): each round sorts the runnable jobs
stably by priority, starting from the list as the last round left it, with jobs new to it
appended in submission order; and placement then sorts that same list stably by #GPUs,
largest first. So among jobs of equal priority the order is: jobs that went through a round
by #GPUs (largest first), then by their place in the last round's priority order; after
them the jobs new to the list, in submission order. The paper preset's results depend on it.

Kept here as an `order.CarriedOrder` (whose tie labels keep the last round's order, moving
only jobs whose key changed) keyed on (priority, 0, -#GPUs) for a job that has been through
a round and (priority, 1, arrival number) for one that has not: equal keys then mean equal
priority and #GPUs, where the labels give the last round's order. After a round, the jobs
new to it take the settled key; that is a smaller key, so CarriedOrder places each after the
jobs of its priority and #GPUs that had been through a round already, in arrival order:
where the stable sorts put them.

A round reads the order from the front and stops where admission stops; the jobs of one
#GPU class that admission reserves ahead of its walk are found by a scan per class
(`Classes`) that goes no further than they lie. So a round costs what is admitted, not the
backlog.
"""
from __future__ import annotations

from itertools import count
from typing import Callable, Sequence

from scheduler.core.policies.order import CarriedOrder
from scheduler.core.state import JobView


class MuriOrder:
    """The runnable jobs in Muri's carried order; `key` is the priority (the queue view
    sorts pending jobs by it). The owner reports arrivals (`add`), departures (`remove`)
    and jobs whose priority may have changed (`touch`), calls `sync` before a round and
    `settle` after it."""

    def __init__(self, key: Callable[[JobView], float]):
        self.key = key
        # id(job) -> (arrival number, job), until the job's first round
        self._fresh: dict[int, tuple[int, JobView]] = {}
        self._arrivals = count()
        self._kept = CarriedOrder(self._entry_key)

    def __len__(self) -> int:
        return len(self._kept)

    @property
    def sizes(self) -> dict[int, int]:
        """#GPUs -> how many jobs of that class are in the order."""
        return self._kept.sizes

    def _entry_key(self, job: JobView) -> tuple:
        fresh = self._fresh.get(id(job))
        if fresh is None:
            return (self.key(job), 0, -job.record.num_gpu)
        return (self.key(job), 1, fresh[0])

    def add(self, job: JobView) -> None:
        self._fresh[id(job)] = (next(self._arrivals), job)
        self._kept.add(job)

    def remove(self, job: JobView) -> None:
        self._kept.remove(job)
        self._fresh.pop(id(job), None)

    def touch(self, job: JobView) -> None:
        self._kept.touch(job)

    def touch_all(self, jobs: Sequence[JobView]) -> None:
        self._kept.touch_all(jobs)

    def sync(self) -> list[JobView]:
        """Every job in the carried order, for this round (not to be changed)."""
        return self._kept.sync()

    def placing_order(self, jobs: list[JobView]) -> list[JobView]:
        """`jobs` (all in the order, after `sync`) as the placement sort leaves them: #GPUs
        descending, the carried order within."""
        entry = self._kept.entry
        return sorted(jobs, key=lambda j: (-j.record.num_gpu, entry(j)))

    def settle(self) -> None:
        """A round has sorted every job: those new to it take the settled key."""
        fresh = self._fresh
        if not fresh:
            return
        self._kept.sync()  # every job has its place (and its arrival key) first
        jobs = [job for _, job in fresh.values()]
        fresh.clear()
        self._kept.touch_all(jobs)

    def rebuild(self, order: Sequence[JobView]) -> None:
        """Start again so that the next round sorts `order` stably by priority (for a caller
        whose queue is not what this order was told)."""
        self.__init__(self.key)
        for job in order:
            self.add(job)


class Classes:
    """The jobs of each #GPU class in the order `jobs` lists them, found on demand: one scan
    of `jobs` from the front, only as far as the last job asked for lies."""

    __slots__ = ("_jobs", "_found", "_scanned")

    def __init__(self, jobs: list[JobView]):
        self._jobs = jobs
        self._found: dict[int, list[JobView]] = {}  # #GPUs -> its jobs scanned, in order
        self._scanned = 0  # how far the scan has gone

    def first(self, gpus: int, n: int) -> list[JobView]:
        """The first n jobs of class `gpus` (fewer where it has fewer)."""
        found = self._found
        mine = found.get(gpus)
        if mine is None:
            mine = found[gpus] = []
        if len(mine) < n:
            jobs, i, end = self._jobs, self._scanned, len(self._jobs)
            while i < end and len(mine) < n:
                job = jobs[i]
                i += 1
                other = found.get(job.record.num_gpu)
                if other is None:
                    found[job.record.num_gpu] = [job]
                else:
                    other.append(job)
            self._scanned = i
        return mine[:n]
