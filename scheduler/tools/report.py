"""`interlace-report RUN_DIR`: the simulator's metrics, computed from a live run's logs.

The scheduler service logs every job's life in trace seconds (`job_submitted`,
`job_started`, `job_stopped`, `job_finished` with submit/start/end) to RUN_DIR/scheduler.log,
so a live run can be scored exactly like a simulated one and the two compared side by side:
same `JobOutcome`s, same `summarize`, same table and the same JSON keys as `interlace-sim`.
`wall_s` is the live run's wall duration: from the scheduler's start to the last finish.
Cancelled and failed jobs did not complete: they are shown apart, with the iterations they
did, and none of their times is in the JCT figures; a relaunch after a job's own failure is
counted as a failure, not a preemption.

Unreadable lines are skipped (and counted on stderr); a journal that cannot be read is a
warning naming it (the log stands); a missing run dir, a missing log or a run with no
finished job is one line on stderr and exit status 1.
"""
from __future__ import annotations

import argparse
import bisect
import dataclasses
import json
import math
import sqlite3
import sys
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Iterable, Sequence

from scheduler.core.metrics import JobOutcome, dumps, summarize, summary_dict
from scheduler.sim.simulator import SimResult
from specs.limits import MAX_GPUS, MAX_TRACE_SECONDS, show
from specs.options import OneLineParser

PROG = "interlace-report"
LOG_NAME = "scheduler.log"
KEPT_RUNNING = ("regrouped", "moved")  # stop reasons of a job the plan keeps: no preemption


class ReportError(Exception):
    """The run cannot be reported; the text is the one line the user sees."""


@dataclass
class _Job:
    """What the logs say about one job, folded event by event."""

    job_id: int
    num_gpu: int = 0
    model: str = ""
    submit: float | None = None
    start: float | None = None
    end: float | None = None
    preemptions: int | None = None
    starts: int = 0
    stops: int = 0  # preemptions, counted from the stops when no finish says how many
    iterations: float | None = None  # submitted with
    ended: str = ""  # "cancelled" or "failed": it ended without completing
    done: float | None = None  # iterations it did, where it ended so
    failures: int = 0  # runs that failed of its own program
    regroup_stops: int = 0  # stops to restart it in another group or place (no preemption)
    regroups: int = 0  # regroups in place: a new group on the same GPUs, no restart
    exit: str = ""  # how its program last ended, where it failed for good


@dataclass(frozen=True)
class EndedEarly:
    """A job that ended without completing: cancelled by a user, or failed for good."""

    job_id: int
    state: str  # "cancelled" or "failed"
    iterations_done: float | None
    iterations: float | None
    exit: str = ""  # a failed job's: how its program last ended


@dataclass
class LiveRun:
    """A live run as read back from its scheduler log."""

    policy: str
    preset: str
    outcomes: list[JobOutcome]
    utilisation: list[tuple[float, int]]
    total_gpus: int
    wall_s: float
    time_scale: float | None
    skipped: int = 0  # unreadable lines
    unfinished: list[int] = field(default_factory=list)
    restart_overhead_s: float | None = None  # mean trace seconds from decision to progress
    # interleaving as the rounds ran it: distinct groups of two or more jobs, and the jobs
    # that ran in one
    groups: int = 0
    jobs_grouped: int = 0
    warnings: list[str] = field(default_factory=list)  # what was read around, for stderr
    ended_early: list[EndedEarly] = field(default_factory=list)  # not in the JCT figures
    failures: int = 0  # runs that failed of the jobs' own programs (relaunched or not)
    regroup_stops: int = 0  # stops to restart a job the plan kept in another group or place
    regroups: int = 0  # regroups in place (same GPUs, no restart)

    def ended(self, state: str) -> list[EndedEarly]:
        return [e for e in self.ended_early if e.state == state]

    def result(self) -> SimResult:
        """The run in the simulator's result type, so its table and plot apply unchanged."""
        return SimResult(policy=self.policy, preset=self.preset, outcomes=self.outcomes,
                         summary=summarize(self.outcomes, self.utilisation, self.total_gpus),
                         utilisation=self.utilisation, wall_s=self.wall_s)


def read_records(path: Path) -> tuple[list[dict[str, Any]], int]:
    """The JSON objects of a JSON-lines file, and how many lines were not one."""
    records, skipped = [], 0
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                skipped += 1
                continue
            if isinstance(record, dict) and isinstance(record.get("event"), str):
                records.append(record)
            else:
                skipped += 1
    return records, skipped


def _wall(record: dict[str, Any]) -> float | None:
    """The record's wall time in epoch seconds (structlog's ISO `ts`), or None."""
    ts = record.get("ts")
    if not isinstance(ts, str):
        return None
    try:
        return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


class _Impossible(Exception):
    """A number no scheduler writes (inf, nan, beyond any trace's clock)."""

    def __init__(self, key: str, value: float):
        super().__init__(key, value)
        self.key, self.value = key, value


def _num(record: dict[str, Any], key: str) -> float | None:
    """A number of the log, None when absent or not a number; _Impossible when it is one no
    scheduler writes: JSON lines may carry Infinity and NaN, and a figure computed from them
    would be printed as if measured (or as JSON no parser reads); a trace clock never runs
    below 0."""
    value = record.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if not (math.isfinite(value) and 0 <= value <= MAX_TRACE_SECONDS):
        raise _Impossible(key, value)
    return float(value)


def _job_id(record: dict[str, Any]) -> int | None:
    value = record.get("job_id")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _cells(record: dict[str, Any]) -> set[tuple[str, int]]:
    """(node, gpu) pairs a started job occupies, from `gpus` = {node: [gpu, ...]}."""
    gpus = record.get("gpus")
    if not isinstance(gpus, dict):
        return set()
    return {(str(node), g) for node, ids in gpus.items() if isinstance(ids, list)
            for g in ids if isinstance(g, int)}


def fold(records: Iterable[dict[str, Any]]) -> LiveRun:
    """Fold scheduler log records, in file order, into outcomes and a GPU-busy timeline."""
    jobs: dict[int, _Job] = {}
    busy: dict[int, set[tuple[str, int]]] = {}  # running job -> its GPU cells
    timeline: list[tuple[float, int]] = []
    policy, preset, total_gpus, scale = "?", "default", 0, None
    first_wall = last_finish_wall = None
    groups: set[frozenset[int]] = set()

    def mark(now: float | None) -> None:
        if now is None:
            return
        count = len(set().union(*busy.values())) if busy else 0
        if timeline and timeline[-1][0] == now:
            timeline[-1] = (now, count)
        else:
            timeline.append((now, count))

    record: dict[str, Any] = {}
    try:
        for record in records:
            event, wall = record["event"], _wall(record)
            if first_wall is None and wall is not None:
                first_wall = wall
            if event == "scheduler_start":
                policy = str(record.get("policy", policy))
                preset = str(record.get("preset", preset))
                gpus = record.get("gpus")
                total_gpus = gpus if isinstance(gpus, int) and 0 < gpus <= MAX_GPUS else total_gpus
                scale = _num(record, "time_scale") or scale
                if busy:  # a restarted scheduler: what ran before its crash was stopped then
                    busy.clear()
                    mark(_num(record, "clock"))
                continue
            if event == "round":
                groups.update(_groups(record))
                continue
            job_id = _job_id(record)
            if job_id is None or event not in ("job_submitted", "job_started", "job_stopped",
                                               "job_finished", "job_cancelled", "job_failed",
                                               "job_run_failed", "job_regrouped"):
                continue
            job = jobs.setdefault(job_id, _Job(job_id))
            if isinstance(record.get("num_gpu"), int):
                job.num_gpu = record["num_gpu"]
            if isinstance(record.get("model"), str):
                job.model = record["model"]
            if event == "job_submitted":
                job.submit = _num(record, "submit")
                job.iterations = _num(record, "iterations")
            elif event in ("job_cancelled", "job_failed"):
                job.ended = "cancelled" if event == "job_cancelled" else "failed"
                job.done = _num(record, "iterations")
                job.failures += event == "job_failed"
                if isinstance(record.get("exit"), str):
                    job.exit = record["exit"]
                busy.pop(job_id, None)
                mark(_num(record, "now"))
            elif event == "job_run_failed":
                job.failures += 1
            elif event == "job_regrouped":
                job.regroups += 1
            elif event == "job_started":
                job.starts += 1
                job.submit = _num(record, "submit") if job.submit is None else job.submit
                now = _num(record, "now")
                first = _num(record, "first_start")
                if job.start is None:
                    job.start = first if first is not None else now
                busy[job_id] = _cells(record)
                if not job.num_gpu:
                    job.num_gpu = len(busy[job_id])
                mark(now)
            elif event == "job_stopped":
                if record.get("reason") in KEPT_RUNNING:
                    job.regroup_stops += 1
                elif not record.get("failure"):
                    job.stops += 1
                busy.pop(job_id, None)
                mark(_num(record, "now"))
            else:  # job_finished
                job.submit = _num(record, "submit") if record.get("submit") is not None \
                    else job.submit
                start = _num(record, "start")
                job.start = start if start is not None else job.start
                job.end = _num(record, "end")
                if isinstance(record.get("preemptions"), int):
                    job.preemptions = record["preemptions"]
                busy.pop(job_id, None)
                mark(job.end)
                if wall is not None:
                    last_finish_wall = wall
    except _Impossible as err:
        raise ReportError(
            f"{LOG_NAME}: {record.get('event')}"
            f"{'' if record.get('job_id') is None else ' of job ' + str(record.get('job_id'))}: "
            f"{err.key} {err.value!r} (must be finite, in [0, {show(MAX_TRACE_SECONDS)}] s): the "
            "log is corrupt, so no figure is computed from it") from None
    ordered = sorted(jobs.values(), key=lambda j: j.job_id)
    outcomes = [JobOutcome(j.job_id, j.num_gpu, j.model, j.submit, j.start, j.end,
                           j.preemptions if j.preemptions is not None else j.stops, j.starts)
                for j in ordered if j.submit is not None and not j.ended]
    ended_early = [EndedEarly(j.job_id, j.ended, j.done, j.iterations, j.exit)
                   for j in ordered if j.ended]
    for o in outcomes:  # out of order, a JCT or a queueing time would come out negative
        times = [t for t in (o.submit, o.start, o.end) if t is not None]
        if times != sorted(times):
            raise ReportError(
                f"{LOG_NAME}: job {o.job_id}: submit {o.submit:g}, start "
                f"{'-' if o.start is None else f'{o.start:g}'}, end "
                f"{'-' if o.end is None else f'{o.end:g}'} are out of order (a job starts after "
                "its submit and ends after its start): the log is corrupt, so no figure is "
                "computed from it")
    if not total_gpus:
        total_gpus = max((len(c) for c in busy.values()), default=0) or 1
    wall_s = (last_finish_wall - first_wall) if first_wall is not None \
        and last_finish_wall is not None else 0.0
    return LiveRun(policy=policy, preset=preset, outcomes=outcomes, utilisation=timeline,
                   total_gpus=total_gpus, wall_s=max(wall_s, 0.0), time_scale=scale,
                   unfinished=[o.job_id for o in outcomes if o.end is None],
                   groups=len(groups), jobs_grouped=len(set().union(*groups)),
                   ended_early=ended_early, failures=sum(j.failures for j in ordered),
                   regroup_stops=sum(j.regroup_stops for j in ordered),
                   regroups=sum(j.regroups for j in ordered))


def _groups(record: dict[str, Any]) -> set[frozenset[int]]:
    """The groups of two or more jobs a `round` record ran (anything else in it is skipped)."""
    listed = record.get("groups")
    if not isinstance(listed, list):
        return set()
    return {frozenset(g) for g in listed if isinstance(g, list) and len(g) > 1
            and all(isinstance(j, int) for j in g)}


def load_run(run_dir: Path | str) -> LiveRun:
    """Read RUN_DIR/scheduler.log; ReportError with one clear line when it cannot be scored."""
    run = Path(run_dir)
    if not run.is_dir():
        raise ReportError(f"{run}: no such run directory")
    log = run / LOG_NAME
    if not log.is_file():
        raise ReportError(f"{run}: no {LOG_NAME} (is this a live run directory?)")
    try:
        records, skipped = read_records(log)
    except OSError as err:
        raise ReportError(f"{log}: cannot read ({err.strerror or err})") from None
    live = fold(records)
    live.skipped = skipped
    _fill_from_journal(run, live)
    live.restart_overhead_s = restart_overhead(run, records, live.time_scale)
    if not any(o.end is not None for o in live.outcomes):
        early = ", ".join(f"{len(live.ended(s))} {s}" for s in ("cancelled", "failed")
                          if live.ended(s))
        raise ReportError(f"{log}: no finished jobs to report"
                          + (f" ({early})" if early else "")
                          + (f" ({skipped} unreadable lines)" if skipped else ""))
    return live


def _fill_from_journal(run: Path, live: LiveRun) -> None:
    """Ends the log missed: the journal commits an end before the log line is written, so a
    scheduler killed between the two leaves the journal (the truth) one ahead. A job the
    journal has cancelled or failed did not complete: it goes apart, out of the figures."""
    path = run / "journal.db"
    missing = {o.job_id: i for i, o in enumerate(live.outcomes) if o.end is None}
    if not missing or not path.is_file():
        return
    from scheduler.live.journal import Journal, JournalError

    try:
        with Journal(path) as journal:
            done = [e for e in journal.finished() if e.record.job_id in missing]
    except (OSError, sqlite3.Error, JournalError) as err:
        # a journal gone, unreadable or not SQLite: the log stands, and the user is told;
        # anything else is a bug and is not hidden
        live.warnings.append(f"{path}: cannot read the journal ({err}); "
                             f"finishes are taken from {LOG_NAME} only")
        return
    early = set()
    for entry in done:
        i = missing[entry.record.job_id]
        if entry.phase != "finished":
            early.add(i)
            live.ended_early.append(EndedEarly(entry.record.job_id, entry.phase,
                                               entry.iterations_done, entry.record.iterations))
            continue
        o = live.outcomes[i]
        live.outcomes[i] = dataclasses.replace(
            o, start=o.start if o.start is not None else entry.first_start_trace,
            end=entry.finish_trace)
    live.outcomes = [o for i, o in enumerate(live.outcomes) if i not in early]
    live.ended_early.sort(key=lambda e: e.job_id)
    live.unfinished = [o.job_id for o in live.outcomes if o.end is None]


def restart_overhead(run: Path, records: list[dict[str, Any]],
                     time_scale: float | None) -> float | None:
    """The restart overhead the live system paid, in trace seconds (mean over starts, since
    JCT grows with the total paid): from the round that decided a launch to the trainer's
    start of progress. This is what the simulator's restart overhead stands for, measured
    rather than assumed. Each start is charged from the last decision before it: a launch
    overtaken by a later round (stopped before its trainer began) has no start of its own."""
    decided: dict[int, list[float]] = {}
    for rec in records:
        wall = _wall(rec) if rec.get("event") == "round" else None
        if wall is not None:
            for job_id in rec.get("launches") or []:
                if isinstance(job_id, int):
                    decided.setdefault(job_id, []).append(wall)
    costs = []
    for job_id, rounds in decided.items():
        path = run / f"trainer-{job_id}.log"
        if not path.is_file():
            continue
        rounds.sort()
        for rec in read_records(path)[0]:
            start = _wall(rec) if rec.get("event") == "trainer_start" else None
            if start is None:
                continue
            before = bisect.bisect_right(rounds, start)
            if before:
                costs.append(start - rounds[before - 1])
    if not costs or not time_scale:
        return None
    return sum(costs) / len(costs) * time_scale


def ended_lines(live: LiveRun) -> list[str]:
    """The jobs that ended without completing, apart from the figures, and the failed runs."""
    lines = []
    for state in ("cancelled", "failed"):
        ended = live.ended(state)
        if not ended:
            continue
        listed = ", ".join(f"{e.job_id} ({_its(e.iterations_done)}/{_its(e.iterations)} it)"
                           for e in ended[:10])
        lines.append(f"{state}: {len(ended)} job{'' if len(ended) == 1 else 's'}, not in the "
                     f"JCT figures: {listed}{' ...' if len(ended) > 10 else ''}")
        lines += [f"  job {e.job_id}: {e.exit[:200]}" for e in ended[:10] if e.exit]
    if live.failures:
        lines.append(f"failed runs: {live.failures} (a job's own program failed; counted "
                     "apart from preemptions)")
    if live.regroups or live.regroup_stops:
        lines.append(f"regroups: {live.regroups} in place, {live.regroup_stops} by a stop and "
                     "a relaunch (a job the plan kept running, moved or regrouped; not "
                     "preemptions)")
    return lines


def _its(value: float | None) -> str:
    return "?" if value is None else f"{value:.0f}"


def _parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog=PROG, description=(
        "Metrics of a live run (JCT average/median/p99, makespan, queueing, GPU utilisation, "
        "preemptions) from its scheduler.log, as interlace-sim reports them: the table in "
        "hours of trace time, --json in trace seconds."))
    p.add_argument("run_dir", metavar="RUN_DIR", help="the run directory (holds scheduler.log)")
    p.add_argument("--json", action="store_true",
                   help="one JSON object (the keys of interlace-sim --json)")
    p.add_argument("--plot", metavar="FILE.png", help="draw the JCT CDF")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from scheduler.sim.cli import format_table, plot_cdf

    try:
        live = load_run(args.run_dir)
    except ReportError as err:
        print(f"{PROG}: {err}", file=sys.stderr)
        return 1
    if live.skipped:
        print(f"{PROG}: skipped {live.skipped} unreadable lines in {LOG_NAME}", file=sys.stderr)
    for warning in live.warnings:
        print(f"{PROG}: warning: {warning}", file=sys.stderr)
    result = live.result()
    if args.json:
        print(dumps(summary_dict(live.policy, result.summary, round(live.wall_s, 4),
                                 preset=live.preset, source="live", time_scale=live.time_scale,
                                 unfinished=len(live.unfinished),
                                 restart_overhead_s=live.restart_overhead_s,
                                 groups=live.groups, jobs_grouped=live.jobs_grouped,
                                 cancelled=len(live.ended("cancelled")),
                                 failed=len(live.ended("failed")), failures=live.failures,
                                 regroups=live.regroups, regroup_stops=live.regroup_stops,
                                 ended_early=[dataclasses.asdict(e) for e in live.ended_early])),
              flush=True)
    else:
        print(format_table([result]))
        if live.restart_overhead_s is not None:
            print(f"measured restart overhead: {live.restart_overhead_s:.1f} trace s per "
                  f"(re)start (mean, from decision to progress)")
        print(f"interleaved: {live.groups} group{'' if live.groups == 1 else 's'} of two or "
              f"more jobs formed, {live.jobs_grouped} of {len(result.outcomes)} jobs ran in one")
        for line in ended_lines(live):
            print(line)
        if live.unfinished:
            print(f"({len(live.unfinished)} jobs had not finished and are not counted: "
                  f"{', '.join(map(str, live.unfinished[:10]))}"
                  f"{' ...' if len(live.unfinished) > 10 else ''})")
    if args.plot:
        try:
            plot_cdf([result], Path(args.plot),
                     title=f"live run {Path(args.run_dir).resolve().name}: {live.policy} on "
                           f"{live.total_gpus} GPUs, preset {live.preset}")
        except (OSError, ValueError) as err:
            print(f"{PROG}: cannot write {args.plot}: {err}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
