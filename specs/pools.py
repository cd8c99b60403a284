"""The pooled spec form: a header and a row per node pool, for clusters whose nodes differ.

    pool,nodes,gpus_per_node,gpu_type,gpu_mem_gb,cpus_per_node,mem_per_node[,nodes_per_switch]
    t4-4,404,4,T4,16,96,512
    v100-8,55,8,V100M16,16,96,512

`gpu_type` and `gpu_mem_gb` may be empty (not stated: the pool holds a job asking for any
type; its groups are not bounded by memory). `nodes_per_switch` (optional, empty or 0: the
whole pool) bounds where a job bigger than a node may spread. A pool of 0 GPUs per node holds
CPU-only nodes, which take no training job (real node lists have them).
"""
from __future__ import annotations

import csv
import io
import re
from decimal import Decimal, InvalidOperation

from specs.limits import MAX_CPUS, MAX_GPU_MEM_GB, MAX_GPUS_PER_NODE, MAX_MEM, MAX_NODES, show
from specs.shape import ClusterSpec, Pool, SpecError

COLUMNS = ("pool", "nodes", "gpus_per_node", "gpu_type", "gpu_mem_gb", "cpus_per_node",
           "mem_per_node")
OPTIONAL = ("nodes_per_switch",)
# integer columns: (least, most)
_COUNTS = {"nodes": (1, MAX_NODES), "gpus_per_node": (0, MAX_GPUS_PER_NODE),
           "cpus_per_node": (1, MAX_CPUS), "mem_per_node": (1, MAX_MEM),
           "nodes_per_switch": (0, MAX_NODES)}
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}")  # pool names and GPU types
MAX_POOLS = 4096


def pooled_spec(label: str, rows: list[tuple[int, list[str]]],
                columns: dict[str, int]) -> ClusterSpec:
    """The spec of `rows` (the header first), or SpecError naming every fault."""
    header_line = rows[0][0]
    problems: list[tuple[int | None, str | None, str]] = [
        (header_line, name, "missing column") for name in COLUMNS if name not in columns]
    if len(rows) == 1:
        problems.append((header_line + 1, None, "no pool row after the header"))
    if len(rows) - 1 > MAX_POOLS:
        problems.append((rows[MAX_POOLS + 1][0], None, f"more than {MAX_POOLS} pools"))
    if problems:
        raise SpecError(label, problems)
    pools: list[Pool] = []
    names: dict[str, int] = {}
    for line, row in rows[1:]:
        if len(row) != len(rows[0][1]):
            problems.append((line, None, f"expected {len(rows[0][1])} fields, got {len(row)}"))
            continue
        pool = _pool(line, row, columns, problems)
        if pool is None:
            continue
        if pool.name in names:
            problems.append((line, "pool", f"{pool.name!r} is named again (first on line "
                                           f"{names[pool.name]})"))
        names.setdefault(pool.name, line)
        pools.append(pool)
    if not problems:
        nodes = sum(p.nodes for p in pools)
        if nodes > MAX_NODES:
            problems.append((rows[-1][0], "nodes", f"a cluster of {nodes} nodes; at most "
                                                   f"{MAX_NODES}"))
        elif not any(p.gpus for p in pools):
            problems.append((header_line, "gpus_per_node", "no pool has a GPU"))
    if problems:
        raise SpecError(label, problems)
    return ClusterSpec.of_pools(tuple(pools))


def _pool(line: int, row: list[str], columns: dict[str, int],
          problems: list[tuple[int | None, str | None, str]]) -> Pool | None:
    """One row's pool, or None with its faults added to `problems`."""
    found = len(problems)
    cell = {name: row[i].strip() for name, i in columns.items()}
    for name in ("pool",) + (("gpu_type",) if cell["gpu_type"] else ()):
        if not NAME.fullmatch(cell[name]):
            problems.append((line, name, "must be 1-64 letters, digits or _.+- (starting "
                                         f"with a letter or digit), got {cell[name]!r}"))
    counts: dict[str, int] = {}
    for name, (low, high) in _COUNTS.items():
        text = cell.get(name, "") or ("0" if name == "nodes_per_switch" else "")
        try:
            number = Decimal(text)
            ok = number.is_finite() and number == number.to_integral_value() and number >= low
        except InvalidOperation:
            ok = False
        if not ok:
            kind = "a positive integer" if low else "a non-negative integer"
            problems.append((line, name, f"must be {kind}, got {text!r}"))
        elif number > high:
            problems.append((line, name, f"must be at most {show(high)}, got {text!r}"))
        else:
            counts[name] = int(number)
    memory = 0.0
    if cell["gpu_mem_gb"]:
        text = cell["gpu_mem_gb"]
        try:
            memory = float(Decimal(text))
            ok = Decimal(text).is_finite() and memory > 0
        except InvalidOperation:
            ok = False
        if not ok:
            problems.append((line, "gpu_mem_gb", f"must be a positive number of GB or empty, "
                                                 f"got {text!r}"))
        elif memory > MAX_GPU_MEM_GB:
            problems.append((line, "gpu_mem_gb", f"must be at most {show(MAX_GPU_MEM_GB)}, "
                                                 f"got {text!r}"))
    if len(problems) > found:
        return None
    return Pool(cell["pool"], counts["nodes"], counts["gpus_per_node"], counts["cpus_per_node"],
                counts["mem_per_node"], cell["gpu_type"], memory, counts["nodes_per_switch"])


def spec_text(spec: ClusterSpec) -> str:
    """The pooled form of `spec` (a Muri-form spec as its one pool), which load_spec reads
    back to an equal layout."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS + OPTIONAL)
    for p in spec.layout:
        writer.writerow([p.name, p.nodes, p.gpus_per_node, p.gpu_type,
                         show(p.gpu_mem_gb) if p.gpu_mem_gb else "", p.cpus_per_node,
                         p.mem_per_node, p.nodes_per_switch or ""])
    return out.getvalue()
