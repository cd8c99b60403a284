"""The live scheduler's journal: every accepted job and each transition of its life, in SQLite.

The bus is lossy and the scheduler may die at any instant, so the journal is the one place
from which a restarted scheduler rebuilds its state. WAL mode with `synchronous=FULL` makes
each commit durable when it returns; a job is committed before its submit is acknowledged,
so a feeder never sees an "accepted" that a crash can take back. A service that answers a
batch of submissions at once commits them without waiting and makes them durable together
(`sync`) before it replies.

Two tables: `events`, append-only, holds every transition of a job's lifecycle (the phase it
entered, scheduler/live/lifecycle.py) and the agents' comings and goings; `jobs` holds each
job's record and what its transitions add up to (phase, iterations done, first start, finish,
preemptions), updated in the same transaction, so a query needs no replay. An older
journal is migrated in place when opened: a version-1 one (no phases) from its events, which
name what happened and so the phase each entered; a version-2 one (no `failed` phase, which
its tables' checks refuse) by copying its tables into tables that allow it; a version-3 one
(no `submissions`: the keys clients name their submissions by, so a retry is answered with
the job it made) by adding that table.

Times are trace seconds as the service's clock counts them (`*_trace`, `ts`), plus the wall
clock of arrival (`submit_wall`, epoch seconds) for operators.
"""
from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
import uuid
from collections import Counter
from typing import Any, Callable, Iterable, Mapping, NamedTuple

from scheduler.live.lifecycle import ENDED, LAUNCHING, QUEUED, Phase, Transition, allowed
from traces.record import JobRecord, record_from_map, record_to_map

SCHEMA_VERSION = 4

_PHASES = ", ".join(f"'{p.value}'" for p in Phase)
_JOBS = f"""(
    job_id INTEGER PRIMARY KEY,
    record TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('submitted', 'running', 'finished')),
    iterations_done REAL NOT NULL DEFAULT 0,
    submit_wall REAL NOT NULL,
    submit_trace REAL NOT NULL,
    first_start_trace REAL,
    finish_trace REAL,
    preemptions INTEGER NOT NULL DEFAULT 0,
    phase TEXT NOT NULL DEFAULT 'queued' CHECK (phase IN ({_PHASES}))
)"""
_EVENTS = f"""(
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    ts REAL NOT NULL,
    kind TEXT NOT NULL,
    job_id INTEGER,
    node TEXT,
    detail TEXT,
    phase TEXT CHECK (phase IN ({_PHASES}))
)"""
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS jobs {_JOBS};
CREATE TABLE IF NOT EXISTS events {_EVENTS};
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS submissions (
    caller TEXT NOT NULL,
    key TEXT NOT NULL,
    job_id INTEGER NOT NULL REFERENCES jobs (job_id),
    PRIMARY KEY (caller, key)
);
"""

# A version-1 journal, made version 2: each job event names the phase it entered (version 1
# knew no launched or stopping, so a started job is launching), and each job its phase.
_FROM_V1 = f"""
ALTER TABLE jobs ADD COLUMN phase TEXT NOT NULL DEFAULT 'queued' CHECK (phase IN ({_PHASES}));
ALTER TABLE events ADD COLUMN phase TEXT CHECK (phase IN ({_PHASES}));
UPDATE events SET phase = CASE kind WHEN 'submitted' THEN 'queued'
    WHEN 'started' THEN 'launching' WHEN 'stopped' THEN 'queued'
    WHEN 'finished' THEN 'finished' WHEN 'cancelled' THEN 'cancelled' END
    WHERE job_id IS NOT NULL;
UPDATE jobs SET phase = CASE state WHEN 'submitted' THEN 'queued' WHEN 'running' THEN 'launching'
    ELSE CASE WHEN EXISTS (SELECT 1 FROM events e WHERE e.job_id = jobs.job_id
                           AND e.kind = 'cancelled') THEN 'cancelled' ELSE 'finished' END END;
"""

# A version-2 journal, made version 3: its tables' phase checks did not allow `failed`, and
# SQLite changes a check only by copying the table (the sequence of `events` follows it)
_FROM_V2 = f"""
CREATE TABLE jobs_v3 {_JOBS};
INSERT INTO jobs_v3 SELECT * FROM jobs;
DROP TABLE jobs;
ALTER TABLE jobs_v3 RENAME TO jobs;
CREATE TABLE events_v3 {_EVENTS};
INSERT INTO events_v3 SELECT * FROM events;
DROP TABLE events;
ALTER TABLE events_v3 RENAME TO events;
"""

STATES = ("submitted", "running", "finished")
# what the `state` column says of each phase (version 1's coarser word, kept for readers)
_STATE_OF = {QUEUED: "submitted", LAUNCHING: "running", Phase.RUNNING: "running",
             Phase.STOPPING: "running", Phase.FINISHED: "finished",
             Phase.CANCELLED: "finished", Phase.FAILED: "finished"}
# transitions `events()` leaves out: the history as version 1 told it has none of them
FINE_KINDS = ("launched", "stopping", "regrouped")


class JournalError(Exception):
    """The journal cannot be used (wrong schema version, an event for an unknown job)."""


class JournalLost(JournalError):
    """A journal was made here and is now empty, missing, unreadable or another one: its
    history would be lost in silence if a new one were started over it."""


def marker_path(path: str | os.PathLike[str]) -> str:
    """The file beside a journal that names it (`journal.db.id`): written when the journal
    is made, so a journal later truncated, deleted or swapped is told from a new one."""
    return os.fspath(path) + ".id"


def _read_marker(path: str) -> str | None:
    try:
        with open(marker_path(path), encoding="ascii", errors="replace") as handle:
            return handle.read(200).strip() or "?"
    except FileNotFoundError:
        return None


def _write_marker(path: str, journal_id: str) -> None:
    """Write the marker whole (a temporary file renamed) and durably."""
    marker = marker_path(path)
    temp = f"{marker}.tmp"
    with open(temp, "w", encoding="ascii") as handle:
        handle.write(journal_id + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp, marker)
    folder = os.open(os.path.dirname(os.path.abspath(marker)), os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def lost(path: str | os.PathLike[str]) -> str | None:
    """Why the journal at `path` is lost (one line naming it), or None: its marker says a
    journal was made here, and the file is missing or empty (`truncate -s 0`). An unreadable
    or swapped one is found when it is opened (`Journal`)."""
    path = os.fspath(path)
    made = _read_marker(path)
    if made is None:
        return None
    try:
        size = os.path.getsize(path)
    except FileNotFoundError:
        return _lost_line(path, made, "is missing")
    return _lost_line(path, made, "is empty") if size == 0 else None


def _lost_line(path: str, made: str, what: str) -> str:
    return (f"{path} {what}, but {marker_path(path)} says journal {made[:40]} was kept "
            "there: its jobs would be forgotten; restore it, or start afresh with "
            "--fresh-journal")


def set_aside(path: str | os.PathLike[str]) -> list[str]:
    """Move a lost journal, its write-ahead files and its marker to `NAME.lost-TIME...`, so a
    fresh one can start with nothing destroyed; the paths moved to."""
    path = os.fspath(path)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    moved = []
    for name in (path, f"{path}-wal", f"{path}-shm", marker_path(path)):
        if os.path.exists(name):
            os.replace(name, f"{name}.lost-{stamp}")
            moved.append(f"{name}.lost-{stamp}")
    return moved



class JournalFull(JournalError):
    """A change could not be written for want of space; nothing of it was kept. Its text is
    the one line a refused request or the log says."""


def _full(err: BaseException | None) -> bool:
    return isinstance(err, sqlite3.OperationalError) \
        and getattr(err, "sqlite_errorname", "") == "SQLITE_FULL"


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
    phase: str


class Journal:
    """A crash-safe job journal. Thread-safe: one connection, serialised by a lock."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = os.fspath(path)
        self.on_write: Callable[[float], None] | None = None  # seconds per commit (metrics)
        self.migrated_from: int | None = None  # the version this open migrated, if any
        self._lock = threading.Lock()
        self._durable = True  # the connection's synchronous setting: FULL (True) or NORMAL
        self._unsynced = False  # the last commit did not wait for the disk
        why = lost(self.path)  # before SQLite makes a new journal of the empty file
        if why:
            raise JournalLost(why)
        made = _read_marker(self.path)
        # autocommit mode; every change runs in an explicit BEGIN IMMEDIATE ... COMMIT
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False,
                                   timeout=30.0)
        try:
            self._open(made)
        except BaseException:
            self._db.close()
            raise

    def _open(self, made: str | None) -> None:
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
        except sqlite3.DatabaseError as err:  # not SQLite (garbage, or another file)
            if made is not None:
                raise JournalLost(_lost_line(self.path, made, f"is unreadable ({err})")) \
                    from None
            raise
        self._db.execute("PRAGMA synchronous=FULL")
        with self._tx() as db:
            has_meta = db.execute("SELECT 1 FROM sqlite_master WHERE type='table' "
                                  "AND name='meta'").fetchone()
            row = db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() \
                if has_meta else None
            version = int(row[0]) if row is not None else None
            if version not in (None, 1, 2, 3, SCHEMA_VERSION):
                raise JournalError(f"{self.path}: schema version {version}, this scheduler "
                                   f"reads {SCHEMA_VERSION} (and migrates 1, 2 and 3)")
            if version in (1, 2):
                # version 1's new columns take this version's checks at once
                self._script(db, _FROM_V1 if version == 1 else _FROM_V2)
            self._script(db, _SCHEMA)  # what an older version lacks: version 3, submissions
            if version in (1, 2, 3):
                self.migrated_from = version
                latest = db.execute("SELECT MAX(ts) FROM events").fetchone()[0]
                self._event(db, latest or 0.0, "journal_migrated", None, None,
                            {"from": version, "to": SCHEMA_VERSION})
            db.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)",
                       (str(SCHEMA_VERSION),))
            row = db.execute("SELECT value FROM meta WHERE key='journal_id'").fetchone()
            if made is not None and (row is None or row[0] != made):
                raise JournalLost(_lost_line(
                    self.path, made, "is another journal" if row else "was made again"))
            self.journal_id = row[0] if row else uuid.uuid4().hex
            if row is None:  # made now, or by a version before markers: named from now on
                db.execute("INSERT INTO meta VALUES ('journal_id', ?)", (self.journal_id,))
        if made is None:
            _write_marker(self.path, self.journal_id)

    @staticmethod
    def _script(db: sqlite3.Connection, script: str) -> None:
        for statement in filter(str.strip, script.split(";")):
            db.execute(statement)

    # -- transactions ----------------------------------------------------------------------
    class _Tx:
        def __init__(self, journal: "Journal", durable: bool):
            self.journal, self.durable = journal, durable

        def __enter__(self) -> sqlite3.Connection:
            journal = self.journal
            journal._lock.acquire()
            try:
                if journal._durable != self.durable:  # may not change inside a transaction
                    level = "FULL" if self.durable else "NORMAL"
                    journal._db.execute(f"PRAGMA synchronous={level}")
                    journal._durable = self.durable
                journal._db.execute("BEGIN IMMEDIATE")
            except BaseException:
                journal._lock.release()
                raise
            self.began = time.perf_counter()
            return journal._db

        def __exit__(self, kind, value, tb) -> None:
            journal = self.journal
            try:
                try:
                    journal._db.execute("COMMIT" if kind is None else "ROLLBACK")
                except sqlite3.OperationalError as err:
                    if kind is not None or not _full(err):
                        raise
                    value = err
                    try:  # SQLite may have rolled back already; if not, nothing is kept
                        journal._db.execute("ROLLBACK")
                    except sqlite3.OperationalError:
                        pass
                if _full(value):
                    raise JournalFull(f"no space left on device writing "
                                      f"{os.path.basename(journal.path)}") from None
                if kind is None:
                    journal._unsynced = not self.durable
            finally:
                journal._lock.release()
            if kind is None and journal.on_write is not None:
                journal.on_write(time.perf_counter() - self.began)

    def _tx(self, durable: bool = True) -> "Journal._Tx":
        return Journal._Tx(self, durable)

    def _event(self, db: sqlite3.Connection, ts: float, kind: str, job_id: int | None,
               node: str | None, detail: Mapping[str, Any] | None,
               phase: Phase | None = None) -> None:
        db.execute("INSERT INTO events (ts, kind, job_id, node, detail, phase) "
                   "VALUES (?, ?, ?, ?, ?, ?)",
                   (float(ts), kind, job_id, node,
                    None if detail is None else json.dumps(detail, sort_keys=True),
                    None if phase is None else phase.value))

    # -- changes ---------------------------------------------------------------------------
    def submit(self, record: JobRecord, now_trace: float, durable: bool = True,
               submission: tuple[str, str] | None = None) -> bool:
        """Journal a new job (queued); False (and no change) when its id is already journaled.
        `submission`: (caller, key) the submitter named this submission by, journaled with
        the job in one transaction, so a retry after any crash finds it (`submitted`).

        Returns only after the commit is durable, so the caller may acknowledge at once;
        with `durable` False, only once `sync` has returned after it.
        """
        with self._tx(durable) as db:
            cur = db.execute(
                "INSERT OR IGNORE INTO jobs (job_id, record, state, submit_wall, submit_trace) "
                "VALUES (?, ?, 'submitted', ?, ?)",
                (record.job_id, json.dumps(record_to_map(record)), time.time(), float(now_trace)))
            if cur.rowcount != 1:
                return False
            if submission is not None:
                db.execute("INSERT INTO submissions (caller, key, job_id) VALUES (?, ?, ?)",
                           (*submission, record.job_id))
            self._event(db, now_trace, "submitted", record.job_id, None, None, QUEUED)
            return True

    def submitted(self, caller: str, key: str) -> int | None:
        """The job a submission of `caller` named `key` made, or None."""
        rows = self._query("SELECT job_id FROM submissions WHERE caller=? AND key=?",
                           (caller, key))
        return rows[0][0] if rows else None

    def sync(self) -> None:
        """Make every commit so far durable: one synchronous commit (of the time it was made)
        syncs the write-ahead log, and with it the commits before it that did not wait;
        none where the last commit was durable already."""
        if not self._unsynced:
            return
        with self._tx(True) as db:
            db.execute("INSERT OR REPLACE INTO meta VALUES ('synced', ?)", (repr(time.time()),))

    def record(self, move: Transition) -> Entry | None:
        """Journal one transition of a job's lifecycle: its event and the job's row, in one
        transaction. None, and nothing written, when the job's journaled phase may not enter
        `move.phase` (lifecycle.ALLOWED: e.g. a finished job stays finished)."""
        with self._tx(move.durable) as db:
            return self._record(db, move)

    def record_many(self, moves: list[Transition]) -> list[Entry | None]:
        """`record` for each, in one transaction (durable when any of them must be)."""
        if not moves:
            return []
        with self._tx(any(m.durable for m in moves)) as db:
            return [self._record(db, m) for m in moves]

    def _record(self, db: sqlite3.Connection, move: Transition) -> Entry | None:
        job_id, after, ts = move.job_id, move.phase, float(move.ts)
        row = db.execute("SELECT phase, state FROM jobs WHERE job_id=?", (job_id,)).fetchone()
        if row is None:
            raise JournalError(f"job {job_id} is not in the journal")
        if not allowed(Phase(row[0]), after):
            return None
        sets, args = ["phase=?", "state=?"], [after.value, _STATE_OF[after]]
        if after is LAUNCHING:  # the first start is kept for JCT
            sets.append("first_start_trace=COALESCE(first_start_trace, ?)")
            args.append(ts)
        elif after is QUEUED and move.preempted and row[1] == "running":
            # a stop to regroup or move a job the plan keeps running is no preemption, as in
            # the core's count, so live and simulated runs report the same thing
            sets.append("preemptions=preemptions + 1")
        elif after in ENDED:
            sets.append("finish_trace=?")
            args.append(ts)
        if move.iterations is not None:
            sets.append("iterations_done=?")
            args.append(float(move.iterations))
        db.execute(f"UPDATE jobs SET {', '.join(sets)} WHERE job_id=?", (*args, job_id))
        self._event(db, ts, move.kind, job_id, move.node, move.detail, after)
        return self._entry(db.execute(f"SELECT {self._COLUMNS} FROM jobs WHERE job_id=?",
                                      (job_id,)).fetchone())

    # The transitions by their version-1 names (tools and tests write journals with them).
    def mark_started(self, job_id: int, iterations: float, now: float,
                     node: str | None = None, detail: Mapping[str, Any] | None = None) -> bool:
        """The job was launched from `iterations` done (queued -> launching)."""
        return self.record(Transition(job_id, LAUNCHING, "started", now, iterations, node,
                                      detail)) is not None

    def mark_stopped(self, job_id: int, iterations: float, now: float,
                     node: str | None = None, detail: Mapping[str, Any] | None = None,
                     preempted: bool = True) -> bool:
        """The job stopped with `iterations` done; it waits (-> queued)."""
        return self.record(Transition(job_id, QUEUED, "stopped", now, iterations, node, detail,
                                      preempted)) is not None

    def mark_finished(self, job_id: int, now: float, iterations: float | None = None,
                      node: str | None = None) -> bool:
        """The job is done; False when it had ended (a repeated report changes nothing)."""
        return self.record(Transition(job_id, Phase.FINISHED, "finished", now, iterations,
                                      node)) is not None

    def mark_cancelled(self, job_id: int, now: float, iterations: float) -> bool:
        """A user cancelled the job; False when it had ended."""
        return self.record(Transition(job_id, Phase.CANCELLED, "cancelled", now,
                                      iterations)) is not None

    def log_event(self, kind: str, now: float, job_id: int | None = None,
                  node: str | None = None, detail: Mapping[str, Any] | None = None) -> None:
        """Append an event that changes no job's phase (an agent lost, a restart)."""
        with self._tx() as db:
            self._event(db, now, kind, job_id, node, detail)

    def set_clock(self, now_trace: float) -> None:
        """Remember how far the trace clock got, so a restart continues from there."""
        with self._tx() as db:
            db.execute("INSERT OR REPLACE INTO meta VALUES ('clock', ?)", (repr(float(now_trace)),))
            # and the wall time it was so: how long a restart found the scheduler away
            db.execute("INSERT OR REPLACE INTO meta VALUES ('clock_wall', ?)",
                       (repr(time.time()),))

    def clock_wall(self) -> float | None:
        """The wall time (epoch seconds) the trace clock was last remembered at, or None."""
        rows = self._query("SELECT value FROM meta WHERE key='clock_wall'")
        return float(rows[0][0]) if rows else None

    def last_ts(self, job_id: int) -> float | None:
        """The trace time of the job's latest event, or None."""
        rows = self._query("SELECT MAX(ts) FROM events WHERE job_id=?", (job_id,))
        return rows[0][0] if rows and rows[0][0] is not None else None

    # -- queries ---------------------------------------------------------------------------
    def _query(self, sql: str, args: Iterable[Any] = ()) -> list[tuple]:
        with self._lock:
            return self._db.execute(sql, tuple(args)).fetchall()

    _COLUMNS = ("record, iterations_done, state, submit_trace, first_start_trace, finish_trace, "
                "preemptions, submit_wall, phase")

    @staticmethod
    def _entry(row: tuple) -> Entry:
        return Entry(record_from_map(json.loads(row[0])), *row[1:])

    def get(self, job_id: int) -> Entry | None:
        rows = self._query(f"SELECT {self._COLUMNS} FROM jobs WHERE job_id=?", (job_id,))
        return self._entry(rows[0]) if rows else None

    def entries(self) -> list[Entry]:
        """Every job, in arrival order (the order a restarted core queues them in)."""
        rows = self._query(f"SELECT {self._COLUMNS} FROM jobs ORDER BY submit_trace, job_id")
        return [self._entry(r) for r in rows]

    def unfinished(self) -> list[Entry]:
        """Jobs still to run, in arrival order."""
        rows = self._query(f"SELECT {self._COLUMNS} FROM jobs WHERE state != 'finished' "
                           "ORDER BY submit_trace, job_id")
        return [self._entry(r) for r in rows]

    def finished(self) -> list[Entry]:
        """Jobs that ended (finished, cancelled or failed: their `phase` says which), in the
        order they did."""
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

    def phase_counts(self) -> dict[Phase, int]:
        """Jobs per lifecycle phase (every phase present, zero when none)."""
        out = dict.fromkeys(Phase, 0)
        out.update(Counter({Phase(p): n for p, n in
                            self._query("SELECT phase, COUNT(*) FROM jobs GROUP BY phase")}))
        return out

    def transitions(self) -> list[tuple[int, str, str | None, Any]]:
        """(job id, phase entered, node, detail) of every job transition, in journal order:
        what lifecycle.replay folds."""
        rows = self._query("SELECT job_id, phase, node, detail FROM events "
                           "WHERE phase IS NOT NULL ORDER BY seq")
        return [(j, phase, node, None if d is None else json.loads(d))
                for j, phase, node, d in rows]

    def events(self, job_id: int | None = None) -> list[tuple]:
        """(ts, kind, job_id, node, detail) in append order, for reports and tests: arrivals,
        starts, stops and ends, and the agents' events; the finer transitions (FINE_KINDS)
        are in `transitions`."""
        fine = ", ".join(f"'{k}'" for k in FINE_KINDS)
        sql = f"SELECT ts, kind, job_id, node, detail FROM events WHERE kind NOT IN ({fine})"
        rows = self._query(sql + " AND job_id=? ORDER BY seq", (job_id,)) \
            if job_id is not None else self._query(sql + " ORDER BY seq")
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
