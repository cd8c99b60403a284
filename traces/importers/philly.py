"""Microsoft Philly (ATC'19) `cluster_job_log`: one JSON list of jobs, each
{status, vc, jobid, user, submitted_time, attempts: [{start_time, end_time,
detail: [{ip, gpus: [...]}]}]}.

Run time is the sum over attempts of end - start; an attempt with a missing or None time is
left out of the sum (and counted), and a job with no timed attempt has no run time. An attempt
that ends before it starts makes the run time negative. GPUs are the most GPU ids any attempt
held across its machines. Status Pass is ok, Failed failed, Killed killed.
"""

from __future__ import annotations

from typing import Iterator

from traces.importers.jsonstream import iter_array
from traces.importers.source import (
    FAILED, KILLED, OK, CellError, Malformed, Progress, Row, SourceJob, parse_time, text_cell,
)

STATUSES = {"Pass": OK, "Failed": FAILED, "Killed": KILLED}


def read(inputs, progress: Progress) -> Iterator[Row]:
    base = 0
    for path in inputs.sources:
        for line, element in iter_array(path, progress, base):
            where = f"{path}:{line}"
            try:
                yield _job(element, where)
            except CellError as exc:
                yield Malformed(where, str(exc))
        base += path.stat().st_size


def _job(element: object, where: str) -> SourceJob:
    if not isinstance(element, dict):
        raise CellError(f"a job must be a JSON object, got {type(element).__name__}")
    key = element.get("jobid")
    if not isinstance(key, (str, int)) or isinstance(key, bool) or not str(key).strip():
        raise CellError("jobid: missing")
    attempts = element.get("attempts", [])
    if attempts is None:
        attempts = []
    if not isinstance(attempts, list):
        raise CellError("attempts: not a list")
    total, timed, skipped, gpus, negative = 0.0, 0, 0, 0, None
    for number, attempt in enumerate(attempts):
        if not isinstance(attempt, dict):
            raise CellError(f"attempts[{number}]: not an object")
        gpus = max(gpus, _gpu_count(attempt.get("detail"), number))
        start = parse_time(_cell(attempt.get("start_time")), f"attempts[{number}].start_time")
        end = parse_time(_cell(attempt.get("end_time")), f"attempts[{number}].end_time")
        if start is None or end is None:
            skipped += 1
            continue
        if end < start and negative is None:
            negative = end - start
        total += end - start
        timed += 1
    status = text_cell(_cell(element.get("status")))
    return SourceJob(
        key=str(key).strip(),
        user=text_cell(_cell(element.get("user"))),
        tenant=text_cell(_cell(element.get("vc"))),
        submit=parse_time(_cell(element.get("submitted_time")), "submitted_time"),
        duration=negative if negative is not None else (total if timed else None),
        gpus=float(gpus),
        status=STATUSES.get(status, status.lower()),
        where=where,
        skipped_attempts=skipped,
    )


def _cell(value: object) -> object:
    """A JSON scalar as the shared parsers take it; a list or object is malformed."""
    if isinstance(value, (dict, list)):
        raise CellError(f"expected a single value, got a JSON {type(value).__name__}")
    return value


def _gpu_count(detail: object, number: int) -> int:
    if detail is None:
        return 0
    if not isinstance(detail, list):
        raise CellError(f"attempts[{number}].detail: not a list")
    count = 0
    for machine in detail:
        if not isinstance(machine, dict):
            raise CellError(f"attempts[{number}].detail: a machine entry is not an object")
        ids = machine.get("gpus", [])
        if ids is None:
            continue
        if not isinstance(ids, list):
            raise CellError(f"attempts[{number}].detail.gpus: not a list")
        count += len(ids)
    return count
