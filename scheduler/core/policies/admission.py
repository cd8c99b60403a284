"""The admission walk: which jobs of an order a round admits, in that order, while GPUs last.

Greedy placement, Muri's admission and Tiresias's admission by free-GPU count all walk their
order so; what admitting a job means (placing it, reserving room for its class) is the
caller's `take`, and without one a job is admitted while as many GPUs are free, whatever the
nodes. The walk costs what is admitted, not the backlog: room only shrinks during a walk, so
it skips a request no smaller than one that did not fit (where requests are monotone, see
order.fits_monotone), and stops once no job left could fit.
"""
from __future__ import annotations

import math
from typing import Callable, Iterable, Mapping

from scheduler.core.state import JobView


class AdmissionWalk:
    """One walk over an order, which may come in parts (Tiresias's queues, one after
    another): `over` each part in turn, until `ended`. `sizes` counts the jobs of the whole
    order by #GPUs; `free`: the GPUs free before the walk. `read` counts the jobs read."""

    __slots__ = ("free", "read", "ended", "_left", "_smallest", "_failed", "_monotone")

    def __init__(self, sizes: Mapping[int, int], free: int, monotone: bool):
        self.free = free
        self.read = 0
        self.ended = False  # no job left could fit
        self._left = dict(sizes)  # the jobs not read yet, by #GPUs
        self._smallest = min(self._left, default=math.inf)
        self._failed = math.inf  # the smallest request that did not fit
        self._monotone = monotone

    def over(self, order: Iterable[JobView],
             take: Callable[[JobView, int], int | None] | None = None) -> list[int]:
        """Offer each job of `order` in turn to `take(job, position)`, which admits it or not
        and returns the GPUs then free (None: the job did not fit). Not offered: a job no
        smaller than one that did not fit, when requests are monotone. The walk ends when no
        job left asks for at most the free GPUs, or (monotone) every one left is no smaller
        than one that did not fit. Returns the positions in `order` of the jobs that had
        room."""
        taken: list[int] = []
        if self.ended:
            return taken
        had_room = taken.append
        left, smallest, failed, free = self._left, self._smallest, self._failed, self.free
        monotone = self._monotone
        # the walk ends once fewer GPUs than this are free: the smallest job left, or any
        # number once that is no smaller than a request that did not fit
        least = smallest if smallest < failed else math.inf
        position = -1
        for position, job in enumerate(order):
            if free < least:
                self.ended = True
                break
            gpus = job.num_gpu
            count = left[gpus] - 1
            if count:
                left[gpus] = count
            else:
                del left[gpus]
                if gpus == smallest:
                    smallest = min(left, default=math.inf)
                    least = smallest if smallest < failed else math.inf
            if gpus >= failed:
                continue
            if take is None:  # by count
                if gpus <= free:
                    free -= gpus
                    had_room(position)
                    continue
            else:
                after = take(job, position)
                if after is not None:
                    free = after
                    had_room(position)
                    continue
            if monotone:  # no bigger request fits either
                failed = gpus
                if failed <= smallest:
                    least = math.inf
        else:
            position += 1
        self.read += position
        self._smallest, self._failed, self.free = smallest, failed, free
        return taken
