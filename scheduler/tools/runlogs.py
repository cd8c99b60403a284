"""Job logs of measured runs, read into one shape for calibration (scheduler/tools/calibrate.py).

Two sources:

* a testbed folder laid out as the published artifact's cluster experiment left it: the trace
  the cluster ran (`cluster_trace.csv`), its cluster spec (the one other `*.csv` with a spec's
  header) and, per policy, `<Policy>-job.csv`: per job submit, start (first), end, the wall
  seconds it held GPUs (`real_executed_time`, restarts included), its (re)starts
  (`job_counter`) and its `duration` alone;
* a live run's folder (RUN_DIR of this project's scheduler), read as `interlace-report` reads
  it.

Every figure is checked where it is read: a row whose number is missing, not finite or
negative, or whose end comes before its start, is refused in one line naming the file, the
line and the field.
"""
from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from specs.limits import MAX_TRACE_SECONDS

# the artifact's policy folders (and file prefixes) by this project's policy names
TESTBED_POLICIES: Mapping[str, str] = {
    "srtf": "SRTF", "srsf": "SRSF", "tiresias": "tiresias", "themis": "themis",
    "muri-s": "Muri-S", "muri-l": "Muri-L"}
_TESTBED_FIELDS = ("job_id", "num_gpu", "submit_time", "start_time", "end_time",
                   "real_executed_time", "duration", "job_counter")


class RunLogError(ValueError):
    """A log that cannot be read; the text is the one line the user sees."""


@dataclass(frozen=True, slots=True)
class JobRun:
    """One job of a measured run: when it came, first started and ended (seconds), the
    seconds it held GPUs (restart overheads included), how often it (re)started, and the
    seconds it needs alone (as the log states it)."""

    job_id: int
    num_gpu: int
    submit: float
    start: float
    end: float
    running: float
    starts: int
    alone: float

    @property
    def jct(self) -> float:
        return self.end - self.submit


@dataclass(frozen=True)
class RunLog:
    """One policy's measured run: its jobs by id, and where it was read from."""

    policy: str
    jobs: Mapping[int, JobRun]
    source: str


def _number(path: Path, line: int, row: Mapping[str, str], name: str) -> float:
    text = row.get(name)
    try:
        value = float(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise RunLogError(f"{path}:{line}: {name}: not a number: {text!r}") from None
    if not math.isfinite(value) or not 0 <= value <= MAX_TRACE_SECONDS:
        raise RunLogError(f"{path}:{line}: {name}: must be a finite number in "
                          f"[0, {MAX_TRACE_SECONDS:g}], got {text!r}")
    return value


def read_testbed_jobs(path: Path, policy: str) -> RunLog:
    """`<Policy>-job.csv` of the artifact's cluster experiment."""
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            missing = [n for n in _TESTBED_FIELDS if n not in (reader.fieldnames or ())]
            if missing:
                raise RunLogError(f"{path}: no column {', '.join(missing)} (a testbed job log "
                                  f"has {', '.join(_TESTBED_FIELDS)})")
            jobs: dict[int, JobRun] = {}
            for line, row in enumerate(reader, start=2):
                v = {n: _number(path, line, row, n) for n in _TESTBED_FIELDS}
                job_id = int(v["job_id"])
                if v["end_time"] < v["start_time"] or v["start_time"] < v["submit_time"]:
                    raise RunLogError(f"{path}:{line}: job {job_id}: submit <= start <= end "
                                      f"does not hold")
                if job_id in jobs:
                    raise RunLogError(f"{path}:{line}: job {job_id} logged twice")
                jobs[job_id] = JobRun(job_id, int(v["num_gpu"]), v["submit_time"],
                                      v["start_time"], v["end_time"], v["real_executed_time"],
                                      max(int(v["job_counter"]), 1), v["duration"])
    except OSError as err:
        raise RunLogError(f"{path}: {err.strerror or err}") from None
    if not jobs:
        raise RunLogError(f"{path}: no jobs")
    return RunLog(policy, jobs, str(path))


def find_testbed(folder: Path) -> tuple[Path, Path, dict[str, Path]]:
    """The trace, the spec and each policy's job log of a testbed folder."""
    if not folder.is_dir():
        raise RunLogError(f"{folder}: not a folder")
    trace = folder / "cluster_trace.csv"
    if not trace.is_file():
        raise RunLogError(f"{folder}: no cluster_trace.csv (the trace the testbed ran)")
    specs = []
    for candidate in sorted(folder.glob("*.csv")):
        with open(candidate, newline="") as f:
            if f.readline().startswith("num_switch,"):
                specs.append(candidate)
    if len(specs) != 1:
        raise RunLogError(f"{folder}: needs one cluster spec CSV (header num_switch,...), "
                          f"found {len(specs)}")
    logs = {name: folder / f"{prefix}-job.csv" for name, prefix in TESTBED_POLICIES.items()
            if (folder / f"{prefix}-job.csv").is_file()}
    if not logs:
        raise RunLogError(f"{folder}: no <Policy>-job.csv of "
                          f"{', '.join(TESTBED_POLICIES.values())}")
    return trace, specs[0], logs


def write_testbed_jobs(path: Path, outcomes) -> None:
    """Finished JobOutcomes as a `<Policy>-job.csv` (the columns read_testbed_jobs reads), so
    a simulated or live run can stand where a testbed's log does."""
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(_TESTBED_FIELDS)
        for o in outcomes:
            if o.end is None:
                continue
            out.writerow((o.job_id, o.num_gpu, o.submit, o.start, o.end,
                          o.running if o.running is not None else o.end - o.start,
                          o.alone if o.alone is not None else 0.0, o.starts))


def read_live_run(run_dir: Path) -> RunLog:
    """A live run of this project's scheduler, as interlace-report reads it."""
    from scheduler.tools.report import ReportError, load_run

    try:
        live = load_run(run_dir)
    except ReportError as err:
        raise RunLogError(str(err)) from None
    jobs = {}
    for o in live.result().outcomes:
        if o.end is None or o.start is None:
            continue
        running = o.running if o.running is not None else o.end - o.start
        jobs[o.job_id] = JobRun(o.job_id, o.num_gpu, o.submit, o.start, o.end, running,
                                max(o.starts, 1), o.alone if o.alone is not None else 0.0)
    if not jobs:
        raise RunLogError(f"{run_dir}: no finished job")
    return RunLog(live.policy, jobs, str(run_dir))
