"""Consolidated ("yarn") placement on a free-resource model of the cluster.

A round starts from an empty copy of the cluster and places jobs one by one; what a job takes
is recorded as `NodeSlice`s so that drivers know which GPUs to use. This runs for every
running job in every round of a simulation, so it keeps plain per-node counters.
"""
from __future__ import annotations

from dataclasses import dataclass

from specs.spec import ClusterSpec
from scheduler.core.state import NodeSlice


@dataclass(frozen=True, slots=True)
class Demand:
    """What a job of n GPUs needs besides GPUs: CPUs per GPU (a 1-GPU job needs fewer)."""

    cpu_per_gpu: int = 6
    cpu_single_gpu: int = 2

    def cpus(self, gpus: int, whole_job_gpus: int) -> int:
        return self.cpu_single_gpu if whole_job_gpus == 1 else self.cpu_per_gpu * gpus


class ClusterState:
    """Free GPUs and CPUs per node, grouped by switch. Cheap to reset every round.

    A round places every running job again, so the per-placement work is kept small and
    independent of the cluster's size: each node's free GPUs are one bit mask, and first fit
    remembers, per request size, the first node that may still fit it (room only shrinks
    between resets, so nodes before it never will) and, per switch, how many nodes are idle.
    """

    __slots__ = ("spec", "demand", "free_mask", "free_count", "free_cpus", "free_total",
                 "_switches", "_per_node", "_per_switch", "_idle", "_first", "_slices",
                 "_masks", "_alone_cpus", "offline")

    def __init__(self, spec: ClusterSpec, demand: Demand = Demand()):
        self.spec = spec
        self.demand = demand
        self._per_node = spec.gpus_per_node
        per_switch = self._per_switch = spec.nodes_per_switch
        self._switches = [range(s * per_switch, (s + 1) * per_switch)
                          for s in range(spec.num_switch)]
        # (node, free mask, #GPUs) -> (the slice taken there, the mask left): a node has few
        # distinct masks, and a lookup costs less than finding the bits and making the slice
        self._slices: dict[tuple[int, int, int], tuple[tuple[NodeSlice], int]] = {}
        self._masks: dict[tuple[int, ...], int] = {}  # GPU ids -> their bit mask (-1: bad)
        # CPUs a job of g <= gpus_per_node GPUs takes on its one node, by g (asked per job)
        self._alone_cpus = [demand.cpus(g, g) for g in range(self._per_node + 1)]
        self.offline: set[int] = set()  # nodes that take no work (agent missing or dead)
        self.reset()

    def reset(self) -> None:
        g, n = self._per_node, self.spec.num_nodes
        self.free_mask = [(1 << g) - 1] * n  # bit i set: GPU i of the node is free
        self.free_count = [g] * n
        self.free_cpus = [self.spec.cpus_per_node] * n
        self.free_total = g * n
        self._idle = [self._per_switch] * self.spec.num_switch  # nodes with every GPU free
        self._first: dict[int, int] = {}  # request size -> no node before this one fits it
        for node in self.offline:
            if self.free_count[node] == g:
                self._idle[node // self._per_switch] -= 1
            self.free_mask[node], self.free_count[node], self.free_cpus[node] = 0, 0, 0
            self.free_total -= g

    def free_when_empty(self) -> int:
        """The free GPUs `reset` leaves (every online node's), without resetting."""
        return self._per_node * (self.spec.num_nodes - len(self.offline))

    @property
    def free_gpus(self) -> list[list[int]]:
        """Each node's free GPU ids, ascending (a view for people and tests)."""
        g = self._per_node
        return [[i for i in range(g) if mask >> i & 1] for mask in self.free_mask]

    def place(self, num_gpu: int) -> tuple[NodeSlice, ...] | None:
        """Consolidated placement within one switch, or None when it does not fit.

        More than a node's worth takes whole idle nodes plus one node for the rest; less takes
        the first node with room. First fit keeps the choice predictable for operators.
        """
        if num_gpu > self.free_total:
            return None
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
        return None

    def can_place(self, num_gpu: int) -> bool:
        """Reserve room for a job (admission): what place() takes, without the answer."""
        return self.place(num_gpu) is not None

    def _place_across(self, num_gpu: int) -> tuple[NodeSlice, ...] | None:
        """More than a node's worth: the first switch where _fit finds room."""
        full_needed = num_gpu // self._per_node
        for switch, nodes in enumerate(self._switches):
            if self._idle[switch] < full_needed:
                continue  # too few idle nodes here: _fit would not find them
            found = self._fit(nodes, num_gpu)
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
        if count and self.free_count[node] == self._per_node:
            self._idle[node // self._per_switch] -= 1
        self.free_count[node] -= count
        self.free_cpus[node] -= cpus
        self.free_total -= count

    def keep(self, slices: tuple[NodeSlice, ...], job_gpus: int) -> bool:
        """Take exactly these GPUs if all are free (a running job staying put)."""
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
        if job_gpus > 0 and fg[node] == self._per_node:
            self._idle[node // self._per_switch] -= 1
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

    def _fit(self, nodes: range, num_gpu: int) -> list[tuple[int, int]] | None:
        """More than a node's worth within `nodes`: whole idle nodes, one node for the rest."""
        g, fg, fc, d = self._per_node, self.free_count, self.free_cpus, self.demand
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
