"""The live scheduler's journal: every accepted job and what happened to it, in SQLite.

The bus is lossy and the scheduler may die at any instant, so the journal is the one place
from which a restarted scheduler rebuilds its queue. WAL mode with `synchronous=FULL` makes
each commit durable when it returns; a job is committed before its submit is acknowledged,
so a feeder never sees an "accepted" that a crash can take back.

Times are trace seconds as the service's clock counts them (`*_trace`), plus the wall clock
of arrival (`submit_wall`, epoch seconds) for operators.
"""
from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from typing import Any, Callable, Iterable, Mapping, NamedTuple

from traces.record import JobRecord, record_from_map, record_to_map  # noqa: F401  (re-exported)

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    job_id INTEGER PRIMARY KEY,
    record TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('submitted', 'running', 'finished')),
    iterations_done REAL NOT NULL DEFAULT 0,
    submit_wall REAL NOT NULL,
    submit_trace REAL NOT NULL,
    first_start_trace REAL,
    finish_trace REAL,
    preemptions INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    ts REAL NOT NULL,
    kind TEXT NOT NULL,
    job_id INTEGER,
    node TEXT,
    detail TEXT
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""

STATES = ("submitted", "running", "finished")


class JournalError(Exception):
    """The journal cannot be used (wrong schema version, an event for an unknown job)."""


class Entry(NamedTuple):
    """One journaled job; unpacks as (record, iterations_done, ...)."""

    record: JobRecord
    iterations_done: float
    state: str
    submit_trace: float
    first_start_trace: float | None
    finish_trace: float | None
    preemptions: int
    submit_wall: float


class Journal:
    """A crash-safe job journal. Thread-safe: one connection, serialised by a lock."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = os.fspath(path)
        self.on_write: Callable[[float], None] | None = None  # seconds per commit (metrics)
        self._lock = threading.Lock()
        # autocommit mode; every change runs in an explicit BEGIN IMMEDIATE ... COMMIT
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False,
                                   timeout=30.0)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        with self._tx() as db:
            for statement in filter(str.strip, _SCHEMA.split(";")):
                db.execute(statement)
            row = db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            if row is None:
                db.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            elif int(row[0]) != SCHEMA_VERSION:
                raise JournalError(f"{self.path}: schema version {row[0]}, "
                                   f"this scheduler reads {SCHEMA_VERSION}")

    # -- transactions ----------------------------------------------------------------------
    class _Tx:
        def __init__(self, journal: "Journal"):
            self.journal = journal

        def __enter__(self) -> sqlite3.Connection:
            self.journal._lock.acquire()
            try:
                self.journal._db.execute("BEGIN IMMEDIATE")
            except BaseException:
                self.journal._lock.release()
                raise
            self.began = time.perf_counter()
            return self.journal._db

        def __exit__(self, kind, value, tb) -> None:
            try:
                self.journal._db.execute("COMMIT" if kind is None else "ROLLBACK")
            finally:
                self.journal._lock.release()
            if kind is None and self.journal.on_write is not None:
                self.journal.on_write(time.perf_counter() - self.began)

    def _tx(self) -> "Journal._Tx":
        return Journal._Tx(self)

    def _event(self, db: sqlite3.Connection, ts: float, kind: str, job_id: int | None,
               node: str | None, detail: Mapping[str, Any] | None) -> None:
        db.execute("INSERT INTO events (ts, kind, job_id, node, detail) VALUES (?, ?, ?, ?, ?)",
                   (float(ts), kind, job_id, node,
                    None if detail is None else json.dumps(detail, sort_keys=True)))

    # -- changes ---------------------------------------------------------------------------
    def submit(self, record: JobRecord, now_trace: float) -> bool:
        """Journal a new job; False (and no change) when its id is already journaled.

        Returns only after the commit is durable, so the caller may acknowledge at once.
        """
        with self._tx() as db:
            cur = db.execute(
                "INSERT OR IGNORE INTO jobs (job_id, record, state, submit_wall, submit_trace) "
                "VALUES (?, ?, 'submitted', ?, ?)",
                (record.job_id, json.dumps(record_to_map(record)), time.time(), float(now_trace)))
            if cur.rowcount != 1:
                return False
            self._event(db, now_trace, "submitted", record.job_id, None, None)
            return True

    def mark_started(self, job_id: int, iterations: float, now: float,
                     node: str | None = None, detail: Mapping[str, Any] | None = None) -> None:
        """The job was launched from `iterations` done; the first start is kept for JCT."""
        with self._tx() as db:
            self._require(db, job_id)
            db.execute("UPDATE jobs SET state='running', iterations_done=?, "
                       "first_start_trace=COALESCE(first_start_trace, ?) "
                       "WHERE job_id=? AND state != 'finished'",
                       (float(iterations), float(now), job_id))
            self._event(db, now, "started", job_id, node, detail)

    def mark_stopped(self, job_id: int, iterations: float, now: float,
                     node: str | None = None, detail: Mapping[str, Any] | None = None,
                     preempted: bool = True) -> None:
        """The job stopped (preempted, moved, node lost) with `iterations` done; it waits.
        A stop to regroup or move a job the plan keeps running is no preemption, as in the
        core's count, so live and simulated runs report the same thing."""
        with self._tx() as db:
            self._require(db, job_id)
            db.execute("UPDATE jobs SET state='submitted', iterations_done=?, "
                       "preemptions=preemptions + (state='running' AND ?) "
                       "WHERE job_id=? AND state != 'finished'",
                       (float(iterations), int(preempted), job_id))
            self._event(db, now, "stopped", job_id, node, detail)

    def mark_finished(self, job_id: int, now: float, iterations: float | None = None,
                      node: str | None = None) -> bool:
        """The job is done; False when it already was (a repeated report changes nothing)."""
        with self._tx() as db:
            self._require(db, job_id)
            cur = db.execute(
                "UPDATE jobs SET state='finished', finish_trace=?, "
                "iterations_done=COALESCE(?, iterations_done) "
                "WHERE job_id=? AND state != 'finished'",
                (float(now), None if iterations is None else float(iterations), job_id))
            if cur.rowcount != 1:
                return False
            self._event(db, now, "finished", job_id, node, None)
            return True

    def mark_cancelled(self, job_id: int, now: float, iterations: float) -> bool:
        """A user cancelled the job: it ends as finished (so a restart never runs it again)
        with a `cancelled` event beside it, in one transaction; False when it had ended."""
        with self._tx() as db:
            self._require(db, job_id)
            cur = db.execute(
                "UPDATE jobs SET state='finished', finish_trace=?, iterations_done=? "
                "WHERE job_id=? AND state != 'finished'", (float(now), float(iterations), job_id))
            if cur.rowcount != 1:
                return False
            self._event(db, now, "cancelled", job_id, None, None)
            return True

    def log_event(self, kind: str, now: float, job_id: int | None = None,
                  node: str | None = None, detail: Mapping[str, Any] | None = None) -> None:
        """Append an event that changes no job (an agent lost, a restart)."""
        with self._tx() as db:
            self._event(db, now, kind, job_id, node, detail)

    def set_clock(self, now_trace: float) -> None:
        """Remember how far the trace clock got, so a restart continues from there."""
        with self._tx() as db:
            db.execute("INSERT OR REPLACE INTO meta VALUES ('clock', ?)", (repr(float(now_trace)),))

    @staticmethod
    def _require(db: sqlite3.Connection, job_id: int) -> None:
        if db.execute("SELECT 1 FROM jobs WHERE job_id=?", (job_id,)).fetchone() is None:
            raise JournalError(f"job {job_id} is not in the journal")

    # -- queries ---------------------------------------------------------------------------
    def _query(self, sql: str, args: Iterable[Any] = ()) -> list[tuple]:
        with self._lock:
            return self._db.execute(sql, tuple(args)).fetchall()

    _COLUMNS = ("record, iterations_done, state, submit_trace, first_start_trace, finish_trace, "
                "preemptions, submit_wall")

    @staticmethod
    def _entry(row: tuple) -> Entry:
        return Entry(record_from_map(json.loads(row[0])), *row[1:])

    def get(self, job_id: int) -> Entry | None:
        rows = self._query(f"SELECT {self._COLUMNS} FROM jobs WHERE job_id=?", (job_id,))
        return self._entry(rows[0]) if rows else None

    def unfinished(self) -> list[Entry]:
        """Jobs still to run, in arrival order (the order a restarted core queues them in)."""
        rows = self._query(f"SELECT {self._COLUMNS} FROM jobs WHERE state != 'finished' "
                           "ORDER BY submit_trace, job_id")
        return [self._entry(r) for r in rows]

    def running_nodes(self) -> set[str]:
        """The nodes of the last start of every job the journal shows running: where trainers
        may still run after the scheduler died."""
        rows = self._query(
            "SELECT e.node, e.detail FROM events e JOIN jobs j ON j.job_id = e.job_id "
            "WHERE j.state = 'running' AND e.kind = 'started' AND e.seq = "
            "(SELECT MAX(seq) FROM events WHERE job_id = e.job_id AND kind = 'started')")
        nodes: set[str] = set()
        for node, detail in rows:
            if node:
                nodes.add(node)
            extra = json.loads(detail).get("nodes") if detail else None
            if isinstance(extra, list):
                nodes.update(n for n in extra if isinstance(n, str))
        return nodes

    def finished(self) -> list[Entry]:
        rows = self._query(f"SELECT {self._COLUMNS} FROM jobs WHERE state = 'finished' "
                           "ORDER BY finish_trace, job_id")
        return [self._entry(r) for r in rows]

    def finished_ids(self) -> set[int]:
        return {r[0] for r in self._query("SELECT job_id FROM jobs WHERE state='finished'")}

    def counts(self) -> dict[str, int]:
        """Jobs per state (every state present, zero when none)."""
        out = dict.fromkeys(STATES, 0)
        out.update(self._query("SELECT state, COUNT(*) FROM jobs GROUP BY state"))
        return out

    def events(self, job_id: int | None = None) -> list[tuple]:
        """(ts, kind, job_id, node, detail) in append order; for reports and tests."""
        sql = "SELECT ts, kind, job_id, node, detail FROM events"
        rows = self._query(sql + " WHERE job_id=? ORDER BY seq", (job_id,)) if job_id is not None \
            else self._query(sql + " ORDER BY seq")
        return [(ts, kind, j, node, None if d is None else json.loads(d))
                for ts, kind, j, node, d in rows]

    def clock(self) -> float:
        """The latest trace time the journal has seen (0.0 for a new journal)."""
        rows = self._query("SELECT MAX(ts) FROM events")
        best = rows[0][0] if rows and rows[0][0] is not None else 0.0
        meta = self._query("SELECT value FROM meta WHERE key='clock'")
        if meta:
            best = max(best, float(meta[0][0]))
        return float(best)

    def integrity_check(self) -> str:
        return self._query("PRAGMA integrity_check")[0][0]

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> "Journal":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
