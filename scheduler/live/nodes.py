"""Each node of the spec as its pool states it: GPUs, GPU memory, GPU type.

Why its own table: a pooled spec's nodes differ, so registration, the web view, the queue's
projection and the metrics ask of one node or of the GPUs of one type, not of the spec's
largest node (`ClusterSpec.gpus_per_node`). The spec's `node_pools()` is a list built per
call; this keeps it once per scheduler, so each such question is O(1) per node.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Iterable

from scheduler.core.state import NodeSlice
from specs.spec import ClusterSpec, Pool

UNSTATED = "unstated"  # the metrics' label for GPUs whose pool states no type


@dataclass(frozen=True)
class NodeLayout:
    """The spec's pools, and by node index each node's pool (an index into `pools`) and
    GPUs."""

    pools: tuple[Pool, ...]
    pool_of: tuple[int, ...]
    gpus_of: tuple[int, ...]

    @classmethod
    def of(cls, spec: ClusterSpec) -> "NodeLayout":
        return cls(spec.layout, tuple(spec.node_pools()), tuple(spec.node_gpus()))

    def pool(self, node: int) -> Pool:
        return self.pools[self.pool_of[node]]

    def gpu_type(self, node: int) -> str:
        """The node's GPU type as its pool states it; "" where it states none."""
        return self.pool(node).gpu_type

    def gpus_by_type(self) -> dict[str, int]:
        """GPUs in the spec per type (UNSTATED for pools that state none), pools of no GPU
        left out."""
        out: Counter[str] = Counter()
        for pool in self.pools:
            if pool.gpus:
                out[pool.gpu_type or UNSTATED] += pool.gpus
        return dict(out)

    def busy_by_type(self, slices: Iterable[NodeSlice]) -> dict[str, int]:
        """GPUs per type that these slices hold, each GPU once (the members of a group, or
        a group whose members' records disagree for a moment, name the same GPUs)."""
        held = {(piece.node, gpu) for piece in slices for gpu in piece.gpus}
        return dict(Counter(self.gpu_type(node) or UNSTATED for node, _ in held))

    def placement_type(self, slices: Iterable[NodeSlice]) -> str:
        """The GPU type of a job's placement: its pool's stated type; "" where no pool
        states one (or, against the rule that a job's GPUs lie in one pool, they differ)."""
        types = {self.gpu_type(piece.node) for piece in slices}
        return types.pop() if len(types) == 1 else ""
