"""What the web view shows, as JSON: the status.query reply plus the groups on the GPUs, the
recent events, the JCTs so far and the queue order.

Why a separate read path: the page is polled by any number of browsers, and a round must
never wait on them. So the scheduler's lock is held only for the status reply and a copy of
the ledger (O(jobs), the same as one status.query), the journal is read through a read-only
connection of its own (WAL: readers never block the writer), and a snapshot is reused for
`ttl` seconds, so many viewers cost one build.
"""
from __future__ import annotations

import json
import sqlite3
import threading
import time
from typing import Any, Callable

from scheduler.live import status as status_reply
from scheduler.live.ledger import node_name
from scheduler.live.state import LiveState

EVENTS_SHOWN = 40  # recent journal events on the page
STAGES = ("io", "cpu", "gpu", "net")  # the trainers' stage order (trainer/stages.py)


def groups(state: LiveState) -> list[dict[str, Any]]:
    """Each running group once: members in slot order, where they run, the group's iteration
    time and each member's stage times (measured when telemetry gave them, else planned).
    Called with the lock held."""
    seen: dict[tuple, dict[str, Any]] = {}
    for job_id, where in state.ledger.placed.items():
        key = tuple(where.group) or (job_id,)
        entry = seen.get(key)
        if entry is None:
            entry = seen[key] = {"members": list(key), "tt": where.tt, "slots": {}, "jobs": {}}
        job = state.core.jobs.get(job_id)
        entry["jobs"][str(job_id)] = {
            "profile": [round(t, 6) for t in job.profile] if job is not None else [],
            "model": job.model if job is not None else "",
            "num_gpu": job.num_gpu if job is not None else 0,
        }
        for s in where.slices:
            entry["slots"].setdefault(node_name(s.node), set()).update(s.gpus)
    out = []
    for entry in seen.values():
        entry["slots"] = {n: sorted(g) for n, g in sorted(entry["slots"].items())}
        out.append(entry)
    out.sort(key=lambda g: g["members"])
    return out


def occupancy(group: dict[str, Any], now: float, window: float) -> list[dict[str, Any]]:
    """Who holds which resource over the last `window` trace seconds, as the interleave model
    runs the group: members take the stages in slot order, one phase per stage, and a phase
    lasts as long as its slowest holder. Spans [start, end, stage, job_id], oldest first."""
    members = group["members"]
    profiles = [group["jobs"].get(str(j), {}).get("profile") or [] for j in members]
    n = len(STAGES)
    if not members or not all(len(p) == n for p in profiles):
        return []
    phases = []
    for phase in range(n):  # in phase p, the member at slot i holds stage (i + p) mod n
        phases.append(max((profiles[i][(i + phase) % n] for i in range(len(members))),
                          default=0.0))
    period = sum(phases)
    if period <= 0:
        return []
    spans: list[dict[str, Any]] = []
    t = (now - window) - ((now - window) % period)
    while t < now and len(spans) < 2000:
        for phase, length in enumerate(phases):
            start, end = t, t + length
            if end > now - window and start < now:
                for i, job_id in enumerate(members):
                    stage = (i + phase) % n
                    lo = round(max(start, now - window), 6)
                    hi = round(min(start + min(profiles[i][stage], length), now), 6)
                    if hi > lo:  # clipped to the window: what is left of the turn, if any
                        spans.append({"start": lo, "end": hi, "stage": STAGES[stage],
                                      "job_id": job_id})
            t = end
    return spans


class JournalReader:
    """A read-only connection to the journal for the web view's thread (never the writer's)."""

    def __init__(self, path: str):
        self.path = path
        self._db: sqlite3.Connection | None = None

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            self._db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True,
                                       check_same_thread=False, timeout=1.0)
        return self._db

    def recent_events(self, limit: int = EVENTS_SHOWN,
                      job_id: int | None = None) -> list[dict[str, Any]]:
        where, args = ("WHERE job_id=?", (job_id, limit)) if job_id is not None else ("", (limit,))
        rows = self._conn().execute(
            f"SELECT ts, kind, job_id, node, detail FROM events {where} "
            "ORDER BY seq DESC LIMIT ?", args).fetchall()
        return [{"ts": ts, "kind": kind, "job_id": j, "node": node,
                 "detail": json.loads(d) if d else None} for ts, kind, j, node, d in rows]

    def jcts(self) -> list[float]:
        """Every finished job's completion time (trace seconds), sorted: the CDF's x values."""
        rows = self._conn().execute(
            "SELECT finish_trace - submit_trace FROM jobs WHERE state='finished' "
            "AND finish_trace IS NOT NULL ORDER BY 1").fetchall()
        return [r[0] for r in rows]

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


def build(state: LiveState, reader: JournalReader, window: float = 30.0) -> dict[str, Any]:
    """The /api/status document."""
    body = status_reply.status(state, jobs=True)
    with state.lock:  # a copy of the ledger's groups: O(running jobs)
        running_groups = groups(state)
        now = state.now()
    window_trace = window * state.opt.time_scale
    for g in running_groups:
        g["occupancy"] = occupancy(g, now, window_trace)
    pending = [j for j in body.get("jobs", []) if j["state"] == "pending"]
    for position, job in enumerate(pending, start=1):
        job["position"] = job.get("position", position)
    body["groups"] = running_groups
    body["window"] = window_trace
    body["cluster"] = {"nodes": [node_name(i) for i in range(state.opt.spec.num_nodes)],
                       "gpus_per_node": state.opt.spec.gpus_per_node}
    try:
        body["events"] = reader.recent_events()
        body["jcts"] = reader.jcts()
    except sqlite3.Error as err:  # the journal is the scheduler's: show the page without it
        body["events"], body["jcts"] = [], []
        body["journal_error"] = str(err)
    return body


def job_detail(state: LiveState, reader: JournalReader, job_id: int) -> dict[str, Any] | None:
    """The /api/jobs/ID document, or None for a job the scheduler does not know."""
    with state.lock:
        job = state.core.jobs.get(job_id)
        if job is not None:
            where = state.ledger.placed.get(job_id)
            doc = {"job_id": job_id, "state": status_reply.job_state(state, job_id),
                   "model": job.model, "num_gpu": job.num_gpu,
                   "iterations": job.record.iterations,
                   "iterations_done": job.record.iterations - job.remaining,
                   "profile": list(job.profile), "preemptions": job.preemptions,
                   "submit": job.submit_time, "first_start": job.first_start,
                   "nodes": [node_name(n) for n in where.nodes] if where else [],
                   "group": list(where.group) if where else []}
        elif job_id in state.finished_before:
            entry = state.finished_before[job_id]
            doc = {"job_id": job_id, "state": "finished", "model": entry.record.model_name,
                   "num_gpu": entry.record.num_gpu, "iterations": entry.record.iterations,
                   "iterations_done": entry.iterations_done, "preemptions": entry.preemptions,
                   "nodes": [], "group": []}
        else:
            return None
    if doc["state"] == "pending":
        body = status_reply.status(state, jobs=True)
        pending = [j for j in body.get("jobs", []) if j["state"] == "pending"]
        for position, j in enumerate(pending, start=1):
            if j["job_id"] == job_id:
                doc["position"] = j.get("position", position)
                if "expected_start" in j:
                    doc["expected_start"] = j["expected_start"]
    try:
        doc["events"] = reader.recent_events(limit=200, job_id=job_id)
    except sqlite3.Error:
        doc["events"] = []
    return doc


class Snapshot:
    """The last /api/status document, rebuilt at most every `ttl` seconds whoever asks."""

    def __init__(self, make: Callable[[], dict[str, Any]], ttl: float = 0.5,
                 clock: Callable[[], float] = time.monotonic):
        self._make, self.ttl, self._clock = make, ttl, clock
        self._lock = threading.Lock()
        self._at = -float("inf")
        self._body: bytes = b""
        self.builds = 0

    def get(self) -> bytes:
        with self._lock:  # one builder at a time; the others take its result
            if self._clock() - self._at >= self.ttl:
                self._body = json.dumps(self._make(), separators=(",", ":")).encode()
                self._at = self._clock()
                self.builds += 1
            return self._body
