"""Alibaba GPU cluster 2023 (`cluster-trace-gpu-v2023`) `openb_pod_list_*.csv`:
name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,
deletion_time,scheduled_time.

GPUs are num_gpu x gpu_milli / 1000 (a shared GPU is a fraction of one); submit is
creation_time, run time deletion_time - scheduled_time (seconds). The log names no user or
tenant (both columns stay empty). QoS BE (best effort) becomes priority 1 (opportunistic),
every other class 0. Phase Succeeded is ok, Failed failed.

`gpu_spec` names the GPU types a pod accepts (`V100M16|V100M32`; empty: any), which become
the job's types. A GPU-sharing pod (gpu_milli under 1000) holds that share of its GPU, so
it needs that share of the GPU's memory: of the smallest-memory type it accepts (any type
of specs/gpu_types.py when it names none), so it fits wherever it may run. The log states
no memory, so a whole-GPU pod states none.
"""

from __future__ import annotations

from typing import Iterator

from specs.gpu_types import ASSUMED, GPU_MEM_GB, parse_types
from traces.importers.source import (
    FAILED, OK, CellError, Progress, Row, SourceJob, csv_jobs, parse_number,
    parse_time, text_cell,
)

COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec", "qos",
           "pod_phase", "creation_time", "deletion_time", "scheduled_time")
REQUIRED = ("name", "num_gpu", "creation_time", "deletion_time", "scheduled_time")
PHASES = {"Succeeded": OK, "Failed": FAILED}
# what the import summary says of the GPU facts this format gives
GPU_FACTS = ("gpu_spec gives the GPU types a pod accepts (empty: any); a GPU-sharing pod "
             "(gpu_milli < 1000) needs that share of the memory of the smallest-memory type "
             "it accepts (any type of specs/gpu_types.py when it names none), rounded to "
             "0.01 GB; a whole-GPU pod states no memory")


def read(inputs, progress: Progress) -> Iterator[Row]:
    return csv_jobs(inputs, COLUMNS, REQUIRED, progress, _job)


def share_memory(milli: float, types: tuple[str, ...]
                 ) -> tuple[float, tuple[str, float, bool] | tuple[()]]:
    """(GB on each GPU, SourceJob.share_of) for a pod holding `milli`/1000 of a GPU; (0, ())
    where a type it accepts has no known memory (its smallest cannot be told)."""
    accepted = types or tuple(GPU_MEM_GB)
    if any(t not in GPU_MEM_GB for t in accepted):
        return 0.0, ()
    least = min(GPU_MEM_GB[t] for t in accepted)
    # a disclosed type's figure where one has the least memory: then it is no assumption
    smallest = sorted((t for t in accepted if GPU_MEM_GB[t] == least), key=ASSUMED.__contains__)
    # at least 0.01 GB: a share of a GPU's memory is more than none (0 would say "not stated")
    return (max(0.01, round(milli / 1000.0 * least, 2)),
            (smallest[0] if types else "any", least, smallest[0] in ASSUMED))


def _job(cells: dict[str, str], where: str) -> SourceJob:
    key = text_cell(cells["name"])
    if not key:
        raise CellError("name: missing")
    count = parse_number(cells["num_gpu"], "num_gpu")
    milli = parse_number(cells.get("gpu_milli", ""), "gpu_milli", missing=1000.0)
    if count < 0 or milli < 0:
        raise CellError("num_gpu/gpu_milli: negative")
    types, problem = parse_types(text_cell(cells.get("gpu_spec", "")))
    if problem:
        raise CellError(f"gpu_spec: {problem}")
    memory, share_of = share_memory(milli, types) if count and 0 < milli < 1000 else (0.0, ())
    submit = parse_time(cells["creation_time"], "creation_time")
    start = parse_time(cells["scheduled_time"], "scheduled_time")
    end = parse_time(cells["deletion_time"], "deletion_time")
    phase = text_cell(cells.get("pod_phase", ""))
    return SourceJob(
        key=key,
        user="",
        tenant="",
        submit=submit,
        duration=None if start is None or end is None else end - start,
        gpus=count * min(milli, 1000.0) / 1000.0 if count else 0.0,
        status=PHASES.get(phase, phase.lower()),
        where=where,
        priority=1 if text_cell(cells.get("qos", "")).upper() == "BE" else 0,
        gpu_types=types,
        gpu_mem_gb=memory,
        share_of=share_of,
    )
