"""Consolidated ("yarn") placement on a free-resource model of the cluster.

A round starts from an empty copy of the cluster and places jobs one by one; what a job takes
is recorded as `NodeSlice`s so that drivers know which GPUs to use. This runs for every
running job in every round of a simulation, so it keeps plain per-node counters.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from specs.fit import layout_of, pools_for
from specs.spec import ClusterSpec, Pool
from scheduler.core.memory import Room
from scheduler.core.model import CostModel
from scheduler.core.speed import TypeSpeeds
from scheduler.core.state import NodeSlice


@dataclass(frozen=True, slots=True)
class Demand:
    """What a job of n GPUs needs besides GPUs: CPUs per GPU (a 1-GPU job needs fewer)."""

    cpu_per_gpu: int = 6
    cpu_single_gpu: int = 2

    def cpus(self, gpus: int, whole_job_gpus: int) -> int:
        return self.cpu_single_gpu if whole_job_gpus == 1 else self.cpu_per_gpu * gpus

    def misfit(self, num_gpu: int, pools: Sequence[Pool]) -> str | None:
        """Why no node of `pools` (those that hold the job by its GPUs, types and memory)
        has the CPUs the job asks of each node it takes, or None. A job larger than a node
        takes whole nodes (`place`), so each needs a whole node's worth of CPUs."""
        if not pools:
            return None  # the pool rule (specs.fit) says why
        asks = [(self.cpus(min(num_gpu, p.gpus_per_node), num_gpu), p) for p in pools]
        if any(need <= p.cpus_per_node for need, p in asks):
            return None
        need = min(need for need, _ in asks)
        rate = (f"{self.cpu_single_gpu} for a 1-GPU job" if num_gpu == 1
                else f"{self.cpu_per_gpu} a GPU")
        return (f"job needs {need} CPUs on each node it runs on ({rate}); the nodes that could "
                f"hold it have {max(p.cpus_per_node for p in pools)}")


def cpu_misfit(demand: Demand, spec: ClusterSpec, record) -> str | None:
    """`Demand.misfit` for a job record on `spec`: over the pools that hold it (specs.fit)."""
    layout = layout_of(spec)
    pools = [layout[i] for i in pools_for(record.num_gpu, record.gpu_types, record.gpu_mem_gb,
                                          spec)]
    return demand.misfit(record.num_gpu, pools)


class ClusterState:
    """Free GPUs and CPUs per node, grouped by switch. Cheap to reset every round.

    A round places every running job again, so the per-placement work is kept small and
    independent of the cluster's size: each node's free GPUs are one bit mask, and first fit
    remembers, per request size, the first node that may still fit it (room only shrinks
    between resets, so nodes before it never will) and, per switch, how many nodes are idle.
    """

    __slots__ = ("spec", "demand", "free_mask", "free_count", "free_cpus", "free_total",
                 "_switches", "_per_node", "_switch_of", "_idle", "_first", "_slices",
                 "_masks", "_alone_cpus", "offline", "room", "pooled", "_node_gpus",
                 "_node_cpus", "_pool_of", "_switch_gpus", "_switch_pool", "_needs", "_solo",
                 "speeds")

    def __init__(self, spec: ClusterSpec, demand: Demand = Demand(), room: Room | None = None,
                 speeds: TypeSpeeds | None = None):
        self.spec = spec
        # GPU types' speeds: where they differ, a job tries the pools it runs fastest in first
        self.speeds = speeds if speeds is not None and speeds.active else None
        self.demand = demand
        # where jobs may run (by pool) and run together; a Muri-form spec's holds any job
        self.room = room if room is not None else Room.of(spec, CostModel())
        self.pooled = not self.room.simple  # requests may name the pools they may use
        self._per_node = spec.gpus_per_node  # the largest node's (GPU ids stay below it)
        self._node_gpus = spec.node_gpus()
        self._node_cpus = [p.cpus_per_node for p in spec.layout for _ in range(p.nodes)]
        self._pool_of = spec.node_pools()
        # switches: runs of nodes a job bigger than a node spreads within (never past a pool)
        self._switches: list[range] = []
        self._switch_gpus: list[int] = []  # each switch's GPUs per node
        self._switch_pool: list[int] = []
        start = 0
        for index, pool in enumerate(spec.layout):
            per_switch = pool.nodes_per_switch or pool.nodes
            for first in range(start, start + pool.nodes, per_switch):
                self._switches.append(range(first, min(first + per_switch, start + pool.nodes)))
                self._switch_gpus.append(pool.gpus_per_node)
                self._switch_pool.append(index)
            start += pool.nodes
        self._switch_of = [s for s, nodes in enumerate(self._switches) for _ in nodes]
        # (node, free mask, #GPUs) -> (the slice taken there, the mask left): a node has few
        # distinct masks, and a lookup costs less than finding the bits and making the slice
        self._slices: dict[tuple[int, int, int], tuple[tuple[NodeSlice], int]] = {}
        self._masks: dict[tuple[int, ...], int] = {}  # GPU ids -> their bit mask (-1: bad)
        # CPUs a job of g <= gpus_per_node GPUs takes on its one node, by g (asked per job)
        self._alone_cpus = [demand.cpus(g, g) for g in range(self._per_node + 1)]
        self._needs: dict[tuple, frozenset[int]] = {}  # see need()
        # a job (by identity) -> (its memory, whether alone, the pools it may run in alone):
        # every round asks for each job placed
        self._solo: dict = {}
        self.offline: set[int] = set()  # nodes that take no work (agent missing or dead)
        self.reset()

    def reset(self) -> None:
        gpus = self._node_gpus
        self.free_mask = [(1 << g) - 1 for g in gpus]  # bit i set: GPU i of the node is free
        self.free_count = list(gpus)
        self.free_cpus = list(self._node_cpus)
        self.free_total = self.spec.total_gpus
        self._idle = [len(nodes) for nodes in self._switches]  # nodes with every GPU free
        self._first: dict = {}  # request -> no node before this one fits it
        for node in self.offline:
            if self.free_count[node] == gpus[node]:
                self._idle[self._switch_of[node]] -= 1
            self.free_total -= self.free_count[node]
            self.free_mask[node], self.free_count[node], self.free_cpus[node] = 0, 0, 0

    def need(self, jobs) -> frozenset[int] | None:
        """The pools `jobs` (a group's members, or one job) may run in, as `place` takes
        them; None on a Muri-form spec (anywhere). Remembered by what decides it."""
        if not self.pooled:
            return None
        if len(jobs) == 1:
            job = jobs[0]
            hit = self._solo.get(job)
            if hit is None or hit[0] != job.gpu_mem_gb or hit[1] != job.alone:
                if len(self._solo) > 200_000:
                    self._solo.clear()
                hit = self._solo[job] = (job.gpu_mem_gb, job.alone, self._pools_for(jobs))
            return hit[2]
        key = (jobs[0].num_gpu, tuple(j.gpu_mem_gb for j in jobs),
               tuple(j.record.gpu_types for j in jobs), any(j.alone for j in jobs),
               tuple(j.model for j in jobs))
        found = self._needs.get(key)
        if found is None:
            if len(self._needs) > 65536:
                self._needs.clear()
            found = self._needs[key] = self._pools_for(jobs)
        return found

    def _pools_for(self, jobs) -> frozenset[int]:
        pools = self.room.pools_for(jobs)
        if self.speeds is None or len(pools) < 2:
            return pools
        return self.speeds.tiers(jobs, pools)

    def set_speeds(self, speeds: TypeSpeeds) -> None:
        """GPU types' speeds changed (measured): placement ranks pools by these from now."""
        self.speeds = speeds if speeds.active else None
        self._solo.clear()
        self._needs.clear()

    def free_when_empty(self) -> int:
        """The free GPUs `reset` leaves (every online node's), without resetting."""
        gpus = self._node_gpus
        return self.spec.total_gpus - sum(gpus[node] for node in self.offline)

    def cpus_when_empty(self) -> int:
        """The CPUs of every online node."""
        cpus = self._node_cpus
        return sum(cpus) - sum(cpus[node] for node in self.offline)

    @property
    def free_gpus(self) -> list[list[int]]:
        """Each node's free GPU ids, ascending (a view for people and tests)."""
        g = self._per_node
        return [[i for i in range(g) if mask >> i & 1] for mask in self.free_mask]

    def pool_of(self, node: int) -> int:
        """The pool (index into `spec.layout`) node `node` is in."""
        return self._pool_of[node]

    def place(self, num_gpu: int, pools: frozenset[int] | None = None
              ) -> tuple[NodeSlice, ...] | None:
        """Consolidated placement within one switch of one pool, or None when it does not fit.

        More than a node's worth takes whole idle nodes plus one node for the rest; less takes
        the first node with room. First fit keeps the choice predictable for operators.
        `pools` (from `need`): the pools the job may use; None: any.
        """
        if num_gpu > self.free_total:
            return None
        if pools is not None:
            return self._place_in(num_gpu, pools)
        if num_gpu > self._per_node:
            return self._place_across(num_gpu)
        cpus = self._alone_cpus[num_gpu] if num_gpu > 0 else self.demand.cpus(num_gpu, num_gpu)
        # the first node with room, switch by switch (nodes are numbered that way)
        fg, fc, first = self.free_count, self.free_cpus, self._first
        for node in range(first.get(num_gpu, 0), len(fg)):
            if fg[node] >= num_gpu and fc[node] >= cpus:
                first[num_gpu] = node
                return self._take(node, num_gpu, cpus)
        first[num_gpu] = len(fg)
        if self.pooled:  # nodes smaller than the largest may still hold it together
            return self._place_across(num_gpu)
        return None

    def _place_in(self, num_gpu: int, pools: frozenset[int]) -> tuple[NodeSlice, ...] | None:
        """`place` on the nodes of `pools` only: one node where one holds it, else spread
        over a switch of nodes smaller than the job."""
        if not pools:
            return None
        tiers = getattr(pools, "tiers", None)
        if tiers:  # the fastest types for the job first
            for tier in tiers:
                found = self._place_in(num_gpu, tier)
                if found is not None:
                    return found
            return None
        key = (num_gpu, pools)
        cpus = self._alone_cpus[num_gpu] if 0 < num_gpu <= self._per_node \
            else self.demand.cpus(num_gpu, num_gpu)
        fg, fc, first, pool_of = self.free_count, self.free_cpus, self._first, self._pool_of
        if num_gpu <= self._per_node:
            for node in range(first.get(key, 0), len(fg)):
                if fg[node] >= num_gpu and fc[node] >= cpus and pool_of[node] in pools:
                    first[key] = node
                    return self._take(node, num_gpu, cpus)
            first[key] = len(fg)
        return self._place_across(num_gpu, pools)

    def place_on(self, node: int, num_gpu: int, pools: frozenset[int] | None = None
                 ) -> tuple[NodeSlice, ...] | None:
        """`place` on node `node` only (room made there by moving other jobs), or None."""
        if pools is not None and self._pool_of[node] not in pools:
            return None
        cpus = self._alone_cpus[num_gpu] if 0 < num_gpu <= self._per_node \
            else self.demand.cpus(num_gpu, num_gpu)
        if not 0 < num_gpu <= self.free_count[node] or self.free_cpus[node] < cpus:
            return None
        return self._take(node, num_gpu, cpus)

    @property
    def node_gpus(self) -> list[int]:
        """Each node's GPUs, free or not (read-only)."""
        return self._node_gpus

    def can_place(self, num_gpu: int, pools: frozenset[int] | None = None) -> bool:
        """Reserve room for a job (admission): what place() takes, without the answer."""
        return self.place(num_gpu, pools) is not None

    def _place_across(self, num_gpu: int, pools: frozenset[int] | None = None
                      ) -> tuple[NodeSlice, ...] | None:
        """More than a node's worth: the first switch (of `pools`, where given, and of nodes
        smaller than the job) where _fit finds room."""
        for switch, nodes in enumerate(self._switches):
            per_node = self._switch_gpus[switch]
            if not 0 < per_node < num_gpu or (pools is not None
                                               and self._switch_pool[switch] not in pools):
                continue  # a node holds it whole here (a job spreads only where none can)
            if self._idle[switch] < num_gpu // per_node:
                continue  # too few idle nodes here: _fit would not find them
            found = self._fit(nodes, num_gpu, per_node)
            if found is not None:
                cpus = self.demand.cpus
                return tuple(self._take(node, count, cpus(count, num_gpu))[0]
                             for node, count in found)
        return None

    def _take(self, node: int, count: int, cpus: int) -> tuple[NodeSlice]:
        """Take the `count` lowest free GPUs of `node` and `cpus` of its CPUs; the slice taken,
        as a placement on that one node."""
        mask = self.free_mask[node]
        hit = self._slices.get((node, mask, count))
        if hit is None:
            hit = self._slice(node, mask, count)
        self.free_mask[node] = hit[1]
        self._use(node, count, cpus)
        return hit[0]

    def _slice(self, node: int, mask: int, count: int) -> tuple[tuple[NodeSlice], int]:
        """The `count` lowest GPU ids free in `mask` on `node`, and the mask without them."""
        taken, rest = [], mask
        while len(taken) < count:
            low = rest & -rest
            taken.append(low.bit_length() - 1)
            rest ^= low
        if len(self._slices) > 65536:
            self._slices.clear()
        hit = self._slices[(node, mask, count)] = ((NodeSlice(node, tuple(taken)),), rest)
        return hit

    def _use(self, node: int, count: int, cpus: int) -> None:
        if count and self.free_count[node] == self._node_gpus[node]:
            self._idle[self._switch_of[node]] -= 1
        self.free_count[node] -= count
        self.free_cpus[node] -= cpus
        self.free_total -= count

    def keep(self, slices: tuple[NodeSlice, ...], job_gpus: int,
             pools: frozenset[int] | None = None) -> bool:
        """Take exactly these GPUs if all are free (a running job staying put); `pools` (see
        place): the pools they must lie in."""
        if pools is not None and any(self._pool_of[s.node] not in pools for s in slices):
            return False
        if len(slices) != 1:
            if sum(len(s.gpus) for s in slices) != job_gpus:
                return False
            return self._keep(slices, job_gpus)
        # one node, the common case (every round keeps each running job): inlined
        node, gpus = slices[0].node, slices[0].gpus
        if len(gpus) != job_gpus:
            return False
        need = self._masks.get(gpus)
        if need is None:
            need = self._mask(gpus)
        free = self.free_mask[node]
        cpus = self._alone_cpus[job_gpus] if 0 < job_gpus <= self._per_node \
            else self.demand.cpus(job_gpus, job_gpus)
        fc = self.free_cpus
        if need < 0 or free & need != need or fc[node] < cpus:
            return False
        self.free_mask[node] = free & ~need
        fg = self.free_count  # _use, inlined
        if job_gpus > 0 and fg[node] == self._node_gpus[node]:
            self._idle[self._switch_of[node]] -= 1
        fg[node] -= job_gpus
        fc[node] -= cpus
        self.free_total -= job_gpus
        return True

    def _mask(self, gpus: tuple[int, ...]) -> int:
        """The bit mask of these GPU ids, -1 when one is no GPU of a node."""
        mask = self._masks.get(gpus)
        if mask is None:
            if all(0 <= g < self._per_node for g in gpus):
                mask = 0
                for g in gpus:
                    mask |= 1 << g
            else:
                mask = -1
            if len(self._masks) > 4096:
                self._masks.clear()
            self._masks[gpus] = mask
        return mask

    def _keep(self, slices: tuple[NodeSlice, ...], job_gpus: int) -> bool:
        d, masks, fcs = self.demand, self.free_mask, self.free_cpus
        for s in slices:
            need = self._mask(s.gpus)
            if need < 0 or masks[s.node] & need != need \
                    or fcs[s.node] < d.cpus(len(s.gpus), job_gpus):
                return False
        for s in slices:
            masks[s.node] &= ~self._mask(s.gpus)
            self._use(s.node, len(s.gpus), d.cpus(len(s.gpus), job_gpus))
        return True

    def _fit(self, nodes: range, num_gpu: int, g: int) -> list[tuple[int, int]] | None:
        """More than a node's worth within `nodes` (of `g` GPUs each): whole idle nodes, one
        node for the rest."""
        fg, fc, d = self.free_count, self.free_cpus, self.demand
        full_needed, rest = divmod(num_gpu, g)
        full_cpu = d.cpus(g, num_gpu)
        full = [node for node in nodes if fg[node] == g and fc[node] >= full_cpu][:full_needed]
        if len(full) < full_needed:
            return None
        found = [(node, g) for node in full]
        if rest:
            need_cpu = d.cpus(rest, num_gpu)
            last = next((n for n in nodes if n not in full and fg[n] >= rest
                         and fc[n] >= need_cpu), None)
            if last is None:
                return None
            found.append((last, rest))
        return found
