"""Gavel's trace format (stanford-futuredata/gavel, `scheduler/traces/`): one job a line,
seven tab-separated fields and no header: job_type, command, num_steps_arg, needs_data_dir,
total_steps, arrival_time (s), scale_factor (GPUs); or Gavel's later ten: job_type, command,
working_directory, num_steps_arg, needs_data_dir, total_steps, scale_factor,
priority_weight, SLO, arrival_time (priority and SLO are not read).

A job's run time is its total steps at its model's rate alone on one V100 (gavel_models.py);
its model is its job type's family's profile. Where SRC is a folder of `*.trace` files or
several files, each file is one virtual cluster and its name (less `.trace`) the job's
tenant, as Gavel splits Philly's log; a single file names no tenant.

The clock: each file's arrival times are kept as they are. Gavel's per-VC files all start at
0 and state no absolute time, so the VCs' offsets within Philly's log are lost; Gavel cut
them from the same log, and starting every VC at 0 is the one alignment the files allow.
"""

from __future__ import annotations

import os
from typing import Iterator

from specs.limits import MAX_TRACE_SECONDS
from traces.errors import Problem, TraceError
from traces.importers.gavel_models import STEPS_PER_S, family_of
from traces.importers.source import (
    MAX_SECONDS, OK, CellError, Malformed, Progress, Row, SourceJob, open_problem,
    parse_number,
)

FIELDS = ("job_type", "command", "num_steps_arg", "needs_data_dir", "total_steps",
          "arrival_time", "scale_factor")
LATER = ("job_type", "command", "working_directory", "num_steps_arg", "needs_data_dir",
         "total_steps", "scale_factor", "priority_weight", "SLO", "arrival_time")
# fields read, by the form's width: (total_steps, arrival_time, scale_factor)
READ = {len(FIELDS): (4, 5, 6), len(LATER): (5, 9, 6)}
SUFFIX = ".trace"
CLOCK = ("each file's arrival times as they are: Gavel's per-VC files all start at 0 and "
         "state no absolute time, so every VC starts at 0")


def read(inputs, progress: Progress) -> Iterator[Row]:
    base = 0
    for path in inputs.sources:
        tenant = path.name.removesuffix(SUFFIX) if inputs.tenant_per_file else ""
        for line, cells in _lines(path, progress, base):
            where = f"{path}:{line}"
            try:
                yield _job(cells, where, f"{tenant or path.name.removesuffix(SUFFIX)}:{line}",
                           tenant)
            except CellError as exc:
                yield Malformed(where, str(exc))
        base += os.path.getsize(path)


def _lines(path, progress: Progress, base: int) -> Iterator[tuple[int, list[str]]]:
    """(line number, fields) per non-blank line; TraceError for a file that is not text."""
    label = os.fspath(path)
    problem = open_problem(path)
    if problem is not None:
        raise TraceError([problem])
    line = 0
    with open(label, "rb") as raw:
        for data in raw:
            line += 1
            if line % 4096 == 0:
                progress(base + raw.tell())
            try:
                text = data.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as exc:
                raise TraceError([Problem(label, line, None,
                                          f"not UTF-8 text (byte 0x{exc.object[exc.start]:02x})")]
                                 ) from None
            if text.strip():
                yield line, text.split("\t")


def _job(cells: list[str], where: str, key: str, tenant: str) -> SourceJob:
    if len(cells) not in READ:
        raise CellError(f"expected {len(FIELDS)} tab-separated fields "
                        f"({', '.join(FIELDS)}) or Gavel's later {len(LATER)}, got {len(cells)}")
    at_steps, at_arrival, at_gpus = READ[len(cells)]
    job_type = cells[0].strip()
    rate = STEPS_PER_S.get(job_type)
    try:
        model = family_of(job_type)[1]
    except KeyError:
        rate = None
    if rate is None:
        raise CellError(f"job_type: unknown Gavel model {job_type[:60]!r} "
                        f"(traces/importers/gavel_models.py has {len(STEPS_PER_S)})")
    steps = _at_least_zero(cells[at_steps], "total_steps")
    if steps / rate > MAX_TRACE_SECONDS:
        raise CellError(f"total_steps: {cells[at_steps].strip()[:40]} steps of {job_type} run "
                        f"{steps / rate:.3g} s, past the traces' limit of "
                        f"{MAX_TRACE_SECONDS:g} s")
    arrival = _at_least_zero(cells[at_arrival], "arrival_time")
    gpus = parse_number(cells[at_gpus], "scale_factor")
    if gpus < 0:
        raise CellError(f"scale_factor: a GPU count below zero: {cells[at_gpus].strip()[:40]!r}")
    return SourceJob(key=key, user="", tenant=tenant, submit=arrival, duration=steps / rate,
                     gpus=gpus, status=OK, where=where, workload=job_type, model=model)


def _at_least_zero(cell: str, field: str) -> float:
    value = parse_number(cell, field)
    if not 0 <= value <= MAX_SECONDS:
        raise CellError(f"{field}: must be in [0, {MAX_SECONDS:g}], got {cell.strip()[:40]!r}")
    return value
