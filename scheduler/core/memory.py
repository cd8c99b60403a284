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

from scheduler.core.model import CostModel
from scheduler.core.state import JobView
from specs.spec import ClusterSpec

# a sum of decimal GB may exceed a budget it meets by a rounding hair
SLACK = 1e-9


def group_budget(spec: ClusterSpec, model: CostModel) -> float:
    """GB the members of a group may hold on each GPU together (inf: not bounded)."""
    if not spec.gpu_mem_gb:
        return math.inf
    return spec.gpu_mem_gb - model.group_mem_reserve_gb


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
    return sum(j.gpu_mem for j in jobs)


def fits(jobs: Sequence[JobView], budget: float) -> bool:
    """Whether `jobs` may share GPUs within `budget` (see group_budget): none of them must
    run alone, and their memory fits."""
    if len(jobs) < 2:
        return True
    if any(j.alone for j in jobs):
        return False
    return budget == math.inf or held_gb(jobs) <= budget + SLACK
