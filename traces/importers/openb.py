"""Alibaba GPU cluster 2023 (`cluster-trace-gpu-v2023`) `openb_pod_list_*.csv`:
name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,
deletion_time,scheduled_time.

GPUs are num_gpu x gpu_milli / 1000 (a shared GPU is a fraction of one); submit is
creation_time, run time deletion_time - scheduled_time (seconds). The log names no user or
tenant (both columns stay empty). QoS BE (best effort) becomes priority 1 (opportunistic),
every other class 0. Phase Succeeded is ok, Failed failed.
"""

from __future__ import annotations

from typing import Iterator

from traces.importers.source import (
    FAILED, OK, CellError, Progress, Row, SourceJob, csv_jobs, parse_number,
    parse_time, text_cell,
)

COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec", "qos",
           "pod_phase", "creation_time", "deletion_time", "scheduled_time")
REQUIRED = ("name", "num_gpu", "creation_time", "deletion_time", "scheduled_time")
PHASES = {"Succeeded": OK, "Failed": FAILED}


def read(inputs, progress: Progress) -> Iterator[Row]:
    return csv_jobs(inputs, COLUMNS, REQUIRED, progress, _job)


def _job(cells: dict[str, str], where: str) -> SourceJob:
    key = text_cell(cells["name"])
    if not key:
        raise CellError("name: missing")
    count = parse_number(cells["num_gpu"], "num_gpu")
    milli = parse_number(cells.get("gpu_milli", ""), "gpu_milli", missing=1000.0)
    if count < 0 or milli < 0:
        raise CellError("num_gpu/gpu_milli: negative")
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
    )
