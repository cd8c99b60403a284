"""What every reader hands the import pipeline, and the cell parsers they share.

A reader turns one public format into SourceJob rows (or Malformed ones, located by file and
line) and decides nothing else: which rows are kept, and how they become Muri jobs, is the
pipeline's business, so every format follows the same rules and counters.
"""

from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Iterator, Sequence

from specs.limits import file_problem
from traces.errors import Problem, TraceError

# Progress callback: (bytes consumed so far, across all inputs)
Progress = Callable[[int], None]

# Statuses the readers map onto; anything else is kept verbatim (lower case).
OK, FAILED, KILLED = "ok", "failed", "killed"

# Beyond this many seconds (about year 33,000) a time is a broken cell, not a moment.
MAX_SECONDS = 1e12
_MISSING = frozenset({"", "none", "null", "nan", "nat", "na", "n/a", "-"})


@dataclass(slots=True)
class SourceJob:
    """One job as the public trace states it: absolute times in seconds, GPUs maybe fractional.

    None for submit or duration means the trace has no usable time for it.
    """

    key: str  # the trace's own job id
    user: str
    tenant: str
    submit: float | None
    duration: float | None
    gpus: float
    status: str
    where: str  # "file:line" for messages
    workload: str = ""
    priority: int = 0
    skipped_attempts: int = 0  # Philly: attempts without usable times, left out of the sum
    gpu_types: tuple[str, ...] = ()  # the GPU types it accepts; (): any
    gpu_mem_gb: float = 0.0  # GPU memory it needs on each GPU; 0: not stated
    # where `gpu_mem_gb` is a share of a GPU's memory, for the summary: (the type it is a
    # share of, "any" where the job names none; that memory in GB; whether it is assumed)
    share_of: tuple[str, float, bool] | tuple[()] = ()
    model: str = ""  # the catalogue model the log's own model name maps to; "": none named


@dataclass(frozen=True, slots=True)
class Malformed:
    """A row that cannot be read as a job; counted and shown, never fatal."""

    where: str
    message: str


Row = SourceJob | Malformed


class CellError(ValueError):
    """A cell that is not what its column promises; the message names the column."""


def is_missing(text: object) -> bool:
    if text is None:
        return True
    if text.__class__ is not str:
        return False
    cell = text.strip()  # type: ignore[attr-defined]
    return len(cell) <= 4 and cell.lower() in _MISSING


def parse_time(text: object, column: str) -> float | None:
    """Seconds since the epoch, from a number or an ISO date-time (naive = UTC); None when
    the cell says there is no time. Only differences of times matter to an import."""
    if is_missing(text):
        return None
    if isinstance(text, bool):
        raise CellError(f"{column}: not a time: {text!r}")
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        cell = str(text).strip()
        try:
            value = float(cell)
        except ValueError:
            try:
                moment = datetime.fromisoformat(cell)
            except ValueError:
                raise CellError(f"{column}: not a time: {_short(cell)}") from None
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=timezone.utc)
            return moment.timestamp()
    if math.isnan(value):
        return None
    if not abs(value) <= MAX_SECONDS:
        raise CellError(f"{column}: time out of range: {_short(str(text))}")
    return value


def parse_number(text: object, column: str, *, missing: float | None = None) -> float:
    """A finite number; `missing` (when given) stands in for an empty cell."""
    if is_missing(text):
        if missing is None:
            raise CellError(f"{column}: missing")
        return missing
    if isinstance(text, bool):
        raise CellError(f"{column}: not a number: {text!r}")
    try:
        value = float(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise CellError(f"{column}: not a number: {_short(str(text))}") from None
    if not math.isfinite(value):
        raise CellError(f"{column}: not a finite number: {_short(str(text))}")
    return value


def parse_seconds(text: object, column: str) -> float | None:
    """A length of time in seconds; None when the cell is empty."""
    if is_missing(text):
        return None
    value = parse_number(text, column)
    if not abs(value) <= MAX_SECONDS:
        raise CellError(f"{column}: out of range: {_short(str(text))}")
    return value


def _short(text: str, limit: int = 40) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


def text_cell(text: object) -> str:
    """A name cell: stripped text, empty for a missing one."""
    return "" if is_missing(text) else str(text).strip()


def open_problem(path: str | os.PathLike[str]) -> Problem | None:
    """Why `path` cannot be read as an input file, before any row is read."""
    label = os.fspath(path)
    problem = file_problem(label)
    return None if problem is None else Problem(label, None, None, problem)


def csv_jobs(inputs: Any, columns: Sequence[str], required: Sequence[str],
             progress: Progress, job: Callable[[dict[str, str], str], SourceJob]
             ) -> Iterator[Row]:
    """Each data row of every source CSV as `job(cells, "file:line")` gives it, or Malformed
    (a row of the wrong width, or a cell `job` rejects): one job per row formats read alike."""
    base = 0
    for path in inputs.sources:
        for line, cells in csv_rows(path, columns, progress, base, required=required):
            where = f"{path}:{line}"
            if isinstance(cells, str):
                yield Malformed(where, cells)
                continue
            try:
                yield job(cells, where)
            except CellError as exc:
                yield Malformed(where, str(exc))
        base += os.path.getsize(path)


def csv_rows(
    path: str | os.PathLike[str],
    columns: Sequence[str],
    progress: Progress,
    base: int,
    *,
    required: Sequence[str] | None = None,
) -> Iterator[tuple[int, dict[str, str] | str]]:
    """(line, {column: cell}) per data row of a CSV, streamed; (line, message) for a row of
    the wrong width. A first row naming the columns is a header (in any order, extra columns
    ignored); without one the documented column order applies (Alibaba ships its tables
    headerless). TraceError for a file that is unreadable, not UTF-8 or not CSV at all."""
    label = os.fspath(path)
    problem = open_problem(path)
    if problem is not None:
        raise TraceError([problem])
    need = tuple(columns if required is None else required)
    with open(label, "rb") as raw:
        text = _TextLines(raw)
        reader = csv.reader(text)
        index: dict[str, int] | None = None
        width = 0
        line = 0
        count = 0
        try:
            for row in reader:
                line = reader.line_num
                count += 1
                if count % 4096 == 0:
                    progress(base + text.position())
                if not any(cell.strip() for cell in row):
                    continue
                if index is None:
                    names = [cell.strip().lstrip("\ufeff") for cell in row]
                    if set(need) <= set(names):
                        index = {name: names.index(name) for name in columns if name in names}
                        width = len(names)
                        continue
                    if any(name in columns for name in names):
                        missing = ", ".join(n for n in need if n not in names)
                        raise TraceError([Problem(label, line, None,
                                                  f"header lacks column(s): {missing}")])
                    index = {name: i for i, name in enumerate(columns)}
                    width = len(columns)
                if len(row) != width:
                    yield line, f"expected {width} fields, got {len(row)}"
                    continue
                yield line, {name: row[i] for name, i in index.items()}
        except csv.Error as exc:
            raise TraceError([Problem(label, line + 1, None, f"malformed CSV: {exc}")]) from None
        except UnicodeDecodeError as exc:
            raise TraceError([Problem(label, line + 1, None,
                                      f"not UTF-8 text (byte 0x{exc.object[exc.start]:02x})")]
                             ) from None
        if index is None:
            raise TraceError([Problem(label, None, None, "file is empty")])
        progress(base + text.position())


class _TextLines:
    """UTF-8 lines of a binary file, with the byte position for the progress bar (a text
    file's tell() is unavailable while it is iterated)."""

    def __init__(self, raw):
        self._raw = raw
        self._first = True

    def __iter__(self):
        return self

    def __next__(self) -> str:
        data = self._raw.readline()
        if not data:
            raise StopIteration
        if self._first:
            self._first = False
            if data.startswith(b"\xef\xbb\xbf"):
                data = data[3:]
        return data.decode("utf-8")

    def position(self) -> int:
        return self._raw.tell()
