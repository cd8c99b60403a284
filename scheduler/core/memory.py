"""GPU memory that co-located jobs share.

Jobs interleaved on the same GPUs keep their weights, optimizer state and activations there at
once: a group forms only where its members' memory (each job's need per GPU: its record's,
until its trainers measure it) fits each GPU's memory less the cost model's reserve (the CUDA
contexts of several processes and the allocator's slack). A job alone needs only its own to
fit the GPU, which the trace and submit checks hold. A cluster that states no GPU memory
bounds no group by memory; a job that once ran out of memory beside others (`alone`) joins
none anywhere.
"""
from __future__ import annotations

import math
from typing import Iterable, Sequence

from dataclasses import dataclass

from scheduler.core.model import CostModel
from scheduler.core.state import JobView
from specs.fit import accepts, holds
from specs.spec import ClusterSpec, Pool

# a sum of decimal GB may exceed a budget it meets by a rounding hair
SLACK = 1e-9


def on_each_gpu(groups: Iterable) -> dict[tuple[int, int], list[int]]:
    """The job ids on each (node, GPU) the groups are placed on: co-located jobs share each
    of their GPUs' memory."""
    on: dict[tuple[int, int], list[int]] = {}
    for group in groups:
        for piece in group.placement:
            for gpu in piece.gpus:
                on.setdefault((piece.node, gpu), []).extend(group.jobs)
    return on


def held_gb(jobs: Iterable[JobView]) -> float:
    """GB the jobs hold on each GPU they share."""
    return sum(j.gpu_mem_gb for j in jobs)


def fits(jobs: Sequence[JobView], budget: float) -> bool:
    """Whether `jobs` may share GPUs within `budget` (a GPU's memory less the cost model's
    reserve; see Room): none of them must run alone, and their memory fits."""
    if len(jobs) < 2:
        return True
    if any(j.alone for j in jobs):
        return False
    return budget == math.inf or held_gb(jobs) <= budget + SLACK


@dataclass(frozen=True)
class Room:
    """Where jobs may run, and run together: the cluster's pools (`spec.layout`), and for
    each the GB a group's members may hold on each of its GPUs (the GPU's memory less the
    cost model's reserve). A job alone may run where specs.fit's rule says a pool holds it.

    `simple`: a Muri-form spec (one shape, no GPU type), where only the one budget matters
    and every job may run anywhere; the hot paths test it first."""

    pools: tuple[Pool, ...]
    budgets: tuple[float, ...]  # what a group's members may hold on each GPU (inf: any)
    simple: bool

    @classmethod
    def of(cls, spec: ClusterSpec, model: CostModel) -> "Room":
        reserve = model.group_mem_reserve_gb
        return cls(pools=spec.layout,
                   budgets=tuple(p.gpu_mem_gb - reserve if p.gpu_mem_gb else math.inf
                                 for p in spec.layout),
                   simple=not spec.pools)

    @property
    def budget(self) -> float:
        """A Muri-form spec's one group budget."""
        return self.budgets[0]

    def pools_for(self, jobs: Sequence[JobView]) -> frozenset[int]:
        """The pools where `jobs` (one job, or members of one group, all of one size) may
        run: together where there are several."""
        return frozenset(p for p in range(len(self.pools)) if self._holds(jobs, p))

    def _holds(self, jobs: Sequence[JobView], p: int) -> bool:
        """Whether pool `p` is one of pools_for(jobs): asked of one pool, it costs one
        pool's test, not a pass over all of them (a policy asks it per GPU)."""
        first, pool = jobs[0], self.pools[p]
        if len(jobs) == 1:
            return holds(pool, first.num_gpu, first.record.gpu_types, first.gpu_mem_gb)
        return (holds(pool, first.num_gpu, (), 0.0) and not any(j.alone for j in jobs)
                and held_gb(jobs) <= self.budgets[p] + SLACK
                and all(accepts(j.record.gpu_types, pool) for j in jobs))

    def fits(self, jobs: Sequence[JobView]) -> bool:
        """Whether `jobs` may share GPUs somewhere (memory.fits on a Muri-form spec)."""
        if self.simple:
            return fits(jobs, self.budgets[0])
        return len(jobs) < 2 or bool(self.pools_for(jobs))

    def fits_in(self, jobs: Sequence[JobView], pool: int) -> bool:
        """Whether `jobs` may share the GPUs of a node of `pool` (one job: run there)."""
        if self.simple:
            return fits(jobs, self.budgets[0])
        return 0 <= pool < len(self.pools) and self._holds(jobs, pool)
