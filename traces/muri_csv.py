"""Reader and writer for Muri's trace CSV (times in milliseconds on disk, seconds in memory).

Numbers are parsed as decimals and scaled by 10**3 exactly, and written back as the shortest
decimal that names the same float, so read_trace(write_trace(x)) == x bit for bit.
"""

from __future__ import annotations

import csv
import io
import math
import os
from decimal import Decimal, InvalidOperation
from typing import Container, Iterable, Sequence

from specs.fit import Fit
from specs.gpu_types import parse_types
from specs.limits import InputFileError, read_regular
from traces._checks import (
    INT_FIELDS,
    REQUIRED_COLUMNS,
    STAGE_COLUMNS,
    TIME_FIELDS,
    Value,
    check_job,
    fold_too_large,
)
from traces.errors import Problem, TraceError
from traces.models import MODELS
from traces.record import NAMES, JobRecord

PathLike = str | os.PathLike[str]

# Beyond this many decimal digits an integer column is certainly nonsense; refusing it early
# also keeps a hostile "1e999999" from turning into a million-digit int.
_MAX_INT_DIGITS = 18
# A time (ms) with a larger decimal exponent is beyond any float anyway; refusing it before
# scaling keeps "1E1000010" from overflowing Decimal's context (decimal.Overflow, not ours).
_MAX_TIME_EXPONENT = 400


def _parse_number(text: str, *, integer: bool) -> tuple[object, str | None]:
    """(value, None) or (None, message). Integers stay exact; times become seconds."""
    shown = repr(text)
    if not text.strip():
        return None, "must not be empty"
    try:
        number = Decimal(text)
    except InvalidOperation:
        return None, f"must be a number, got {shown}"
    if not number.is_finite():
        return None, f"must be a finite number, got {shown}"
    if integer:
        if number.adjusted() > _MAX_INT_DIGITS:
            return None, f"is out of range (more than {_MAX_INT_DIGITS} digits), got {shown}"
        if number == number.to_integral_value():
            return int(number), None
        return float(number), None  # the shared check rejects it with its own wording
    if number.adjusted() > _MAX_TIME_EXPONENT:  # scaleb would overflow the decimal context
        return None, f"must be a finite number, got {shown}"
    seconds = float(number.scaleb(-3))
    if seconds in (float("inf"), float("-inf")):
        return None, f"must be a finite number, got {shown}"
    return seconds, None


def _format_ms(seconds: float) -> str:
    """Shortest decimal text (in ms) that reads back as exactly `seconds`."""
    if seconds < 1e9 and math.copysign(1.0, seconds) > 0:
        # The common case (whole or tenth milliseconds) without Decimal, which a
        # million-row import would otherwise spend most of its writing time in. Below 1e9 s
        # a float's spacing is far under 0.1 ms, so no shorter decimal names the same
        # float: this is exactly the text of the general path below.
        tenths = float(seconds) * 10000
        if tenths.is_integer() and int(tenths) / 10000 == seconds:
            whole, tenth = divmod(int(tenths), 10)
            return f"{whole}.{tenth}" if tenth else str(whole)
    number = Decimal(repr(float(seconds)))
    if not number.is_finite():
        raise ValueError(f"cannot write a non-finite time: {seconds!r}")
    number = number.scaleb(3)
    return format(number, "f") if -20 <= number.adjusted() <= 20 else str(number)


def csv_milliseconds(seconds: float) -> float:
    """The float that the CSV's millisecond text for `seconds` names (what `float(cell)` of
    the written trace gives), for arithmetic done in milliseconds the way the artifact does."""
    if seconds < 1e9 and math.copysign(1.0, seconds) > 0:
        # _format_ms's common case, without the text: it writes n tenths of a millisecond
        # as a decimal, and float() of that decimal is n / 10 correctly rounded, as Python's
        # division of two integers is
        tenths = float(seconds) * 10000
        if tenths.is_integer() and int(tenths) / 10000 == seconds:
            return int(tenths) / 10
    return float(_format_ms(seconds))


def _read_text(path: PathLike, label: str) -> tuple[str | None, Problem | None]:
    try:
        data = read_regular(path)
    except InputFileError as exc:
        return None, Problem(label, None, None, str(exc))
    try:
        return data.decode("utf-8-sig"), None
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        return None, Problem(
            label, line, None, f"not UTF-8 text (byte 0x{data[exc.start]:02x} cannot be decoded)"
        )


def parse_trace(
    path: PathLike,
    *,
    spec: object | None = None,
    known_models: Container[str] | None = None,
) -> tuple[list[JobRecord], list[Problem]]:
    """Records of the clean rows plus every problem in the file: the core of read and validate."""
    label = os.fspath(path)
    known = MODELS if known_models is None else known_models
    fit = None if spec is None else Fit(spec)

    text, problem = _read_text(path, label)
    if problem is not None:
        return [], [problem]
    assert text is not None

    problems: list[Problem] = []
    records: list[JobRecord] = []
    reader = csv.reader(io.StringIO(text, newline=""))
    columns: dict[str, int] | None = None
    width = 0
    first_line_of_id: dict[int, int] = {}
    last_line = 0
    try:
        for row in reader:
            line, last_line = last_line + 1, reader.line_num
            if not any(cell.strip() for cell in row):
                continue
            if columns is None:
                width = len(row)
                columns, header_problems = _read_header(row, label, line)
                problems.extend(header_problems)
                continue
            if len(row) != width:
                problems.append(
                    Problem(label, line, None, f"expected {width} fields, got {len(row)}")
                )
                continue
            record, job_id, row_problems = _read_row(
                row, columns, label, line, known=known, fit=fit,
            )
            problems.extend(row_problems)
            if job_id is not None:
                first = first_line_of_id.setdefault(job_id, line)
                if first != line:
                    problems.append(
                        Problem(
                            label, line, "job_id",
                            f"duplicate job_id {job_id} (first on line {first})",
                        )
                    )
                    continue
            if record is not None:
                records.append(record)
    except csv.Error as exc:
        problems.append(Problem(label, last_line + 1, None, f"malformed CSV: {exc}"))
    if columns is None:
        problems.append(Problem(label, None, None, "file is empty (expected a header row)"))
    return records, fold_too_large(problems, fit)


def _read_header(
    row: Sequence[str], label: str, line: int
) -> tuple[dict[str, int], list[Problem]]:
    columns: dict[str, int] = {}
    problems: list[Problem] = []
    for index, raw in enumerate(row):
        name = raw.strip()
        if name in columns:
            problems.append(Problem(label, line, name, "duplicate column"))
        elif name:
            columns[name] = index
    for name in REQUIRED_COLUMNS:
        if name not in columns:
            problems.append(Problem(label, line, name, "missing column"))
    return columns, problems


def _read_row(
    row: Sequence[str],
    columns: dict[str, int],
    label: str,
    line: int,
    *,
    known: Container[str],
    fit: Fit | None = None,
) -> tuple[JobRecord | None, int | None, list[Problem]]:
    """(record or None when unusable, job id when readable, problems in column order)."""
    problems: list[Problem] = []
    values: dict[str, Value] = {}

    stage_fields = [c for c in STAGE_COLUMNS[:3] if c in columns]
    if "resource_time_3" in columns and row[columns["resource_time_3"]].strip():
        stage_fields.append("resource_time_3")  # an empty 4th cell means a 3-stage job

    for name in (*INT_FIELDS, *TIME_FIELDS, *stage_fields, "priority"):
        if name not in columns:
            continue
        text = row[columns[name]]
        integer = name in INT_FIELDS or name == "priority"
        value, message = _parse_number(text, integer=integer)
        if message:
            problems.append(Problem(label, line, name, message))
        else:
            values[name] = (value, repr(text.strip()))
    if "model_name" in columns:
        text = row[columns["model_name"]]
        values["model_name"] = (text.strip(), repr(text))
    if "gpu_mem_gb" in columns and row[columns["gpu_mem_gb"]].strip():  # empty: not stated
        text = row[columns["gpu_mem_gb"]]
        try:
            values["gpu_mem_gb"] = (float(text), repr(text.strip()))
        except ValueError:
            problems.append(Problem(label, line, "gpu_mem_gb",
                                    f"must be a number of GB, got {text.strip()!r}"))
    if "gpu_type" in columns and row[columns["gpu_type"]].strip():  # empty: any type
        text = row[columns["gpu_type"]]
        types, message = parse_types(text)
        if message:
            problems.append(Problem(label, line, "gpu_type", message))
        else:
            values["gpu_type"] = (types, repr(text.strip()))

    for name in NAMES:
        if name in columns and row[columns[name]].strip():  # empty: none named
            text = row[columns[name]]
            values[name] = (text.strip(), repr(text))

    for field, message in check_job(values, stage_fields, known_models=known, fit=fit):
        problems.append(Problem(label, line, field, message))

    def rank(problem: Problem) -> int:
        return columns.get((problem.field or "").split("..")[0], len(columns))

    problems.sort(key=rank)

    job_id = values.get("job_id", (None, ""))[0]
    if not isinstance(job_id, int) or any(p.field == "job_id" for p in problems):
        job_id = None
    needed = (*REQUIRED_COLUMNS[:9], *stage_fields)
    if problems or len(stage_fields) < 3 or not all(n in values for n in needed):
        return None, job_id, problems
    record = JobRecord(
        job_id=values["job_id"][0],  # type: ignore[arg-type]
        num_gpu=values["num_gpu"][0],  # type: ignore[arg-type]
        submit_time=values["submit_time"][0],  # type: ignore[arg-type]
        iterations=values["iterations"][0],  # type: ignore[arg-type]
        model_name=values["model_name"][0],  # type: ignore[arg-type]
        batch_size=values["batch_size"][0],  # type: ignore[arg-type]
        duration=values["duration"][0],  # type: ignore[arg-type]
        interval=values["interval"][0],  # type: ignore[arg-type]
        iteration_time=values["iteration_time"][0],  # type: ignore[arg-type]
        stage_times=tuple(values[n][0] for n in stage_fields),  # type: ignore[misc]
        priority=values["priority"][0] if "priority" in values else 0,  # type: ignore[arg-type]
        gpu_mem_gb=float(values["gpu_mem_gb"][0]) if "gpu_mem_gb" in values else 0.0,  # type: ignore[arg-type]
        gpu_types=values["gpu_type"][0] if "gpu_type" in values else (),  # type: ignore[arg-type]
        **{name: values[name][0] for name in NAMES if name in values},  # type: ignore[arg-type]
    )
    return record, job_id, problems


def read_trace(
    path: PathLike,
    spec: object | None = None,
    *,
    known_models: Container[str] | None = None,
) -> list[JobRecord]:
    """All jobs of a Muri CSV in file order, or TraceError listing every problem at once.

    `spec` (a ClusterSpec, or anything with `total_gpus`) adds the check that some pool of
    the cluster holds each job (specs/fit.py);
    `known_models` defaults to the MODELS catalogue.
    """
    records, problems = parse_trace(path, spec=spec, known_models=known_models)
    if problems:
        raise TraceError(problems)
    return records


def write_trace(path: PathLike, records: Iterable[JobRecord]) -> None:
    """Write jobs in Muri's schema (ms); a resource_time_3 column appears only when needed."""
    records = list(records)
    for record in records:
        _check_stages(record)
    four = any(len(r.stage_times) == 4 for r in records)
    memory = any(r.gpu_mem_gb for r in records)
    types = any(r.gpu_types for r in records)
    names = [name for name in NAMES if any(getattr(r, name) for r in records)]
    with open(path, "w", encoding="utf-8", newline="") as out:
        writer = TraceWriter(out, four_stages=four, memory=memory, types=types, extra=names)
        for r in records:
            writer.write(r, [getattr(r, name) for name in names])


def _check_stages(record: JobRecord) -> None:
    if len(record.stage_times) not in (3, 4):
        raise ValueError(
            f"job {record.job_id}: stage_times must have 3 or 4 values, "
            f"got {len(record.stage_times)}"
        )


class TraceWriter:
    """Writes Muri rows one at a time to an open text file, so a trace of millions of jobs
    never has to be held in memory; `extra` names columns after `priority` for facts a
    trace carries beyond Muri's schema, such as user and tenant (the reader takes `tenant`
    and ignores the rest)."""

    def __init__(self, out, *, four_stages: bool = False, memory: bool = False,
                 types: bool = False, extra: Sequence[str] = ()):
        self._stage_columns = STAGE_COLUMNS if four_stages else STAGE_COLUMNS[:3]
        self._memory = memory  # a gpu_mem_gb column (GB; empty where a job states none)
        self._types = types  # a gpu_type column (T or T|T...; empty where a job takes any)
        self._extra = tuple(extra)
        self._writer = csv.writer(out, lineterminator="\n")
        self._writer.writerow([*REQUIRED_COLUMNS[:9], *self._stage_columns, "priority",
                               *(["gpu_mem_gb"] if memory else []),
                               *(["gpu_type"] if types else []), *self._extra])

    def write(self, r: JobRecord, extra: Sequence[str] = ()) -> None:
        _check_stages(r)
        if len(r.stage_times) > len(self._stage_columns):
            raise ValueError(f"job {r.job_id}: 4 stage times in a 3-stage trace")
        if len(extra) != len(self._extra):
            raise ValueError(f"job {r.job_id}: expected {len(self._extra)} extra values")
        if r.gpu_mem_gb and not self._memory:
            raise ValueError(f"job {r.job_id}: GPU memory in a trace without gpu_mem_gb")
        if r.gpu_types and not self._types:
            raise ValueError(f"job {r.job_id}: GPU types in a trace without gpu_type")
        memory = ([repr(r.gpu_mem_gb) if r.gpu_mem_gb else ""] if self._memory else [])
        types = ["|".join(r.gpu_types)] if self._types else []
        stages = [_format_ms(t) for t in r.stage_times]
        stages += [""] * (len(self._stage_columns) - len(stages))
        self._writer.writerow(
            [
                str(r.job_id),
                str(r.num_gpu),
                _format_ms(r.submit_time),
                str(r.iterations),
                r.model_name,
                str(r.batch_size),
                _format_ms(r.duration),
                _format_ms(r.interval),
                _format_ms(r.iteration_time),
                *stages,
                str(r.priority),
                *memory,
                *types,
                *extra,
            ]
        )
