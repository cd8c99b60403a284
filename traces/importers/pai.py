"""Alibaba PAI 2020 (`cluster-trace-gpu-v2020`): `pai_job_table` joined with
`pai_task_table`, and optionally `pai_group_tag_table` for the workload label. The tables
ship headerless; a header row is accepted too.

  pai_job_table:       job_name,inst_id,user,status,start_time,end_time
  pai_task_table:      job_name,task_name,inst_num,status,start_time,end_time,plan_cpu,
                       plan_mem,plan_gpu,gpu_type
  pai_group_tag_table: inst_id,user,gpu_type_spec,group,workload

A job's GPUs are the sum over its tasks of plan_gpu / 100 x inst_num (plan_gpu is percent of
one GPU, so this may be fractional; an empty plan_gpu is a CPU task). Submit is the job's
start_time; run time is latest task end - earliest task start when every task has both
times, else the job's end_time - start_time (epoch seconds). Status Terminated is ok,
Failed failed. The job's `user` is its tenant too: PAI has no team column, and its users
are the ones who share the cluster (far too many for a tenants file; `--tenants-top N` keeps
the N with the most GPU-hours and folds the rest into `others`). The task table is held as
one small entry per job (a million jobs take a few hundred MB); the job table streams.
"""

from __future__ import annotations

import math
from typing import Iterator

from traces.errors import Problem, TraceError
from traces.importers.source import (
    FAILED, OK, CellError, Malformed, Progress, Row, SourceJob, csv_rows, parse_number,
    parse_time, text_cell,
)

JOB_COLUMNS = ("job_name", "inst_id", "user", "status", "start_time", "end_time")
TASK_COLUMNS = ("job_name", "task_name", "inst_num", "status", "start_time", "end_time",
                "plan_cpu", "plan_mem", "plan_gpu", "gpu_type")
GROUP_COLUMNS = ("inst_id", "user", "gpu_type_spec", "group", "workload")
STATUSES = {"Terminated": OK, "Failed": FAILED}
FILES = {"sources": "pai_job_table.csv", "tasks": "pai_task_table.csv",
         "groups": "pai_group_tag_table.csv"}


class _Tasks:
    """What the job table needs from a job's tasks."""

    __slots__ = ("gpus", "start", "end", "timed", "problem")

    def __init__(self) -> None:
        self.gpus, self.start, self.end, self.timed = 0.0, math.inf, -math.inf, True
        self.problem: str | None = None


def read(inputs, progress: Progress) -> Iterator[Row]:
    base = 0
    tasks: dict[str, _Tasks] = {}
    if inputs.tasks is None:
        raise TraceError([Problem("pai", None, None,
                                  "needs the task table: --tasks pai_task_table.csv")])
    for line, cells in csv_rows(inputs.tasks, TASK_COLUMNS, progress, base):
        _add_task(tasks, cells, f"{inputs.tasks}:{line}")
    base += inputs.tasks.stat().st_size
    workloads: dict[str, str] = {}
    if inputs.groups is not None:
        for _, cells in csv_rows(inputs.groups, GROUP_COLUMNS, progress, base,
                                 required=("inst_id", "workload")):
            if isinstance(cells, dict):
                workloads[text_cell(cells["inst_id"])] = text_cell(cells["workload"])
        base += inputs.groups.stat().st_size
    for path in inputs.sources:
        for line, cells in csv_rows(path, JOB_COLUMNS, progress, base):
            where = f"{path}:{line}"
            if isinstance(cells, str):
                yield Malformed(where, cells)
                continue
            try:
                yield _job(cells, where, tasks, workloads)
            except CellError as exc:
                yield Malformed(where, str(exc))
        base += path.stat().st_size


def _add_task(tasks: dict[str, _Tasks], cells: dict[str, str] | str, where: str) -> None:
    if isinstance(cells, str):
        return  # a task row without a readable job name cannot be charged to any job
    name = text_cell(cells["job_name"])
    if not name:
        return
    entry = tasks.get(name)
    if entry is None:
        entry = tasks[name] = _Tasks()
    if entry.problem is not None:
        return
    try:
        count = parse_number(cells["inst_num"], "inst_num", missing=1.0)
        share = parse_number(cells["plan_gpu"], "plan_gpu", missing=0.0)
        if count < 0 or share < 0:
            raise CellError("inst_num/plan_gpu: negative")
        start = parse_time(cells["start_time"], "start_time")
        end = parse_time(cells["end_time"], "end_time")
    except CellError as exc:
        entry.problem = f"task row {where}: {exc}"
        return
    entry.gpus += share / 100.0 * count
    if start is None or end is None:
        entry.timed = False
    else:
        entry.start, entry.end = min(entry.start, start), max(entry.end, end)


def _job(cells: dict[str, str], where: str, tasks: dict[str, _Tasks],
         workloads: dict[str, str]) -> SourceJob:
    key = text_cell(cells["job_name"])
    if not key:
        raise CellError("job_name: missing")
    entry = tasks.get(key)
    if entry is not None and entry.problem is not None:
        raise CellError(entry.problem)
    submit = parse_time(cells["start_time"], "start_time")
    end = parse_time(cells["end_time"], "end_time")
    if entry is not None and entry.timed and entry.start < math.inf:
        duration: float | None = entry.end - entry.start
    else:
        duration = None if submit is None or end is None else end - submit
    status = text_cell(cells["status"])
    user = text_cell(cells["user"])
    return SourceJob(
        key=key,
        user=user,
        tenant=user,
        submit=submit,
        duration=duration,
        gpus=math.nan if entry is None else entry.gpus,
        status=STATUSES.get(status, status.lower()),
        where=where,
        workload=workloads.get(text_cell(cells["inst_id"]), ""),
    )
