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
from scheduler.live.gatefeed import spans_of
from scheduler.live.ledger import node_name
from scheduler.live.state import LiveState

EVENTS_SHOWN = 40  # recent journal events on the page
ITERATIONS_SHOWN = 3  # group iterations on each occupancy strip
STAGES = ("io", "cpu", "gpu", "net")  # the trainers' stage order (trainer/stages.py)


def groups(state: LiveState) -> list[dict[str, Any]]:
    """Each running group once: the jobs placed on the same GPUs, in slot order, where they
    run, the group's iteration time and each member's stage times (measured when telemetry
    gave them, else planned). A group is what shares GPUs now: while a round is being applied
    the members' own records of their group may disagree for a moment. Called with the lock
    held; O(running jobs)."""
    placed = state.ledger.placed
    sharing: dict[tuple, list[int]] = {}
    for job_id, where in placed.items():
        sharing.setdefault(where.slices, []).append(job_id)
    out = []
    for slices, jobs in sharing.items():
        told = max((placed[j].group for j in jobs), key=len)  # the fullest slot order known
        rank = {j: i for i, j in enumerate(told)}
        members = sorted(jobs, key=lambda j: (rank.get(j, len(rank)), j))
        info = {}
        for j in members:
            job = state.view.jobs.get(j)
            info[str(j)] = {"profile": [round(t, 6) for t in job.profile] if job else [],
                            "model": job.model if job else "",
                            "num_gpu": job.num_gpu if job else 0,
                            "gpu_mem_gb": job.gpu_mem_gb if job else 0.0}
        where = {}
        for sl in slices:
            where.setdefault(node_name(sl.node), set()).update(sl.gpus)
        out.append({"members": members, "tt": max(placed[j].tt for j in jobs),
                    "slots": {n: sorted(g) for n, g in sorted(where.items())}, "jobs": info,
                    # GPU memory the members hold together on each of its GPUs (GB)
                    "gpu_mem_gb": round(sum(i["gpu_mem_gb"] for i in info.values()), 3)})
    out.sort(key=lambda g: g["members"])
    return out


def stage_names(profile_len: int) -> tuple[str, ...]:
    """The resource each profile entry holds: (io, cpu, gpu, net), or for the testbed
    pipeline's three values (data, gpu, net) the data stage on io."""
    return ("io", "gpu", "net") if profile_len == 3 else STAGES[:profile_len]


def _layout(group: dict[str, Any]) -> tuple | None:
    """(members, profiles, stage names, held(i, slot), slot lengths, period) of the cyclic
    model for the group; None when the members' profiles do not match."""
    members = group["members"]
    profiles = [group["jobs"].get(str(j), {}).get("profile") or [] for j in members]
    lengths = {len(p) for p in profiles}
    if not members or len(lengths) != 1 or 0 in lengths:
        return None
    names = stage_names(lengths.pop())
    k = 4 if len(names) == 3 else len(names)

    def held(i: int, slot: int) -> int | None:
        stage = (slot - i) % k
        return stage if stage < len(names) else None

    phases = [max((profiles[i][st] for i in range(len(members))
                   if (st := held(i, slot)) is not None), default=0.0) for slot in range(k)]
    period = sum(phases)
    return (members, profiles, names, held, phases, period) if period > 0 else None


def period(group: dict[str, Any]) -> float:
    """The group's iteration time in the model (0 when it cannot be drawn)."""
    layout = _layout(group)
    return layout[-1] if layout is not None else 0.0


def occupancy(group: dict[str, Any], now: float, window: float) -> list[dict[str, Any]]:
    """Who holds which resource over the last `window` trace seconds, as the core's cyclic
    interleave model runs the group (scheduler/core/interleave.py): k slots per iteration
    (k = 4 for both profile shapes), in slot s the member at position i holds its stage
    (s - i) mod k (none when that is past its last stage), and a slot lasts as long as its
    slowest holder. The pipeline model's prefetch overlap is not drawn. Spans
    {start, end, stage, job_id}, oldest first; [] when the members' profiles do not match."""
    layout = _layout(group)
    if layout is None:
        return []
    members, profiles, names, held, phases, period = layout
    spans: list[dict[str, Any]] = []
    t = (now - window) - ((now - window) % period)
    while t < now and len(spans) < 2000:
        for slot, length in enumerate(phases):
            start, end = t, t + length
            if end > now - window and start < now:
                for i, job_id in enumerate(members):
                    stage = held(i, slot)
                    if stage is None:
                        continue
                    lo = round(max(start, now - window), 6)
                    hi = round(min(start + min(profiles[i][stage], length), now), 6)
                    if hi > lo:  # clipped to the window: what is left of the turn, if any
                        spans.append({"start": lo, "end": hi, "stage": names[stage],
                                      "job_id": job_id})
            t = end
    return spans


def measured_strip(group: dict[str, Any], seen: dict[str, Any]) -> None:
    """Draw the group from what its node's gate measured (scheduler/live/gatefeed.py): the
    strip ends at the report's receipt and spans the model's window, or the last
    ITERATIONS_SHOWN measured turns of the first stage when the model has none."""
    spans, end = seen["spans"], seen["at"]
    window = group["window"]
    first = [s["start"] for s in spans if s["stage"] == spans[0]["stage"]]
    if len(first) > ITERATIONS_SHOWN * len(group["members"]):  # the measured pace
        window = end - first[-ITERATIONS_SHOWN * len(group["members"]) - 1]
    if window <= 0:
        window = end - spans[0]["start"]
    lo = end - window
    group.update(occupancy_source="measured", measured_on=seen["node"], window=window,
                 window_end=end, occupancy=[
                     dict(s, start=max(s["start"], lo)) for s in spans if s["end"] > lo])


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
        """Every finished job's completion time (trace seconds), sorted: the CDF's x values
        (a cancelled or failed job did not complete: none of its)."""
        rows = self._conn().execute(
            "SELECT finish_trace - submit_trace FROM jobs WHERE phase='finished' "
            "AND finish_trace IS NOT NULL ORDER BY 1").fetchall()
        return [r[0] for r in rows]

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


def cluster(state: LiveState) -> dict[str, Any]:
    """The grid the page draws: each node with its own pool's GPU count and GPU type ("" where
    the pool states none). A Muri-form spec's nodes are alike: it keeps `gpus_per_node`."""
    nodes, spec = state.nodes, state.opt.spec
    out: dict[str, Any] = {"nodes": [node_name(i) for i in range(spec.num_nodes)],
                           "node_gpus": list(nodes.gpus_of),
                           "node_types": [nodes.pools[p].gpu_type for p in nodes.pool_of]}
    if not spec.pools:
        out["gpus_per_node"] = spec.gpus_per_node
    return out


def build(state: LiveState, reader: JournalReader) -> dict[str, Any]:
    """The /api/status document."""
    # one read: a round between the reply and the groups would show a job both queued and
    # in a group
    with state.lock:
        body = status_reply.status(state, jobs=True, limit=PAGE_JOBS_LIMIT)
        running_groups = groups(state)  # a copy of the ledger's groups: O(running jobs)
        now, wall = state.now(), state.clock()
        measured = {tuple(g["members"]): state.gate_feed.measured(g["members"], wall)
                    for g in running_groups}
    for g in running_groups:  # the last few iterations of each group, a picture's worth
        g["window"] = ITERATIONS_SHOWN * period(g)
        seen = measured[tuple(g["members"])]
        seen = spans_of(seen) if seen is not None else None
        if seen is not None and seen["spans"]:
            measured_strip(g, seen)
        else:
            g["occupancy_source"], g["window_end"] = "model", now
            g["occupancy"] = occupancy(g, now, g["window"]) if g["window"] > 0 else []
    pending = [j for j in body.get("jobs", []) if j["state"] == "pending"]
    for position, job in enumerate(pending, start=1):
        job["position"] = job.get("position", position)
    # the queue in the policy's order (the reply lists jobs by id): the page draws it as listed
    pending.sort(key=lambda j: j["position"])
    body["jobs"] = [j for j in body.get("jobs", []) if j["state"] != "pending"] + pending
    body["groups"] = running_groups
    body["cluster"] = cluster(state)
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
        record = state.jobs.records.get(job_id)
        if record is not None:
            job = state.view.jobs.get(job_id)  # None: submitted since the last round
            where = state.ledger.placed.get(job_id)
            doc = {"job_id": job_id, "state": status_reply.job_state(state, job_id),
                   "model": record.model_name, "num_gpu": record.num_gpu,
                   "iterations": record.iterations,
                   "iterations_done": state.jobs.done(job_id, state.view),
                   "profile": list(job.profile) if job else [],
                   "preemptions": state.jobs.preemptions[job_id],
                   "submit": record.submit_time, "first_start": job and job.first_start,
                   "nodes": [node_name(n) for n in where.nodes] if where else [],
                   "group": list(where.group) if where else [],
                   # GPU memory it holds on each GPU (declared or measured), and whether it
                   # must run alone (it ran out of GPU memory beside others)
                   "gpu_mem_gb": job.gpu_mem_gb if job else record.gpu_mem_gb,
                   "runs_alone": bool(job and job.alone)}
            gpu_type = state.nodes.placement_type(where.slices) if where else ""
            if gpu_type:  # the type of the pool it runs on, where the spec states one
                doc["gpu_type"] = gpu_type
        elif job_id in state.jobs.past:
            entry = state.jobs.past[job_id]
            doc = {"job_id": job_id, "state": state.jobs.status_of(job_id),
                   "model": entry.record.model_name,
                   "num_gpu": entry.record.num_gpu, "iterations": entry.record.iterations,
                   "iterations_done": entry.iterations_done, "preemptions": entry.preemptions,
                   "nodes": [], "group": []}
        else:
            return None
        failure = state.jobs.failure(job_id)
        if failure is not None:  # its last failure of its own, with all the output kept
            doc["last_failure"] = status_reply.failure_doc(failure, len(failure.output),
                                                           whole=True)
    if doc["state"] in ("pending", "running"):  # its line of the status: why it waits, or
        body = status_reply.status(state, jobs=True)  # since when and how fast it runs
        pending = [j for j in body.get("jobs", []) if j["state"] == "pending"]
        for position, j in enumerate(pending, start=1):
            if j["job_id"] == job_id:
                doc["position"] = j.get("position", position)
        for j in body.get("jobs", []):
            if j["job_id"] == job_id:
                doc.update((k, j[k]) for k in _LINE_KEYS if k in j)
    try:
        doc["events"] = reader.recent_events(limit=200, job_id=job_id)
    except sqlite3.Error:
        doc["events"] = []
    return doc


# the jobs /api/status lists (an HTTP body, not a message frame: more than a status reply)
PAGE_JOBS_LIMIT = 1500
# what /api/jobs/ID takes from the job's status line (status.py, docs/waiting.md)
_LINE_KEYS = ("expected_start", "reason", "why", "ahead", "reason_ends", "guard", "tenant",
              "running_for", "slowdown")


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
