"""A sweep's folder: runs.csv (a row per finished run), runs/<key>.json (what the plots of
that run need) and a lock, so two sweeps never write one folder at once. A sweep over
tenants files keys its runs by the file too, and adds tenants.csv: a row per run and tenant,
written whole from the runs' detail files (so it always matches runs.csv).

A row is appended and flushed when its run finishes, after its detail file is in place: a
row always has its detail, and a killed sweep loses only the runs in flight. A row cut short
by a kill mid-write (no newline at the end of the file) is dropped when the folder is opened.
"""
from __future__ import annotations

import csv
import fcntl
import hashlib
import io
import json
import os
import re
from pathlib import Path
from typing import Iterator

from scheduler.tools.sweep_runs import KEY, NONE, TENANTS

COLUMNS = ("trace", "policy", "preset", "seed", "spec", "jobs", "avg_jct_s", "p50_jct_s",
           "p99_jct_s", "makespan_s", "avg_queueing_s", "gpu_utilisation", "preemptions",
           "rounds", "mean_group_size", "group_efficiency", "wall_s")
# with --tenants: the tenants file after the seed, and Jain's index of each tenant's
# GPU-hours used per GPU-hour owed at the end
TENANT_COLUMNS = (*KEY, TENANTS, *COLUMNS[len(KEY):], "fairness")
CSV_NAME = "runs.csv"
TENANTS_CSV = "tenants.csv"
# tenants.csv's columns after the run's key: (column, the field of TenantUsage.summary)
PER_TENANT = (("tenant", None), ("jobs", "jobs"), ("finished", "finished"),
              ("avg_jct_s", "avg_jct"), ("avg_queueing_s", "avg_queueing"),
              ("gpu_hours", "gpu_hours"), ("quota_gpu_hours", "quota_gpu_hours"),
              ("borrowed_gpu_hours", "borrowed_gpu_hours"), ("reclaims", "reclaims"),
              ("reclaimed_gpu_hours", "reclaimed_gpu_hours"), ("peak_gpus", "peak_gpus"),
              ("quota", "quota"), ("borrow_limit", "borrow_limit"))


class StoreError(Exception):
    """The folder cannot be used; the text is the one line the user sees."""


def detail_name(key) -> str:
    """A file name for a run's key: readable, and distinct for distinct keys."""
    digest = hashlib.sha1("\0".join(key).encode()).hexdigest()[:8]
    trace, policy, preset, seed, *tenants = key
    readable = "_".join((Path(trace).stem, policy, preset, f"s{seed}",
                         *(Path(t).stem for t in tenants)))
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", readable) + f"_{digest}.json"


class Store:
    def __init__(self, folder: Path, tenants: bool = False):
        self.folder = Path(folder)
        self.tenants = tenants
        self.columns = TENANT_COLUMNS if tenants else COLUMNS
        self.key = (*KEY, TENANTS) if tenants else KEY
        self.csv = self.folder / CSV_NAME
        self.runs = self.folder / "runs"
        self._lock = None
        self._out = None

    def open(self) -> dict[tuple, dict]:
        """Lock the folder and return the rows already there, by key."""
        try:
            self.runs.mkdir(parents=True, exist_ok=True)
            self._lock = open(self.folder / ".lock", "w")
        except OSError as err:
            raise StoreError(f"{self.folder}: cannot write ({err.strerror or err})") from None
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise StoreError(f"{self.folder}: another sweep is writing it") from None
        rows = self._read()
        new = not self.csv.exists() or self.csv.stat().st_size == 0
        self._out = open(self.csv, "a", newline="", encoding="utf-8")
        if new:
            self._write_line(self.columns)
        return rows

    def _read(self) -> dict[tuple, dict]:
        if not self.csv.exists():
            return {}
        data = self.csv.read_bytes()
        if data and not data.endswith(b"\n"):  # the last row was cut short by a kill
            data = data[:data.rfind(b"\n") + 1]
            with open(self.csv, "r+b") as fh:
                fh.truncate(len(data))
        reader = csv.DictReader(io.StringIO(data.decode("utf-8")))
        found = None if reader.fieldnames is None else tuple(reader.fieldnames)
        if found == (COLUMNS if self.tenants else TENANT_COLUMNS):
            raise StoreError(
                f"{self.csv}: holds a sweep without --tenants (no per-tenant figures to "
                f"compare); use another folder" if self.tenants else
                f"{self.csv}: holds a sweep with --tenants; give --tenants ({NONE} for one "
                f"queue) or use another folder")
        if found is not None and found != self.columns:
            raise StoreError(f"{self.csv}: not a sweep's CSV of this version (columns differ)")
        return {tuple(row[k] for k in self.key): row for row in reader}

    def _write_line(self, values) -> None:
        buffer = io.StringIO()
        csv.writer(buffer, lineterminator="\n").writerow(values)
        self._out.write(buffer.getvalue())  # one write: a kill leaves no half-row but the last
        self._out.flush()

    def add(self, row: dict, detail: dict) -> None:
        key = tuple(str(row[k]) for k in self.key)
        path = self.runs / detail_name(key)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(detail))
        os.replace(tmp, path)
        self._write_line([_text(row[c]) for c in self.columns])

    def detail(self, key) -> dict | None:
        path = self.runs / detail_name(key)
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return None

    def rows(self) -> list[dict]:
        """Every row in the CSV, in file order."""
        with open(self.csv, newline="", encoding="utf-8") as fh:
            return list(csv.DictReader(fh))

    def tenant_rows(self) -> Iterator[dict]:
        """A row per run and tenant (tenants.csv's), in runs.csv's order: the run's key and
        that tenant's figures ("" where a run without quotas owes nothing)."""
        for row in self.rows():
            key = tuple(row[k] for k in self.key)
            figures = ((self.detail(key) or {}).get("tenants") or {}).get("by_tenant", {})
            for name, got in figures.items():
                yield {**dict(zip(self.key, key)), "tenant": name,
                       **{column: got[field] for column, field in PER_TENANT if field}}

    def write_tenants(self) -> Path:
        """tenants.csv, whole, from runs.csv and the detail files; replaced at once, so a
        reader never sees half of it."""
        path = self.folder / TENANTS_CSV
        tmp = path.with_suffix(".tmp")
        with open(tmp, "w", newline="", encoding="utf-8") as fh:
            out = csv.writer(fh, lineterminator="\n")
            out.writerow((*self.key, *(column for column, _ in PER_TENANT)))
            for row in self.tenant_rows():
                out.writerow([_text(v) for v in row.values()])
        os.replace(tmp, path)
        return path

    def close(self) -> None:
        for fh in (self._out, self._lock):
            if fh is not None:
                fh.close()
        self._out = self._lock = None


def _text(value) -> str:
    """Floats in full (repr), so two runs of the same task write the same text; None (a
    figure that does not apply) as nothing."""
    if value is None:
        return ""
    return repr(value) if isinstance(value, float) else str(value)
