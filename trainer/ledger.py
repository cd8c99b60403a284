"""The trainers' ledger: evidence of exactly-once that does not come from the scheduler.

Why: the scheduler's log and journal are its own, already de-duplicated, view; a scheduler that
launched a job twice, or resumed it from the wrong place, could still write a clean log. So
every trainer process appends what it did to a per-node ledger, `RUN_DIR/ledger/<node>.jsonl`,
and `verdict()` judges a run from those ledgers alone.

Writing. Each record is one JSON line, written with a single `write()` to a file opened with
O_APPEND and fsynced before the trainer goes on (records are a few hundred bytes, so appends
from the processes sharing a node file never interleave). Records of one process:

* `start`: job, node, pid, incarnation (a random id per process), rank, world_size, the run
  key (`launch`: what all ranks of one launch share), `resumed` (the iteration it resumed
  from), `total`, `t` and `t_begin` (when the trainer began, before it read its checkpoint:
  before it did any of the job's work; /proc's start time is too coarse, 10 ms ticks);
* `checkpoint` (rank 0 only, the only writer of checkpoints): `iteration`, `t`. Appended
  *before* the checkpoint is made durable, so a process killed in between leaves a record
  of a checkpoint that may not have taken effect; at most its last one (the next record is
  appended only after the previous checkpoint is durable). `verdict` allows exactly that;
* `end`: `how` (finished / stopped / crashed), `last` (its last checkpointed iteration), `t`.
  A SIGKILLed process writes none.

Clocks. Wall times are `time.time()`: comparable between processes of one host, which is
all a loopback cluster has. Nodes of a real multi-host cluster must keep their clocks in
sync (NTP/PTP); the overlap check is only as good as that sync.

Judging. `verdict(records, totals, deaths)` proves, from the ledgers (and, for processes that
wrote no end record, an upper bound on their death):

1. no two runs of a job overlap in time. A run is one launch: the processes of its ranks
   (same job, world size, rendezvous and resume point; one process per rank). A run's
   interval spans its processes, each from its `t_begin` to its end record; a process
   with no end record (SIGKILLed) ends at the time its death was *observed* (`deaths`,
   {pid: wall time}, from whoever killed it or watched its pid disappear, and only if that
   time is after the process started: pids are reused). Without such an observation the
   process's interval has no sound upper bound and the verdict says so (`unbounded`);
2. the checkpointed segments tile [0, total]: each run's segment is [resumed, last durable
   checkpoint], the first run resumes at 0, each later run (in time order) exactly at the
   previous run's last durable checkpoint, and the job ends with one `finished` at total.
   A killed or crashed run's last checkpoint record may not be durable: the next run's
   resume point must then be that checkpoint or the one before it, nothing else;
3. no iteration is counted twice: no two segments overlap (a resume behind the previous
   run's checkpoint counts as one double count, as does any other pair of overlapping
   segments).
"""
from __future__ import annotations

import json
import math
import os
import secrets
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from trainer.exits import EXIT_FINISHED, EXIT_STOPPED

LEDGER_DIR = "ledger"
HOWS = ("finished", "stopped", "crashed")
EPS = 1e-6  # iterations: JSON round trips are exact; this only absorbs float noise


def ledger_path(run_dir: str | os.PathLike, node: str) -> Path:
    return Path(run_dir) / LEDGER_DIR / f"{node}.jsonl"


class Ledger:
    """One trainer process's ledger: `start`, `checkpoint` (writer rank), `end`."""

    def __init__(self, path: str | os.PathLike | None, job_id: int, node: str, rank: int = 0,
                 world_size: int = 1, launch: str = ""):
        self.path = Path(path) if path is not None else None
        self.base = {"job": int(job_id), "node": str(node), "pid": os.getpid(),
                     "incarnation": secrets.token_hex(8), "rank": int(rank)}
        self.world_size, self.launch = int(world_size), str(launch)
        self.t_begin = time.time()  # before it reads its checkpoint: before any of its work
        self.last: float | None = None
        self.ended = False

    def _append(self, kind: str, **fields: Any) -> None:
        if self.path is not None:
            append_record(self.path, {"kind": kind, **self.base, **fields, "t": time.time()})

    def start(self, resumed: float, total: float) -> None:
        self.last = float(resumed)
        self._append("start", world_size=self.world_size, launch=self.launch,
                     resumed=float(resumed), total=float(total), t_begin=self.t_begin)

    def checkpoint(self, iteration: float) -> None:
        """Call *before* making the checkpoint durable (see the module docstring)."""
        self.last = float(iteration)
        self._append("checkpoint", iteration=float(iteration))

    def end(self, how: str, **extra: Any) -> None:
        """Once, as the process ends; later calls are ignored."""
        if self.ended:
            return
        self.ended = True
        self._append("end", how=how, last=self.last, t_begin=self.t_begin, **extra)


def append_record(path: Path, record: Mapping[str, Any]) -> None:
    """One fsynced line; a failure is said on stderr and does not stop the caller (evidence
    lost must not stop training; the verdict then sees the hole and fails)."""
    line = json.dumps(dict(record), separators=(",", ":")) + "\n"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode("utf-8"))  # one write: appends never interleave
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as err:
        print(f"ledger {path}: {err}", file=sys.stderr, flush=True)


def note_reaped(run_dir: str | os.PathLike, node: str, job_id: int, pid: int) -> None:
    """The launcher (node agent) SIGKILLed a trainer that outlived its stop timeout and has
    reaped it: a `reaped` record, written after the reap, is an observed upper bound on that
    process's death, so its run stays bounded although it wrote no end record."""
    append_record(ledger_path(run_dir, node), {"kind": "reaped", "job": int(job_id),
                                               "node": str(node), "pid": int(pid),
                                               "t": time.time()})


def how_from_exit(rc: int) -> str:
    return {EXIT_FINISHED: "finished", EXIT_STOPPED: "stopped"}.get(rc, "crashed")


# -- reading -------------------------------------------------------------------------------------
def read_ledgers(run_dir: str | os.PathLike) -> tuple[list[dict], list[str]]:
    """Every record of RUN_DIR/ledger/*.jsonl, and a description of each unreadable line."""
    records, bad = [], []
    for path in sorted((Path(run_dir) / LEDGER_DIR).glob("*.jsonl")):
        with open(path, encoding="utf-8", errors="replace") as fh:
            for n, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                    if not isinstance(rec, dict) or rec.get("kind") not in (
                            "start", "checkpoint", "end", "reaped"):
                        raise ValueError("not a ledger record")
                    records.append(rec)
                except ValueError:
                    bad.append(f"{path.name}:{n}: {line.strip()[:120]!r}")
    return records, bad


# -- judging -------------------------------------------------------------------------------------
@dataclass
class Process:
    """One trainer process as its records describe it."""

    job: int
    node: str
    pid: int
    incarnation: str
    rank: int = 0
    world_size: int = 1
    launch: str = ""
    resumed: float | None = None
    total: float | None = None
    t_start: float | None = None
    checkpoints: list[tuple[float, float]] = field(default_factory=list)  # (t, iteration)
    how: str | None = None  # None: no end record
    t_end: float | None = None  # end record, else observed death, else None (unbounded)
    last_t: float = 0.0  # its latest record

    @property
    def name(self) -> str:
        return f"job {self.job} pid {self.pid} on {self.node} (rank {self.rank})"


@dataclass
class Run:
    """One launch of a job: its ranks' processes."""

    job: int
    procs: list[Process]

    @property
    def start(self) -> float:
        return min(p.t_start for p in self.procs)

    @property
    def end(self) -> float | None:
        ends = [p.t_end for p in self.procs]
        return None if any(e is None for e in ends) else max(ends)

    @property
    def lead(self) -> Process:
        return min(self.procs, key=lambda p: p.rank)

    @property
    def name(self) -> str:
        return " + ".join(p.name for p in sorted(self.procs, key=lambda p: p.rank))


@dataclass
class LedgerVerdict:
    processes: int = 0
    runs: dict[int, int] = field(default_factory=dict)  # job -> runs
    overlaps: int = 0
    gaps: int = 0
    double_counts: int = 0
    finishes: dict[int, int] = field(default_factory=dict)  # job -> finished runs
    killed: int = 0  # processes with no end record
    unbounded: int = 0  # of those, with no observed death
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def totals(self) -> dict[str, Any]:
        runs = list(self.runs.values())
        return {"processes": self.processes, "jobs": len(self.runs), "runs": sum(runs),
                "max_runs_per_job": max(runs, default=0),
                "jobs_with_several_runs": sum(1 for r in runs if r > 1),
                "runs_per_job": {n: runs.count(n) for n in sorted(set(runs))},  # runs: jobs
                "overlaps": self.overlaps, "gaps": self.gaps,
                "double_counts": self.double_counts,
                "finishes": sum(self.finishes.values()), "killed": self.killed,
                "unbounded": self.unbounded, "problems": len(self.problems)}


def _processes(records: Iterable[Mapping], problems: list[str]) -> list[Process]:
    procs: dict[tuple, Process] = {}
    for rec in records:
        try:
            key = (int(rec["job"]), str(rec["node"]), int(rec["pid"]), str(rec["incarnation"]))
            p = procs.get(key)
            if p is None:
                p = procs[key] = Process(*key, rank=int(rec.get("rank", 0)))
            t = float(rec["t"])
            p.last_t = max(p.last_t, t)
            if rec.get("t_begin") is not None:
                p.t_start = float(rec["t_begin"])
            if rec["kind"] == "start":
                p.world_size, p.launch = int(rec.get("world_size", 1)), str(rec.get("launch", ""))
                p.resumed, p.total = float(rec["resumed"]), float(rec["total"])
                p.t_start = min(p.t_start if p.t_start is not None else t, t)
            elif rec["kind"] == "checkpoint":
                p.checkpoints.append((t, float(rec["iteration"])))
            elif rec["kind"] == "end":
                if p.how is not None:
                    problems.append(f"{p.name}: two end records")
                if rec.get("how") not in HOWS:
                    problems.append(f"{p.name}: end record says how={rec.get('how')!r}")
                p.how, p.t_end = str(rec.get("how")), t
        except (KeyError, TypeError, ValueError) as err:
            problems.append(f"malformed ledger record ({err!r}): {dict(rec)!r}"[:300])
    out = list(procs.values())
    for p in out:
        p.checkpoints.sort()
        if p.t_start is None:
            p.t_start = min([p.last_t] + [t for t, _ in p.checkpoints])
    return out


def _runs(procs: list[Process]) -> dict[int, list[Run]]:
    """Group processes into launches: one process per rank, same job/world/launch/resume."""
    groups: dict[tuple, list[Run]] = {}
    for p in sorted(procs, key=lambda p: p.t_start):
        key = (p.job, p.world_size, p.launch, p.resumed)
        if p.world_size <= 1 or p.resumed is None:
            groups.setdefault(key, []).append(Run(p.job, [p]))
            continue
        for run in groups.setdefault(key, []):
            if p.rank not in {q.rank for q in run.procs}:
                run.procs.append(p)
                break
        else:
            groups[key].append(Run(p.job, [p]))
    by_job: dict[int, list[Run]] = {}
    for runs in groups.values():
        for run in runs:
            by_job.setdefault(run.job, []).append(run)
    for runs in by_job.values():
        runs.sort(key=lambda r: r.start)
    return by_job


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= EPS * max(1.0, abs(a), abs(b))


def _is_total(x: float, total: float) -> bool:
    """The job's total: torch trainers run whole iterations, ceil(total) of them."""
    return _close(x, total) or _close(x, math.ceil(total - EPS))


def verdict(records: Iterable[Mapping], totals: Mapping[int, float],
            deaths: Mapping[int, float] | None = None,
            unreadable: Iterable[str] = ()) -> LedgerVerdict:
    """Judge the ledgers (see the module docstring). `totals`: {job: total iterations} of
    every job that should have run; `deaths`: {pid: wall time its death was observed}."""
    records = list(records)
    seen: dict[int, list[float]] = {}  # pid -> times its death was observed
    for pid, t in (deaths or {}).items():
        seen.setdefault(pid, []).append(float(t))
    for rec in records:  # deaths a launcher observed when it reaped a SIGKILLed trainer
        if rec.get("kind") == "reaped" and isinstance(rec.get("pid"), int):
            seen.setdefault(rec["pid"], []).append(float(rec["t"]))
    out = LedgerVerdict()
    out.problems += [f"unreadable ledger line {b}" for b in unreadable]
    procs = _processes([r for r in records if r.get("kind") != "reaped"], out.problems)
    out.processes = len(procs)
    for p in procs:
        if p.how is None:
            out.killed += 1
            # the first observation after it began (pids are reused)
            died = min((t for t in seen.get(p.pid, ()) if t >= p.t_start), default=None)
            if died is not None:
                p.t_end = max(died, p.last_t)
            else:
                out.unbounded += 1
                out.problems.append(f"{p.name} wrote no end record and its death was not "
                                    f"observed: its run has no upper bound")
    by_job = _runs(procs)
    for job in sorted(set(by_job) - set(totals)):
        out.problems.append(f"job {job} ran but is not one of the run's jobs")
    for job in sorted(totals):
        runs = by_job.get(job, [])
        out.runs[job] = len(runs)
        _judge_job(job, float(totals[job]), runs, out)
    return out


def _judge_job(job: int, total: float, runs: list[Run], out: LedgerVerdict) -> None:
    say = out.problems.append
    if not runs:
        out.finishes[job] = 0
        say(f"job {job}: no trainer ever ran it")
        return
    # (1) distinct launches never overlap in time
    for i, a in enumerate(runs):
        for b in runs[i + 1:]:
            a_end, b_end = a.end, b.end
            if (a_end is None or b.start < a_end) and (b_end is None or a.start < b_end):
                if a_end is None or b_end is None:
                    continue  # unbounded: already a problem, not counted twice
                out.overlaps += 1
                say(f"job {job}: runs overlap in time: [{a.start:.3f}, {a_end:.3f}] "
                    f"{a.name} and [{b.start:.3f}, {b_end:.3f}] {b.name}")
    for run in runs:
        ranks = sorted(p.rank for p in run.procs)
        if run.lead.world_size > 1 and ranks != list(range(run.lead.world_size)):
            say(f"job {job}: a launch of world size {run.lead.world_size} ran ranks {ranks}")
    # (2) and (3): the segments, in time order, tile [0, total]
    finished = [r for r in runs if r.lead.how == "finished"]
    out.finishes[job] = len(finished)
    if len(finished) > 1:
        say(f"job {job}: finished {len(finished)} times: " + "; ".join(r.name for r in finished))
    segments: list[tuple[float, float]] = []
    prev_end: tuple[float, ...] = (0.0,)  # where the next run may resume
    prev_name = "the job's submission"
    for run in runs:
        lead = run.lead
        if lead.resumed is None:  # ended before it knew where to resume: did no work
            if lead.checkpoints:
                say(f"job {job}: {lead.name} checkpointed with no start record")
            continue
        r = lead.resumed
        if not any(_close(r, e) for e in prev_end):
            if r > max(prev_end):
                out.gaps += 1
                say(f"job {job}: gap: {run.name} resumed at {r} but {prev_name} left it at "
                    f"{_fmt(prev_end)}")
            else:
                out.double_counts += 1
                say(f"job {job}: double count: {run.name} resumed at {r}, behind "
                    f"{prev_name}'s checkpoint {_fmt(prev_end)}")
        its = [i for _, i in lead.checkpoints]
        if any(b < a - EPS for a, b in zip([r] + its, its)):
            say(f"job {job}: {lead.name} checkpoints go backwards: {[r] + its}")
        last = its[-1] if its else r
        if lead.how in ("finished", "stopped"):
            prev_end = (last,)
        else:  # killed or crashed: its last checkpoint record may not have taken effect
            prev_end = (last, its[-2] if len(its) > 1 else r) if its else (r,)
        prev_name = run.name
        segments.append((r, max(prev_end)))
        if lead.total is not None and not _is_total(lead.total, total):
            say(f"job {job}: {lead.name} was told the total is {lead.total}, not {total}")
        if lead.how == "finished" and not _is_total(last, total):
            out.gaps += 1
            say(f"job {job}: {run.name} finished at {last} of {total}")
    if not finished:
        say(f"job {job}: never finished (last run {runs[-1].name} ended "
            f"{runs[-1].lead.how or 'killed'} at {_fmt(prev_end)} of {total})")
    elif runs[-1].lead.how != "finished":
        say(f"job {job}: ran again after it finished: {runs[-1].name}")
    # any other pair of checkpointed segments that overlap counts iterations twice
    for i, (a0, a1) in enumerate(segments):
        for b0, b1 in segments[i + 2:]:
            if min(a1, b1) - max(a0, b0) > EPS:
                out.double_counts += 1
                say(f"job {job}: double count: segments [{a0}, {a1}] and [{b0}, {b1}] overlap")


def _fmt(ends: tuple[float, ...]) -> str:
    return " or ".join(str(e) for e in ends)


def judge_run_dir(run_dir: str | os.PathLike, totals: Mapping[int, float],
                  deaths: Mapping[int, float] | None = None) -> LedgerVerdict:
    """read_ledgers + verdict for one run directory."""
    records, bad = read_ledgers(run_dir)
    return verdict(records, totals, deaths, unreadable=bad)
