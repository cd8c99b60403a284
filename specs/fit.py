"""Where a job can run on a cluster: the one rule every check of a job against a spec uses
(trace files, records, the live submit path), so that what one accepts no other refuses.

A pool holds a job when the pool has GPUs, at least as many as the job needs (a job's GPUs
always lie in one pool), of a type the job accepts, each holding the memory the job needs
on it. A job naming no type accepts any; a pool of unstated type holds a job whatever type
it asks for (nothing says its GPUs are not that kind: a Muri-form spec is such a pool); a
memory that either side leaves unstated bounds nothing.
"""
from __future__ import annotations

from typing import Sequence

from specs.limits import show
from specs.spec import Pool

# what a job that fits nowhere is told, by the field at fault
TOO_LARGE = "job needs {} GPUs but the cluster has only {}"  # a Muri-form spec
POOL_TOO_LARGE = "job needs {} GPUs but the largest pool has {}"  # a pooled one, any type
_CACHE_MOST = 4096  # (types, memory) answers kept per spec; a trace repeats a few


def accepts(gpu_types: Sequence[str], pool: Pool) -> bool:
    return not gpu_types or not pool.gpu_type or pool.gpu_type in gpu_types


def holds_memory(gpu_mem_gb: float, pool: Pool) -> bool:
    return not gpu_mem_gb or not pool.gpu_mem_gb or gpu_mem_gb <= pool.gpu_mem_gb


def holds(pool: Pool, num_gpu: int, gpu_types: Sequence[str], gpu_mem_gb: float) -> bool:
    """Whether `pool` can hold the job (the rule above)."""
    return (pool.gpus > 0 and num_gpu <= pool.gpus and accepts(gpu_types, pool)
            and holds_memory(gpu_mem_gb, pool))


def layout_of(spec: object) -> tuple[Pool, ...]:
    """The spec's pools: its `layout`, or for anything with only `total_gpus` (and maybe
    `gpu_mem_gb`) one pool of unstated type holding them all."""
    layout = getattr(spec, "layout", None)
    if layout is not None:
        return tuple(layout)
    return (Pool("default", 1, int(getattr(spec, "total_gpus")), 1, 1, "",
                 float(getattr(spec, "gpu_mem_gb", 0.0) or 0.0)),)


def pools_for(num_gpu: int, gpu_types: Sequence[str], gpu_mem_gb: float,
              spec: object) -> list[int]:
    """The indices (into the spec's layout) of the pools that can hold the job."""
    return [i for i, pool in enumerate(layout_of(spec))
            if holds(pool, num_gpu, gpu_types, gpu_mem_gb)]


class Fit:
    """The rule for one spec, to check many jobs against it: the pools that a (types,
    memory) pair leaves are worked out once, so a job costs a look-up, not a pass over up to
    thousands of pools. `misfit` says why no pool holds a job, by what is at fault."""

    def __init__(self, spec: object):
        self.pools = tuple(p for p in layout_of(spec) if p.gpus > 0)
        self.pooled = bool(getattr(spec, "pools", ()))
        self.total_gpus = int(getattr(spec, "total_gpus"))
        self.largest = max((p.gpus for p in self.pools), default=0)
        kinds = dict.fromkeys(p.gpu_type for p in self.pools if p.gpu_type)
        self.types_shown = ", ".join(kinds) or "GPUs of no stated type"
        self._answers: dict[tuple[tuple[str, ...], float], tuple[bool, float, int, int]] = {}

    def _answer(self, gpu_types: tuple[str, ...], gpu_mem_gb: float
                ) -> tuple[bool, float, int, int]:
        """(any pool of an accepted type, the most memory those pools' GPUs hold (0 where
        one leaves it unstated), the largest of those pools, the largest of those that also
        hold the memory)."""
        key = (gpu_types, gpu_mem_gb)
        found = self._answers.get(key)
        if found is None:
            typed = [p for p in self.pools if accepts(gpu_types, p)]
            most_mem = 0.0 if any(not p.gpu_mem_gb for p in typed) else \
                max((p.gpu_mem_gb for p in typed), default=0.0)
            roomy = [p.gpus for p in typed if holds_memory(gpu_mem_gb, p)]
            found = (bool(typed), most_mem, max((p.gpus for p in typed), default=0),
                     max(roomy, default=0))
            if len(self._answers) >= _CACHE_MOST:
                self._answers.clear()
            self._answers[key] = found
        return found

    def fits(self, num_gpu: int, gpu_types: Sequence[str], gpu_mem_gb: float) -> bool:
        typed, _, _, joint = self._answer(tuple(gpu_types), float(gpu_mem_gb or 0.0))
        return typed and num_gpu <= joint

    def misfit(self, num_gpu: int, gpu_types: Sequence[str], gpu_mem_gb: float,
               mem_shown: str | None = None) -> list[tuple[str, str]]:
        """Why no pool holds the job, as (what, message) with what one of "type", "memory"
        and "size" (the job's types, its memory on each GPU, its GPU count); [] when one
        does. A Muri-form spec keeps Muri's wording (the cluster's GPUs, its total)."""
        types = tuple(gpu_types)
        mem = float(gpu_mem_gb or 0.0)
        typed, most_mem, largest, joint = self._answer(types, mem)
        asked = "|".join(types)
        if not typed:
            return [("type", f"job asks for {asked!r} but the cluster has {self.types_shown}")]
        found: list[tuple[str, str]] = []
        needs = f"job needs {mem_shown or show(mem)} GB on each GPU but "
        if not joint and mem:  # every pool of its types states less memory than it needs
            if not self.pooled:
                where = f"the cluster's GPUs hold {show(most_mem)} GB"
            elif types:
                where = f"the GPUs of its types hold at most {show(most_mem)} GB"
            else:
                where = f"the cluster's GPUs hold at most {show(most_mem)} GB"
            found.append(("memory", needs + where))
        kind = ""
        if types:
            kind = f" of type {asked}" if len(types) == 1 else f" of types {asked}"
        if num_gpu > largest:
            if not self.pooled:
                message = TOO_LARGE.format(num_gpu, self.total_gpus)
            elif not types:
                message = POOL_TOO_LARGE.format(num_gpu, largest)
            else:
                that = "that type" if len(types) == 1 else "those types"
                message = (f"job needs {num_gpu} GPUs{kind} but the largest pool of {that} "
                           f"has {largest}")
            found.append(("size", message))
        elif joint and num_gpu > joint:  # big enough pools exist, but not with its memory
            found.append(("size", f"job needs {num_gpu} GPUs{kind} with "
                                  f"{mem_shown or show(mem)} GB each but the largest such "
                                  f"pool has {joint}"))
        return found
