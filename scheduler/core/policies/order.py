"""A policy's carried order kept from round to round instead of re-sorted from scratch.

`Policy.carried_order` states the rule: each round the runnable jobs are the previous round's
sorted list (jobs gone dropped, jobs new to it appended in submission order), sorted stably
by the policy's key, so jobs of equal key stay in the previous round's order. The published
artifact sorts this way and the paper preset's results depend on it.

Re-sorting every job every round costs time in proportion to the backlog, yet only jobs whose
key changed (those that ran) can move: the others are still in key order among themselves.
So each job carries a tie label, and the order is (key, tie). A job whose key stays keeps its
label; a job whose key grew was, in the previous order, before every job of its new key and
gets a label below all labels given so far; one whose key shrank was after them and gets a
label above all. Jobs new to the order get labels above all, in submission order, after the
jobs that moved. Labels given in one round follow the previous order, so ties among them fall
as the stable sort would.
"""
from __future__ import annotations

import math
from bisect import bisect_left
from typing import Any, Callable, Iterable, Sequence

from scheduler.core.state import JobView


class CarriedOrder:
    """The runnable jobs sorted by `key` with the carried tie order, kept incrementally.

    The owner reports jobs that arrive (`add`), leave (`remove`) and whose key may have
    changed (`touch`); `sync` applies them and returns the order. A job whose key changed
    without `touch` would be out of place: every change the core makes to a job is reported
    through the policy hooks, and `rebuild` restores the order from scratch otherwise.
    """

    def __init__(self, key: Callable[[JobView], Any]):
        self.key = key
        self._entries: list[tuple[Any, int]] = []  # (key, tie), ascending; ties are unique
        self._jobs: list[JobView] = []  # the jobs, aligned with _entries
        self._entry: dict[int, tuple[Any, int]] = {}  # id(job) -> its entry
        self._new: dict[int, JobView] = {}  # id(job) -> job, added since the last sync
        self._touched: dict[int, JobView] = {}
        self._up = 0  # the next label above all given
        self._down = -1  # the next label below all given
        self.sizes: dict[int, int] = {}  # #GPUs -> how many jobs of that size are in the order

    def __len__(self) -> int:
        return len(self._jobs) + len(self._new)

    def add(self, job: JobView) -> None:
        self._new[id(job)] = job
        self.sizes[job.num_gpu] = self.sizes.get(job.num_gpu, 0) + 1

    def touch(self, job: JobView) -> None:
        if id(job) in self._entry:
            self._touched[id(job)] = job

    def touch_all(self, jobs: Iterable[JobView]) -> None:
        """`touch` for each of `jobs`."""
        entry, touched = self._entry, self._touched
        for job in jobs:
            key = id(job)
            if key in entry:
                touched[key] = job

    def remove(self, job: JobView) -> None:
        if self._new.pop(id(job), None) is None:
            entry = self._entry.pop(id(job), None)
            if entry is None:
                return
            self._touched.pop(id(job), None)
            self._delete(job, entry)
        left = self.sizes[job.num_gpu] - 1
        if left:
            self.sizes[job.num_gpu] = left
        else:
            del self.sizes[job.num_gpu]

    def entry(self, job: JobView) -> tuple[Any, int]:
        """The job's place in the order as a sortable value (after `sync`)."""
        return self._entry[id(job)]

    def _delete(self, job: JobView, entry: tuple[Any, int]) -> None:
        i = bisect_left(self._entries, entry)
        del self._entries[i], self._jobs[i]

    def _insert(self, job: JobView, entry: tuple[Any, int]) -> None:
        i = bisect_left(self._entries, entry)
        self._entries.insert(i, entry)
        self._jobs.insert(i, job)
        self._entry[id(job)] = entry

    def _move(self, moved: list[tuple[tuple[Any, int], Any, JobView]]) -> None:
        """Give the jobs whose key changed their new entries: labels below all for those whose
        key grew, above all for those whose key shrank, each kind in the previous order.

        Entries are unique, so the order is the sorted list of entries however it is reached:
        a job whose new entry still lies between its neighbours keeps its place (the common
        case: a running job's key shrinks by less than the gap to the job before it), and
        only the others are taken out and put back where they now belong."""
        moved.sort()  # the previous order (entries are unique: only they are compared)
        grew = sum([old[0] < new_key for old, new_key, _ in moved])
        down = self._down - grew + 1  # the first grown job's label: the grown ones ascend
        self._down -= grew
        up = self._up
        entries, jobs, entry_of = self._entries, self._jobs, self._entry
        last = len(entries) - 1
        for old, new_key, job in moved:
            if old[0] < new_key:
                new = (new_key, down)
                down += 1
            else:
                new = (new_key, up)
                up += 1
            i = bisect_left(entries, old)
            if (i == 0 or entries[i - 1] < new) and (i == last or new < entries[i + 1]):
                entries[i] = new
            else:
                del entries[i], jobs[i]
                k = bisect_left(entries, new)
                entries.insert(k, new)
                jobs.insert(k, job)
            entry_of[id(job)] = new
        self._up = up

    def sync(self) -> list[JobView]:
        """The order for this round (the caller must not change the list)."""
        if self._touched:
            moved = []
            for job in self._touched.values():
                old = self._entry[id(job)]
                new_key = self.key(job)
                if new_key < old[0] or old[0] < new_key:
                    moved.append((old, new_key, job))
            self._touched.clear()
            if moved:
                self._move(moved)
        if self._new:
            for job in self._new.values():
                self._insert(job, (self.key(job), self._up))
                self._up += 1
            self._new.clear()
        return self._jobs

    def among(self, queue: Sequence[JobView]) -> list[JobView]:
        """This round's order of `queue`'s jobs only (some of those kept, the rest held
        back this round); the order itself keeps every job."""
        live = {id(j) for j in queue}
        return [j for j in self.sync() if id(j) in live]

    def rebuild(self, queue: Sequence[JobView]) -> list[JobView]:
        """Start again from `queue` (its jobs new to the order appended in its order), as
        Policy.carried_order would: for a caller whose queue is not what it was told."""
        self.sync()
        live = {id(j) for j in queue}
        order = [j for j in self._jobs if id(j) in live]
        order.extend(j for j in queue if id(j) not in self._entry)
        order.sort(key=self.key)
        self.__init__(self.key)
        for job in order:
            self.add(job)
        return self.sync()


def fits_monotone(model) -> bool:
    """Whether a placement request that fails means every bigger one fails too: more GPUs
    never need fewer CPUs (a 1-GPU job's CPUs are at most a 2-GPU job's)."""
    return model.cpu_single_gpu <= 2 * model.cpu_per_gpu


class Remaining:
    """The smallest #GPUs among the jobs not yet visited, as a walk over an order visits
    them: when no room is left for it, nothing later can be placed either."""

    __slots__ = ("_left", "smallest")

    def __init__(self, sizes: dict[int, int]):
        self._left = dict(sizes)
        self.smallest = min(self._left, default=math.inf)

    def visit(self, gpus: int) -> None:
        left = self._left[gpus] - 1
        if left:
            self._left[gpus] = left
        else:
            del self._left[gpus]
            if gpus == self.smallest:
                self.smallest = min(self._left, default=math.inf)

    def visit_all(self, jobs: Iterable[JobView]) -> None:
        for job in jobs:
            self.visit(job.num_gpu)
