"""Helios (SenseTime, SC'21) `cluster_log.csv`, one file per cluster:
job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue.

Times are date-times (or epoch seconds); run time is the `duration` column when present,
else end - start. `gpu_num` 0 is a CPU job. State COMPLETED is ok; FAILED, TIMEOUT and
NODE_FAIL are failed; CANCELLED is killed.
"""

from __future__ import annotations

from typing import Iterator

from traces.importers.source import (
    FAILED, KILLED, OK, CellError, Progress, Row, SourceJob, csv_jobs, parse_number,
    parse_seconds, parse_time, text_cell,
)

COLUMNS = ("job_id", "user", "vc", "gpu_num", "cpu_num", "node_num", "state", "submit_time",
           "start_time", "end_time", "duration", "queue")
REQUIRED = ("job_id", "gpu_num", "submit_time", "start_time", "end_time")
STATES = {"COMPLETED": OK, "FAILED": FAILED, "TIMEOUT": FAILED, "NODE_FAIL": FAILED,
          "CANCELLED": KILLED}


def read(inputs, progress: Progress) -> Iterator[Row]:
    return csv_jobs(inputs, COLUMNS, REQUIRED, progress, _job)


def _job(cells: dict[str, str], where: str) -> SourceJob:
    key = text_cell(cells["job_id"])
    if not key:
        raise CellError("job_id: missing")
    gpus = parse_number(cells["gpu_num"], "gpu_num")
    submit = parse_time(cells["submit_time"], "submit_time")
    duration = None
    if "duration" in cells:
        duration = parse_seconds(cells["duration"], "duration")  # seconds, maybe empty
    if duration is None:
        start = parse_time(cells["start_time"], "start_time")
        end = parse_time(cells["end_time"], "end_time")
        duration = None if start is None or end is None else end - start
    state = text_cell(cells.get("state", "")).upper()
    return SourceJob(
        key=key,
        user=text_cell(cells.get("user", "")),
        tenant=text_cell(cells.get("vc", "")),
        submit=submit,
        duration=duration,
        gpus=gpus,
        status=STATES.get(state, state.lower()),
        where=where,
    )
