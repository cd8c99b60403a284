"""`interlace-feed`: replay a trace onto a live scheduler at a chosen time scale.

Each job goes to the `scheduler` service as `job.submit` when its scaled submit time comes
(wall offset = submit_time / time_scale from the feeder's start). A job counts as fed once
the scheduler acknowledges it; the scheduler de-duplicates by job id, so a restarted feeder
may simply replay the whole trace (`--speedup` does that without waiting). With `--wait` the
feeder then polls `status.query` until every job it fed has finished, which is what a demo
or a script needs to know before reading the report.

A trace whose job ids the scheduler knows already for other jobs (another trace fed before)
is refused before anything is sent: fed, its jobs would be taken for a replay and never run.
It is not renumbered unasked, since a replay must map onto the same ids; `--id-offset N`
renumbers it, the same way on every replay.

Exit status: 0 all jobs acknowledged (and finished, with --wait); 1 the scheduler could not be
reached, refused a job, knows its ids for other jobs, or did not finish in time; 2 bad
arguments or trace; 130 interrupted.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Sequence, TextIO

from specs.limits import MAX_ID, MAX_RETRIES, MAX_TIME_SCALE, MAX_TRACE_SECONDS, MAX_WAIT_S
from specs.options import OneLineParser, number
from traces import TraceError, default_trace_path, read_trace
from traces.record import JobRecord, record_to_map

PROG = "interlace-feed"
SERVICE = "scheduler"
PROGRESS_EVERY_S = 5.0  # how often --wait reports progress when stdout is not a terminal


class FeedError(Exception):
    """Feeding cannot go on; the text is the one line the user sees."""


class Interrupted(Exception):
    """SIGINT/SIGTERM while waiting; the caller exits 130."""


@dataclass
class FeedResult:
    """What happened to each job, in submission order."""

    accepted: list[int] = field(default_factory=list)
    duplicates: list[int] = field(default_factory=list)
    refused: dict[int, str] = field(default_factory=dict)

    @property
    def acked(self) -> list[int]:
        return self.accepted + self.duplicates


def job_map(record: JobRecord) -> dict[str, Any]:
    """The wire form of a record, exactly as the scheduler's journal reads it back."""
    return record_to_map(record)  # one definition of the wire form


def schedule(records: Sequence[JobRecord], time_scale: float,
             speedup: bool = False) -> list[tuple[float, JobRecord]]:
    """(wall offset in seconds, record) in submission order; ties keep the trace's order."""
    ordered = sorted(records, key=lambda r: r.submit_time)  # stable
    if speedup:
        return [(0.0, r) for r in ordered]
    return [(max(r.submit_time, 0.0) / time_scale, r) for r in ordered]


class Feeder:
    """Submits records through a Requester; retries while the scheduler is away.

    `wait(seconds)` returns True when the feeder should stop (a threading.Event's wait), so
    the pacing sleeps are interruptible and tests can stub them.
    """

    def __init__(self, requester: Any, log: Any, *, time_scale: float = 1.0,
                 speedup: bool = False, patience: float = 30.0, where: str = "the broker",
                 clock: Callable[[], float] = time.monotonic,
                 wait: Callable[[float], bool] | None = None):
        if not time_scale > 0:
            raise ValueError("time_scale must be > 0")
        self.requester, self.log = requester, log
        self.time_scale, self.speedup, self.patience = float(time_scale), speedup, patience
        self.clock, self.where = clock, where
        self.wait = wait if wait is not None else threading.Event().wait

    def feed(self, records: Sequence[JobRecord], out: TextIO | None = None) -> FeedResult:
        """Submit every record at its scaled time; FeedError if the scheduler stays away.

        `out` gets a progress line now and then (rewritten in place on a terminal).
        """
        result = FeedResult()
        start = self.clock()
        progress = _Progress(out, self.clock, first_after=PROGRESS_EVERY_S)
        plan = schedule(records, self.time_scale, self.speedup)
        for done, (offset, record) in enumerate(plan):
            progress.show(f"{done}/{len(plan)} jobs fed")
            delay = start + offset - self.clock()
            if delay > 0 and self.wait(delay):
                raise Interrupted()
            lag = self.clock() - start - offset
            outcome = self.submit(record)
            if outcome == "accepted":
                result.accepted.append(record.job_id)
            elif outcome == "duplicate":
                result.duplicates.append(record.job_id)
            else:
                result.refused[record.job_id] = outcome
            self.log.info("job_fed", job_id=record.job_id, trace_submit=record.submit_time,
                          offset=round(offset, 3), lag=round(lag, 3),
                          outcome="refused" if record.job_id in result.refused else outcome)
        progress.show(f"{len(plan)}/{len(plan)} jobs fed", force=progress.tty)
        progress.end()
        return result

    def submit(self, record: JobRecord, key: str | None = None) -> str:
        """'accepted', 'duplicate', or the refusal reason; FeedError when unreachable.
        `key` names the submission (default: a fresh one)."""
        return self._submit(record, key)[0]

    def submit_new(self, record: JobRecord, key: str | None = None) -> tuple[str, int | None]:
        """The record under an id the scheduler gives (its own is ignored): ('accepted', the
        id) or (the refusal reason, None); FeedError when unreachable."""
        return self._submit(record, key, new_id=True)

    def _submit(self, record: JobRecord, key: str | None,
                **fields: bool) -> tuple[str, int | None]:
        from broker.client import TRANSIENT, RequestFailed, RequestTimeout

        deadline = self.clock() + self.patience
        # one key for this submission, sent with every try of it: a scheduler that journaled
        # an earlier try and died before its reply answers a later one with the job that try
        # made (`already`), never a second job or a `duplicate` to be read as an id taken
        key = key or uuid.uuid4().hex
        while True:
            try:
                reply = self.requester.request(SERVICE, "job.submit", job=job_map(record),
                                               submission=key, **fields)
            except RequestTimeout:
                raise FeedError(f"cannot reach the scheduler via {self.where}: no answer to "
                                f"job {record.job_id} after {1 + self.requester.retries} tries "
                                f"of {self.requester.timeout:g}s") from None
            except RequestFailed as err:
                if err.code not in TRANSIENT:
                    self.log.warning("job_refused", job_id=record.job_id, code=err.code,
                                     reason=err.reason)
                    return f"{err.code}: {err.reason}", None
                if self.clock() >= deadline:
                    raise FeedError(f"the broker could not reach the scheduler for "
                                    f"{self.patience:g}s ({err.code}: {err.reason})") from None
                self.log.info("scheduler_not_ready", job_id=record.job_id, reason=err.reason)
                if self.wait(min(0.5, max(deadline - self.clock(), 0.01))):
                    raise Interrupted() from None
                continue
            body = reply.get("body") or {}
            given = body.get("job_id") if isinstance(body.get("job_id"), int) else None
            if reply.get("ok") and body.get("accepted") is True:
                return "accepted", given
            if reply.get("ok") and body.get("reason") == "duplicate":
                return "duplicate", given
            reason = f"not accepted: {body.get('reason', body)}"
            self.log.warning("job_refused", job_id=record.job_id, reason=reason)
            return reason, None

    def taken(self, records: Sequence[JobRecord]) -> tuple[list[tuple[int, str]], int]:
        """The records whose ids the scheduler lists for a different job (GPUs or
        iterations differ: not a replay of the same trace), each with what differs; and
        the highest id it knows. One `status.query`, waiting up to `patience` for a
        scheduler to register, as a submission would."""
        from broker.client import TRANSIENT, RequestFailed, RequestTimeout

        deadline = self.clock() + self.patience
        while True:
            try:
                reply = self.requester.request(SERVICE, "status.query", what="all")
                break
            except RequestTimeout:
                raise FeedError(f"cannot reach the scheduler via {self.where}: no answer to "
                                f"status.query after {1 + self.requester.retries} tries of "
                                f"{self.requester.timeout:g}s") from None
            except RequestFailed as err:
                if err.code not in TRANSIENT:
                    raise FeedError(f"status.query refused: {err.code}: {err.reason}") \
                        from None
                if self.clock() >= deadline:
                    raise FeedError(f"the broker could not reach the scheduler for "
                                    f"{self.patience:g}s ({err.code}: {err.reason})") from None
                self.log.info("scheduler_not_ready", reason=err.reason)
                if self.wait(min(0.5, max(deadline - self.clock(), 0.01))):
                    raise Interrupted() from None
        body = reply.get("body") or {}
        known = {j["job_id"]: j for j in body.get("jobs") or () if isinstance(j, dict)
                 and isinstance(j.get("job_id"), int)}
        highest = max([body.get("max_job_id") or 0, *known])
        found = []
        for r in records:
            line = known.get(r.job_id)
            if line is None:
                continue
            differs = [f"{name} {line[name]} there, {mine} here"
                       for name, mine in (("num_gpu", r.num_gpu), ("iterations", r.iterations))
                       if name in line and line[name] != mine]
            if differs:
                found.append((r.job_id, ", ".join(differs)))
        return found, highest

    def wait_finished(self, job_ids: Sequence[int], timeout: float | None, poll: float,
                      out: TextIO | None = None) -> dict[str, int]:
        """Poll status.query until every job in `job_ids` has finished; the last counts."""
        from broker.client import TRANSIENT, RequestFailed, RequestTimeout

        want = set(job_ids)
        deadline = None if timeout is None else self.clock() + timeout
        progress = _Progress(out, self.clock)
        away_since = None  # when the broker started saying there is no scheduler
        while True:
            try:
                reply = self.requester.request(SERVICE, "status.query", what="all")
            except RequestTimeout as err:
                raise FeedError(f"the scheduler stopped answering status queries ({err})") \
                    from None
            except RequestFailed as err:
                if err.code not in TRANSIENT:
                    raise FeedError(f"status.query refused: {err.code}: {err.reason}") from None
                away_since = self.clock() if away_since is None else away_since
                if self.clock() - away_since > self.patience:
                    raise FeedError(f"the scheduler left the broker for more than "
                                    f"{self.patience:g}s ({err.reason})") from None
                reply = None
            if reply is not None:
                away_since = None
                body = reply.get("body") or {}
                counts = dict(body.get("counts") or {})
                finished = _finished_of(body, want)
                line = (f"{finished}/{len(want)} jobs finished "
                        f"(running {counts.get('running', 0)}, pending {counts.get('pending', 0)})")
                progress.show(line, finished >= len(want))
                if finished >= len(want):
                    progress.end()
                    self.log.info("all_finished", jobs=len(want))
                    return counts
            if deadline is not None and self.clock() >= deadline:
                raise FeedError(f"not all jobs finished within {timeout:g}s")
            if self.wait(poll):
                raise Interrupted()


class _Progress:
    """A progress line: rewritten in place on a terminal, else printed every few seconds."""

    def __init__(self, out: TextIO | None, clock: Callable[[], float], first_after: float = 0.0):
        self.out, self.clock = out, clock
        self.tty = bool(out is not None and out.isatty())
        self.shown: str | None = None
        self.last = clock() - PROGRESS_EVERY_S + first_after  # first line after `first_after` s

    def show(self, line: str, force: bool = False) -> None:
        if self.out is None or line == self.shown:
            return
        now = self.clock()
        if self.tty or force or now - self.last >= PROGRESS_EVERY_S:
            self.out.write(f"\r{line}\033[K" if self.tty else line + "\n")
            self.out.flush()
            self.shown, self.last = line, now

    def end(self) -> None:
        if self.tty and self.shown is not None:
            self.out.write("\n")
            self.out.flush()
        self.shown = None


def _finished_of(body: dict[str, Any], want: set[int]) -> int:
    """How many of `want` are finished; from the job list, or the counts when it is cut."""
    jobs = body.get("jobs")
    if isinstance(jobs, list) and not body.get("jobs_truncated"):
        return sum(1 for j in jobs if isinstance(j, dict) and j.get("job_id") in want
                   and j.get("state") == "finished")
    return min(int((body.get("counts") or {}).get("finished", 0)), len(want))


def _trace_path(value: str) -> Path:
    path = Path(value)
    if path.exists() or path.suffix == ".csv" or "/" in value:
        return path
    return default_trace_path(value)


def load_endpoints(path: str, wait_s: float, stop: threading.Event) -> Any:
    """The broker's endpoints, waiting up to `wait_s` for the file (the broker may be starting)."""
    from broker.endpoints import Endpoints

    try:
        return Endpoints.wait_load(path, wait_s, stop)
    except ValueError as err:
        raise FeedError(str(err)) from None


def _file_only() -> None:
    """With --run-dir the JSON log has its file; the terminal keeps the readable lines."""
    import logging

    root = logging.getLogger()
    for handler in list(root.handlers):
        if type(handler) is logging.StreamHandler and handler.stream is sys.stderr:
            root.removeHandler(handler)


def _parser() -> argparse.ArgumentParser:
    wait, poll = number(0, MAX_WAIT_S, unit="s"), number(0, MAX_WAIT_S, above=True, unit="s")
    p = OneLineParser(prog=PROG, description=(
        "Replay a trace onto a live Interlace scheduler: each job is submitted at "
        "submit_time / time_scale seconds after the feeder starts."))
    p.add_argument("trace", metavar="TRACE",
                   help="trace CSV (Muri schema) or a packaged trace name (default, demo, ...)")
    p.add_argument("--endpoints", required=True, metavar="FILE", help="the broker's endpoints file")
    p.add_argument("--time-scale", default=1.0, metavar="X",
                   type=number(1 / MAX_TIME_SCALE, MAX_TIME_SCALE),
                   help="trace seconds per wall second (use the scheduler's; default 1)")
    p.add_argument("--run-dir", metavar="DIR", help="write feeder.log (JSON lines) here")
    p.add_argument("--speedup", action="store_true",
                   help="do not wait for submit times: submit every job at once, in order")
    p.add_argument("--timeout", type=poll, default=2.0, metavar="S",
                   help="seconds per try of a request (default 2)")
    p.add_argument("--retries", type=number(0, MAX_RETRIES, integer=True), default=5,
                   metavar="N",
                   help="resends of an unanswered request before giving up (default 5)")
    p.add_argument("--patience", type=wait, default=30.0, metavar="S",
                   help="seconds to wait for the scheduler to register with the broker "
                        "(default 30)")
    p.add_argument("--wait", action="store_true",
                   help="after feeding, wait until every fed job has finished")
    p.add_argument("--wait-timeout", type=number(0, MAX_TRACE_SECONDS, unit="s"), default=None,
                   metavar="S", help="give up waiting after this many seconds (default: never; "
                                     "a run's length, so a trace's bound, not a wait's)")
    p.add_argument("--poll", type=poll, default=1.0, metavar="S",
                   help="seconds between status queries with --wait (default 1)")
    p.add_argument("--wait-endpoints", type=wait, default=30.0, metavar="S",
                   help="seconds to wait for the endpoints file to appear (default 30)")
    p.add_argument("--id-offset", type=number(0, MAX_ID, integer=True), default=0, metavar="N",
                   help="add N to every job id (to feed a trace whose ids the scheduler "
                        "knows for other jobs; the same N on a replay; default 0)")
    p.add_argument("--log-level", default="info")
    p.add_argument("--client-key", default=os.environ.get("INTERLACE_CLIENT_KEY") or None,
                   metavar="FILE", help="CURVE secret certificate for a keyed broker "
                                        "(default $INTERLACE_CLIENT_KEY)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        records = read_trace(_trace_path(args.trace))
    except TraceError as err:
        for problem in err.problems[:10]:
            print(f"{PROG}: {problem}", file=sys.stderr)
        if len(err.problems) > 10:
            print(f"{PROG}: ... and {len(err.problems) - 10} more problems", file=sys.stderr)
        return 2
    if not records:
        print(f"{PROG}: the trace has no jobs", file=sys.stderr)
        return 2
    if args.id_offset:
        top = max(r.job_id for r in records) + args.id_offset
        if top > MAX_ID:
            print(f"{PROG}: --id-offset {args.id_offset}: job ids would reach {top}, past "
                  f"{MAX_ID}", file=sys.stderr)
            return 2
        records = [replace(r, job_id=r.job_id + args.id_offset) for r in records]
    from broker.client import Requester
    from broker.curve import attach_client_key
    from broker.logs import configure_logging

    try:
        log = configure_logging("feeder", args.run_dir, level=args.log_level)
    except (OSError, ValueError) as err:
        print(f"{PROG}: cannot set up logging: {err}", file=sys.stderr)
        return 2
    if args.run_dir:
        _file_only()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    requester = None
    try:
        endpoints = load_endpoints(args.endpoints, args.wait_endpoints, stop)
        try:
            endpoints = attach_client_key(endpoints, args.client_key)
        except ValueError as err:
            raise FeedError(str(err)) from None
        requester = Requester(endpoints, "feeder", timeout=args.timeout, retries=args.retries)
        feeder = Feeder(requester, log, time_scale=args.time_scale, speedup=args.speedup,
                        patience=args.patience, where=endpoints.requests, wait=stop.wait)
        clashes, highest = feeder.taken(records)
        if clashes:
            job_id, why = clashes[0]
            raise FeedError(
                f"{args.trace}: {len(clashes)} of its {len(records)} job ids are the "
                f"scheduler's already, for other jobs (job {job_id}: {why}); nothing fed, "
                f"since it would take them for a replay and run none. Feed it with "
                f"--id-offset {highest + 1 - min(r.job_id for r in records)} (its ids from "
                f"{highest + 1}, past the highest known)")
        last = max(r.submit_time for r in records) / args.time_scale
        log.info("feed_start", trace=args.trace, jobs=len(records), time_scale=args.time_scale,
                 speedup=args.speedup, expected_s=0.0 if args.speedup else round(last, 1),
                 broker=endpoints.requests)
        print(f"{PROG}: feeding {len(records)} jobs over "
              f"{0.0 if args.speedup else last:.0f}s (time scale {args.time_scale:g})", flush=True)
        result = feeder.feed(records, out=sys.stdout)
        log.info("feed_done", accepted=len(result.accepted), duplicates=len(result.duplicates),
                 refused=len(result.refused))
        print(f"{PROG}: {len(result.acked)}/{len(records)} jobs acknowledged "
              f"({len(result.accepted)} new, {len(result.duplicates)} already known)", flush=True)
        if result.refused:
            for job_id, reason in list(result.refused.items())[:10]:
                print(f"{PROG}: job {job_id} refused: {reason}", file=sys.stderr)
            print(f"{PROG}: {len(result.refused)} jobs refused by the scheduler", file=sys.stderr)
            return 1
        if args.wait:
            feeder.wait_finished(result.acked, args.wait_timeout, args.poll, out=sys.stdout)
        return 0
    except FeedError as err:
        if args.run_dir:  # for feeder.log; on the terminal the one line below says it
            log.error("feed_failed", error=str(err))
        print(f"{PROG}: {err}", file=sys.stderr)
        return 1
    except Interrupted:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    finally:
        if requester is not None:
            requester.close()


if __name__ == "__main__":
    sys.exit(main())
