"""What a cluster is, as every part of Interlace sees it: node pools of alike nodes, and the
one error a spec file that cannot be used raises. The file forms are read in specs/spec.py
(Muri's) and specs/pools.py (pooled)."""

from __future__ import annotations

from dataclasses import dataclass


class SpecError(Exception):
    """A spec file that cannot be used; `problems` holds one "file:line: field: why" per fault.

    `file`, `line` and `field` locate the first problem (line/field may be None).
    """

    def __init__(self, file: str, problems: list[tuple[int | None, str | None, str]]):
        self.file = file
        self.line, self.field, _ = problems[0]
        self.problems = [_where(file, line, field) + message for line, field, message in problems]
        super().__init__("\n".join(self.problems))


def _where(file: str, line: int | None, field: str | None) -> str:
    where = file if line is None else f"{file}:{line}"
    return f"{where}: {field}: " if field else f"{where}: "


@dataclass(frozen=True)
class Pool:
    """Alike nodes: each with GPUs of one type, CPUs and memory. Nodes are numbered pool by
    pool in the spec's order; a job's GPUs always lie in one pool."""

    name: str
    nodes: int
    gpus_per_node: int  # 0: a pool of CPU-only nodes (they take no training job)
    cpus_per_node: int
    mem_per_node: int  # GB
    gpu_type: str = ""  # "": not stated (the pool holds a job asking for any type)
    gpu_mem_gb: float = 0.0  # each GPU's memory (GB); 0: not stated
    nodes_per_switch: int = 0  # a job bigger than a node stays under one switch; 0: the pool

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node


@dataclass(frozen=True)
class ClusterSpec:
    """A cluster: switches hold nodes, nodes hold GPUs, CPUs and memory (GB). Muri's form
    states one shape (the fields); a pooled spec (`of_pools`) states `pools`, and the fields
    then hold the largest node's figures (a node's GPU ids stay below `gpus_per_node`)."""

    num_switch: int
    nodes_per_switch: int
    gpus_per_node: int
    cpus_per_node: int
    mem_per_node: int
    gpu_mem_gb: float = 0.0  # each GPU's memory (GB); 0: not stated, groups are not bounded
    pools: tuple[Pool, ...] = ()  # a pooled spec's pools; () in Muri's form

    @classmethod
    def of_pools(cls, pools: tuple[Pool, ...]) -> "ClusterSpec":
        """A spec of these pools (at least one)."""
        return cls(num_switch=1, nodes_per_switch=sum(p.nodes for p in pools),
                   gpus_per_node=max(p.gpus_per_node for p in pools),
                   cpus_per_node=max(p.cpus_per_node for p in pools),
                   mem_per_node=max(p.mem_per_node for p in pools),
                   gpu_mem_gb=max(p.gpu_mem_gb for p in pools), pools=tuple(pools))

    @property
    def num_nodes(self) -> int:
        return self.num_switch * self.nodes_per_switch

    @property
    def total_gpus(self) -> int:
        if self.pools:
            return sum(p.gpus for p in self.pools)
        return self.num_nodes * self.gpus_per_node

    @property
    def layout(self) -> tuple[Pool, ...]:
        """The pools, a Muri-form spec as its one pool (named "default", type unstated)."""
        if self.pools:
            return self.pools
        return (Pool("default", self.num_nodes, self.gpus_per_node, self.cpus_per_node,
                     self.mem_per_node, "", self.gpu_mem_gb, self.nodes_per_switch),)

    def node_pools(self) -> list[int]:
        """Each node's pool, as an index into `layout`."""
        return [i for i, pool in enumerate(self.layout) for _ in range(pool.nodes)]

    def node_gpus(self) -> list[int]:
        """Each node's number of GPUs."""
        return [pool.gpus_per_node for pool in self.layout for _ in range(pool.nodes)]
