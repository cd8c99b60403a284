"""One entry point for checking a trace, whether it is a file or records already in memory."""

from __future__ import annotations

import os
from typing import Container, Iterable

from specs.fit import Fit
from specs.limits import MAX_RESTARTS
from traces._checks import Value, check_job, fold_too_large
from traces.errors import Problem
from traces.models import MODELS
from traces.muri_csv import parse_trace
from traces.record import JobRecord

# what an in-memory problem names as its "file"; its line is the 1-based record position
RECORDS_LABEL = "<records>"


def validate(
    records_or_path: Iterable[JobRecord] | str | os.PathLike[str],
    *,
    spec: object | None = None,
    known_models: Container[str] | None = None,
) -> list[Problem]:
    """Every problem found (empty when clean); never raises for bad input.

    A path is checked exactly as read_trace would check it, and a file without a job is a
    problem (nothing to schedule; interlace-sim refuses it too). `spec` (a ClusterSpec, or
    anything with `total_gpus` and maybe `gpu_mem_gb`) adds the check that some pool of the
    cluster holds each job (specs/fit.py); `known_models` defaults to MODELS.
    """
    if isinstance(records_or_path, (str, os.PathLike)):
        records, problems = parse_trace(records_or_path, spec=spec, known_models=known_models)
        if not records and not problems:
            problems.append(no_jobs_problem(records_or_path))
        return problems
    known = MODELS if known_models is None else known_models
    fit = None if spec is None else Fit(spec)
    problems: list[Problem] = []
    first_position: dict[object, int] = {}
    for position, record in enumerate(records_or_path, start=1):
        problems.extend(_check_record(record, position, known, fit))
        job_id = getattr(record, "job_id", None)
        try:
            first = first_position.setdefault(job_id, position)
        except TypeError:  # unhashable id: already reported as not an integer
            continue
        if first != position:
            problems.append(
                Problem(
                    RECORDS_LABEL, position, "job_id",
                    f"duplicate job_id {job_id!r} (first at record {first})",
                )
            )
    return fold_too_large(problems, fit)


def no_jobs_problem(path: str | os.PathLike[str]) -> Problem:
    """A trace file with a header and no job: nothing to schedule, so every tool (validate,
    interlace-sim) refuses it with this same line rather than one passing what another refuses."""
    return Problem(os.fspath(path), None, None, "no jobs (the file has a header and no rows)")


def _check_record(
    record: JobRecord, position: int, known: Container[str], fit: Fit | None = None,
) -> list[Problem]:
    values: dict[str, Value] = {}
    for name in (
        "job_id", "num_gpu", "submit_time", "iterations", "model_name", "batch_size",
        "duration", "interval", "iteration_time", "priority", "gpu_mem_gb", "gpu_types",
        "tenant", "priority_class",
    ):
        value = getattr(record, name, None)
        values[name] = (value, repr(value))

    problems: list[Problem] = []
    stage_fields: list[str] = []
    stages = getattr(record, "stage_times", None)
    if not isinstance(stages, (tuple, list)) or len(stages) not in (3, 4):
        count = len(stages) if isinstance(stages, (tuple, list)) else type(stages).__name__
        problems.append(
            Problem(RECORDS_LABEL, position, "stage_times", f"must hold 3 or 4 times, got {count}")
        )
    else:
        for index, value in enumerate(stages):
            name = f"stage_times[{index}]"
            stage_fields.append(name)
            values[name] = (value, repr(value))

    for field, message in check_job(values, stage_fields, known_models=known, fit=fit):
        problems.append(Problem(RECORDS_LABEL, position, field, message))
    restarts = getattr(record, "max_restarts", None)
    if restarts is not None and (isinstance(restarts, bool) or not isinstance(restarts, int)
                                 or not 0 <= restarts <= MAX_RESTARTS):
        problems.append(Problem(RECORDS_LABEL, position, "max_restarts",
                                f"must be an integer in [0, {MAX_RESTARTS}], got {restarts!r}"))
    return problems
