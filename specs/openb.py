"""Alibaba's node list (`openb_node_list_all_node.csv`, cluster-trace-gpu-v2023) as node pools.

    sn,cpu_milli,memory_mib,gpu,model
    openb-node-0227,96000,393216,8,G2

`gpu` is the node's GPU count and `model` their type (empty on CPU-only nodes). A node has
cpu_milli / 1000 CPUs and memory_mib / 1024 GB, each rounded down and at least 1 (a spec
counts whole CPUs and GB). Nodes of the same GPU count, type, CPUs and memory form one pool.
"""
from __future__ import annotations

import csv
import io
import os
import re
from collections import Counter
from typing import Mapping, NamedTuple

from specs.limits import (MAX_CPUS, MAX_GPUS_PER_NODE, MAX_MEM, MAX_NODES, InputFileError,
                          read_regular, show)
from specs.pools import MAX_POOLS, NAME
from specs.spec import Pool

COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
MAX_BYTES = 64 << 20  # the real list is about 60 KB; MAX_NODES rows fit in a few MB
MAX_SHOWN = 20  # faults reported one per line; past these, a count
_INTEGER = re.compile(r"[0-9]+")  # digits only: no sign, point, exponent or underscore
_HUGE = 10**100  # stands for a longer run of digits, which every bound refuses
_NAME_LEN = 64  # what specs.pools.NAME allows


class Shape(NamedTuple):
    """What a pool's nodes share; "" as gpu_type: the list states none."""

    gpus: int
    gpu_type: str
    cpus: int
    mem_gb: int


class NodeListError(ValueError):
    """A node list that cannot be used; `problems` holds one line per fault (at most
    MAX_SHOWN, then one saying how many more), each naming the file, line and field."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("\n".join(problems))


class _Faults:
    """The faults found so far: the first MAX_SHOWN in full, the rest counted, so a huge bad
    file costs no memory and its report stays readable."""

    def __init__(self, label: str):
        self.label = label
        self.shown: list[str] = []
        self.count = 0

    def add(self, line: int | None, field: str | None, message: str) -> None:
        self.count += 1
        if len(self.shown) < MAX_SHOWN:
            where = self.label if line is None else f"{self.label}:{line}"
            self.shown.append(f"{where}: {field}: {message}" if field else f"{where}: {message}")

    def error(self) -> NodeListError:
        more = self.count - len(self.shown)
        return NodeListError(self.shown + ([f"{self.label}: ... {more} more"] if more else []))


def read_node_list(path: str | os.PathLike[str]) -> Counter[Shape]:
    """How many nodes of each shape the list at `path` holds, or NodeListError naming every
    fault (file, line, field)."""
    label = os.fspath(path)
    faults = _Faults(label)
    try:
        data = read_regular(path, MAX_BYTES)
    except InputFileError as exc:
        raise NodeListError([f"{label}: {exc}"]) from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise NodeListError([f"{label}:{line}: not UTF-8 text"]) from None

    shapes: Counter[Shape] = Counter()
    header: dict[str, int] = {}
    width = 0
    seen: dict[str, int] = {}  # node name -> its line
    nodes = 0
    reader = csv.reader(io.StringIO(text, newline=""))
    last = 0
    try:
        for row in reader:
            line, last = last + 1, reader.line_num
            if not any(cell.strip() for cell in row):
                continue
            if not header:
                width = len(row)
                for i, name in enumerate(row):
                    header.setdefault(name.strip(), i)
                missing = [name for name in COLUMNS if name not in header]
                for name in missing:
                    faults.add(line, name, f"missing column (expected {','.join(COLUMNS)})")
                if missing:
                    raise faults.error()
                continue
            nodes += 1
            if nodes > MAX_NODES:
                faults.add(line, None, f"more than {show(MAX_NODES)} nodes; a cluster holds "
                                       f"at most {show(MAX_NODES)}")
                break
            shape = _node(line, row, width, header, seen, faults)
            if shape is not None:
                shapes[shape] += 1
    except csv.Error as exc:
        faults.add(last + 1, None, f"malformed CSV: {exc}")
    if not header and not faults.count:
        faults.add(None, None, f"file is empty (expected the header {','.join(COLUMNS)} and "
                               "a row per node)")
    elif not faults.count:
        if not nodes:
            faults.add(None, None, "no node row after the header")
        elif not any(shape.gpus for shape in shapes):
            faults.add(None, "gpu", "no node has a GPU")
        elif len(shapes) > MAX_POOLS:
            faults.add(None, None, f"{len(shapes)} kinds of node; a spec holds at most "
                                   f"{MAX_POOLS} pools")
    if faults.count:
        raise faults.error()
    return shapes


def _node(line: int, row: list[str], width: int, header: dict[str, int],
          seen: dict[str, int], faults: _Faults) -> Shape | None:
    """One row's shape, or None with its faults added."""
    if len(row) != width:
        faults.add(line, None, f"expected {width} fields, got {len(row)}")
        return None
    before = faults.count
    cell = {name: row[header[name]].strip() for name in COLUMNS}
    name = cell["sn"]
    if not name:
        faults.add(line, "sn", "empty (each node needs a name)")
    elif name in seen:
        faults.add(line, "sn", f"node {_quoted(name)} named again (first on line {seen[name]})")
    else:
        seen[name] = line
    number: dict[str, int] = {}
    for field in ("cpu_milli", "memory_mib", "gpu"):
        if _INTEGER.fullmatch(cell[field]):
            number[field] = int(cell[field]) if len(cell[field]) <= 100 else _HUGE
        else:
            faults.add(line, field, f"must be a non-negative integer, got {_quoted(cell[field])}")
    cpus = max(1, number.get("cpu_milli", 0) // 1000)
    mem_gb = max(1, number.get("memory_mib", 0) // 1024)
    gpus = number.get("gpu", 0)
    if gpus > MAX_GPUS_PER_NODE:
        faults.add(line, "gpu", f"must be at most {MAX_GPUS_PER_NODE}, "
                                f"got {_quoted(cell['gpu'])}")
    if cpus > MAX_CPUS:
        faults.add(line, "cpu_milli", f"a node of at most {show(MAX_CPUS)} CPUs, "
                                      f"got {_quoted(cell['cpu_milli'])}")
    if mem_gb > MAX_MEM:
        faults.add(line, "memory_mib", f"a node of at most {show(MAX_MEM)} GB, "
                                       f"got {_quoted(cell['memory_mib'])}")
    model = cell["model"]
    if model and not NAME.fullmatch(model):
        faults.add(line, "model", "must be 1-64 letters, digits or _.+- (starting with a "
                                  f"letter or digit), got {_quoted(model)}")
    if faults.count > before:
        return None
    # a CPU-only node's model, if any, names no GPU it has
    return Shape(gpus, model if gpus else "", cpus, mem_gb)


def _quoted(text: str) -> str:
    """`text` as a message shows it: quoted, and cut short, so one huge cell stays one line."""
    return repr(text if len(text) <= 40 else text[:40] + "...")


def pools_of(shapes: Mapping[Shape, int], gpu_mem_gb: Mapping[str, float]) -> tuple[Pool, ...]:
    """A pool per shape, in a stable order (GPU pools by type, GPUs, CPUs and memory; those of
    no stated type next; CPU-only pools last), each with a readable unique name and its
    GPUs' memory from `gpu_mem_gb` (0, not stated, for a type it lacks)."""
    order = sorted(shapes, key=lambda s: (s.gpus == 0, s.gpu_type == "", s.gpu_type, s.gpus,
                                          s.cpus, s.mem_gb))
    names = _unique([_name(shape) for shape in order])
    return tuple(Pool(name, shapes[s], s.gpus, s.cpus, s.mem_gb, s.gpu_type,
                      gpu_mem_gb.get(s.gpu_type, 0.0) if s.gpus and s.gpu_type else 0.0)
                 for name, s in zip(names, order))


def _name(shape: Shape) -> str:
    """`T4-2g-104c-512gb`; `gpu-...` where the type is not stated; `cpu-32c-256gb` for CPU-only
    nodes. A long type is cut so the name stays within what a spec accepts."""
    if not shape.gpus:
        return f"cpu-{shape.cpus}c-{shape.mem_gb}gb"
    tail = f"-{shape.gpus}g-{shape.cpus}c-{shape.mem_gb}gb"
    return (shape.gpu_type or "gpu")[:_NAME_LEN - len(tail)] + tail


def _unique(names: list[str]) -> list[str]:
    """`names` with any repeat given a `-2`, `-3`, ... suffix (a cut type, or a type named
    `gpu`, can repeat a name)."""
    taken: set[str] = set()
    out = []
    for name in names:
        chosen, k = name, 1
        while chosen in taken:
            k += 1
            suffix = f"-{k}"
            chosen = name[:_NAME_LEN - len(suffix)] + suffix
        taken.add(chosen)
        out.append(chosen)
    return out
