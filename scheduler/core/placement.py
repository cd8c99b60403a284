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
    """Free GPUs and CPUs per node, grouped by switch. Cheap to reset every round."""

    __slots__ = ("spec", "demand", "free_gpus", "free_count", "free_cpus", "free_total",
                 "_switches", "_per_node", "offline")

    def __init__(self, spec: ClusterSpec, demand: Demand = Demand()):
        self.spec = spec
        self.demand = demand
        self._per_node = spec.gpus_per_node
        per_switch = spec.nodes_per_switch
        self._switches = [range(s * per_switch, (s + 1) * per_switch)
                          for s in range(spec.num_switch)]
        self.offline: set[int] = set()  # nodes that take no work (agent missing or dead)
        self.reset()

    def reset(self) -> None:
        g, n = self._per_node, self.spec.num_nodes
        self.free_gpus = [None] * n  # GPU id lists, made on first use of a node
        self.free_count = [g] * n
        self.free_cpus = [self.spec.cpus_per_node] * n
        self.free_total = g * n
        for node in self.offline:
            self.free_gpus[node], self.free_count[node], self.free_cpus[node] = [], 0, 0
            self.free_total -= g

    def _take(self, node: int, count: int, job_gpus: int) -> NodeSlice:
        free = self.free_gpus[node]
        if free is None:
            free = list(range(self._per_node))
        taken, self.free_gpus[node] = tuple(free[:count]), free[count:]
        self.free_count[node] -= count
        self.free_cpus[node] -= self.demand.cpus(count, job_gpus)
        self.free_total -= count
        return NodeSlice(node, taken)

    def place(self, num_gpu: int) -> tuple[NodeSlice, ...] | None:
        """Consolidated placement within one switch, or None when it does not fit.

        More than a node's worth takes whole idle nodes plus one node for the rest; less takes
        the first node with room. First fit keeps the choice predictable for operators.
        """
        if num_gpu > self.free_total:
            return None
        if num_gpu <= self._per_node:
            # the first node with room, switch by switch (nodes are numbered that way)
            need_cpu = self.demand.cpus(num_gpu, num_gpu)
            fg, fc = self.free_count, self.free_cpus
            for node in range(len(fg)):
                if fg[node] >= num_gpu and fc[node] >= need_cpu:
                    return (self._take(node, num_gpu, num_gpu),)
            return None
        for nodes in self._switches:
            found = self._fit(nodes, num_gpu)
            if found is not None:
                return tuple(self._take(node, count, num_gpu) for node, count in found)
        return None

    def keep(self, slices: tuple[NodeSlice, ...], job_gpus: int) -> bool:
        """Take exactly these GPUs if all are free (a running job staying put)."""
        if sum(len(s.gpus) for s in slices) != job_gpus:
            return False
        return self._keep(slices, job_gpus)

    def _keep(self, slices: tuple[NodeSlice, ...], job_gpus: int) -> bool:
        d, fgs, fcs = self.demand, self.free_gpus, self.free_cpus
        for s in slices:
            free = fgs[s.node]
            if (not set(s.gpus).issubset(range(self._per_node) if free is None else free)
                    or fcs[s.node] < d.cpus(len(s.gpus), job_gpus)):
                return False
        for s in slices:
            free = self.free_gpus[s.node]
            free = list(range(self._per_node)) if free is None else free
            self.free_gpus[s.node] = [g for g in free if g not in s.gpus]
            self.free_count[s.node] -= len(s.gpus)
            self.free_cpus[s.node] -= d.cpus(len(s.gpus), job_gpus)
            self.free_total -= len(s.gpus)
        return True

    def _fit(self, nodes: range, num_gpu: int) -> list[tuple[int, int]] | None:
        g, fg, fc, d = self._per_node, self.free_count, self.free_cpus, self.demand
        if num_gpu <= g:
            need_cpu = d.cpus(num_gpu, num_gpu)
            for node in nodes:
                if fg[node] >= num_gpu and fc[node] >= need_cpu:
                    return [(node, num_gpu)]
            return None
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

    def can_place(self, num_gpu: int) -> bool:
        """Reserve room for a job without naming GPUs (admission); same rule as place()."""
        return self.place(num_gpu) is not None
