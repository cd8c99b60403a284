"""Cluster shape files. Muri's form: one header and one data row, in Muri's column names (and
an optional `gpu_mem_p_gpu`: each GPU's memory in GB, which co-located jobs share): one pool
of alike nodes. The pooled form (specs/pools.py): a row per node pool, each with its GPU type
and memory, for mixed clusters."""

from __future__ import annotations

import csv
import io
import os
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from specs.limits import (MAX_CPUS, MAX_GPU_MEM_GB, MAX_GPUS_PER_NODE, MAX_MEM, MAX_NODES,
                          MAX_SMALL_FILE_BYTES, InputFileError, read_regular, show)

COLUMNS = ("num_switch", "num_node_p_switch", "num_gpu_p_node", "num_cpu_p_node", "mem_p_node")
# each column's largest value (specs.limits); a cluster holds at most MAX_NODES nodes in all
BOUNDS = dict(zip(COLUMNS, (MAX_NODES, MAX_NODES, MAX_GPUS_PER_NODE, MAX_CPUS, MAX_MEM)))
GPU_MEM_COLUMN = "gpu_mem_p_gpu"  # optional: GB of memory on each GPU


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


def load_spec(path: str | os.PathLike[str]) -> ClusterSpec:
    """The spec in `path`, or SpecError naming every fault with its file, line and field."""
    label = os.fspath(path)
    try:
        text = read_regular(path, MAX_SMALL_FILE_BYTES).decode("utf-8-sig")
    except InputFileError as exc:
        raise SpecError(label, [(None, None, str(exc))]) from None
    except UnicodeDecodeError:
        raise SpecError(label, [(None, None, "not UTF-8 text")]) from None

    rows: list[tuple[int, list[str]]] = []
    reader = csv.reader(io.StringIO(text, newline=""))
    last = 0
    try:
        for row in reader:
            line, last = last + 1, reader.line_num
            if any(cell.strip() for cell in row):
                rows.append((line, row))
    except csv.Error as exc:
        raise SpecError(label, [(last + 1, None, f"malformed CSV: {exc}")]) from None

    if not rows:
        raise SpecError(label, [(None, None, "file is empty (expected a header and one row)")])
    header_line, header = rows[0]
    columns = {name.strip(): i for i, name in enumerate(header)}
    if "pool" in columns:
        from specs.pools import pooled_spec
        return pooled_spec(label, rows, columns)
    problems: list[tuple[int | None, str | None, str]] = [
        (header_line, name, "missing column") for name in COLUMNS if name not in columns
    ]
    if len(rows) == 1:
        problems.append((header_line + 1, None, "no data row after the header"))
    for line, _ in rows[2:]:
        problems.append((line, None, "more than one data row (a spec describes one cluster)"))
    if problems:
        raise SpecError(label, problems)

    line, row = rows[1]
    if len(row) != len(header):
        raise SpecError(label, [(line, None, f"expected {len(header)} fields, got {len(row)}")])
    values: list[int] = []
    for name in COLUMNS:
        text_value = row[columns[name]].strip()
        try:
            number = Decimal(text_value)
            ok = number.is_finite() and number == number.to_integral_value() and number > 0
        except InvalidOperation:
            ok = False
        if not ok:
            problems.append((line, name, f"must be a positive integer, got {text_value!r}"))
        elif number > BOUNDS[name]:
            problems.append((line, name, f"must be at most {BOUNDS[name]}, got {text_value!r}"))
        else:
            values.append(int(number))
    if not problems and values[0] * values[1] > MAX_NODES:
        problems.append((line, "num_switch x num_node_p_switch",
                         f"a cluster of {values[0] * values[1]} nodes; at most {MAX_NODES}"))
    gpu_mem = 0.0
    if GPU_MEM_COLUMN in columns:
        text_value = row[columns[GPU_MEM_COLUMN]].strip()
        try:
            gpu_mem = float(Decimal(text_value))
            ok = Decimal(text_value).is_finite() and gpu_mem > 0
        except InvalidOperation:
            ok = False
        if not ok:
            problems.append((line, GPU_MEM_COLUMN, f"must be a positive number of GB, "
                                                   f"got {text_value!r}"))
        elif gpu_mem > MAX_GPU_MEM_GB:
            problems.append((line, GPU_MEM_COLUMN, f"must be at most {show(MAX_GPU_MEM_GB)}, "
                                                   f"got {text_value!r}"))
    if problems:
        raise SpecError(label, problems)
    return ClusterSpec(*values, gpu_mem_gb=gpu_mem)
