"""Cluster shape files. Muri's form: one header and one data row, in Muri's column names (and
an optional `gpu_mem_p_gpu`: each GPU's memory in GB, which co-located jobs share): one pool
of alike nodes. The pooled form (specs/pools.py): a row per node pool, each with its GPU type
and memory, for mixed clusters."""

from __future__ import annotations

import csv
import io
import os
from decimal import Decimal, InvalidOperation

from specs.limits import (MAX_CPUS, MAX_GPU_MEM_GB, MAX_GPUS_PER_NODE, MAX_MEM, MAX_NODES,
                          MAX_SMALL_FILE_BYTES, InputFileError, read_regular, show)
from specs.pools import pooled_spec
from specs.shape import ClusterSpec, Pool, SpecError  # noqa: F401 (re-exported)

COLUMNS = ("num_switch", "num_node_p_switch", "num_gpu_p_node", "num_cpu_p_node", "mem_p_node")
# each column's largest value (specs.limits); a cluster holds at most MAX_NODES nodes in all
BOUNDS = dict(zip(COLUMNS, (MAX_NODES, MAX_NODES, MAX_GPUS_PER_NODE, MAX_CPUS, MAX_MEM)))
GPU_MEM_COLUMN = "gpu_mem_p_gpu"  # optional: GB of memory on each GPU

__all__ = ["ClusterSpec", "Pool", "SpecError", "load_spec", "COLUMNS", "BOUNDS",
           "GPU_MEM_COLUMN"]


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
