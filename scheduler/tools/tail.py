"""`interlace-tail RUN_DIR`: every component's JSON-line log, merged by time, one line each.

Each process writes its own `RUN_DIR/<component>.log` (broker, scheduler, agent-<node>,
trainer-<job>, feeder); following one job across them by hand means five files. This merges
them by timestamp, filters by job, node and event name, and prints a terminal line per
record (`time component event key=value ...`). `--follow` keeps printing what is appended,
including files that appear later (a new trainer), like `tail -f`. A line that is not JSON is
printed as it is, never dropped and never fatal.
"""
from __future__ import annotations

import argparse
import fnmatch
import heapq
import json
import os
import sys
import threading
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence, TextIO

from specs.limits import MAX_ID
from specs.options import OneLineParser, number

PROG = "interlace-tail"
POLL_S = 0.25  # how often --follow looks for new lines
HIDDEN = ("ts", "event", "component", "level")  # shown in the fixed columns instead
JOB_LISTS = ("group", "launches", "stops", "requeued", "kept", "strays", "lost", "jobs")
NODE_KEYS = ("node", "nodes", "skip")
COLOURS = {"warning": "\033[33m", "error": "\033[31m", "critical": "\033[31m"}
RESET = "\033[0m"


@dataclass(frozen=True)
class Entry:
    """One log line: the parsed record (None for a non-JSON line) and where it came from."""

    when: float  # epoch seconds; a raw line borrows its file's previous timestamp
    source: str  # the file's stem, which is the component name
    seq: int  # position in its file, so equal timestamps keep file order
    record: dict[str, Any] | None
    raw: str

    def sort_key(self) -> tuple[float, str, int]:
        return self.when, self.source, self.seq


@dataclass(frozen=True)
class Filters:
    """Which records to show; empty means everything. `types` are fnmatch patterns."""

    jobs: frozenset[int] = frozenset()
    nodes: frozenset[str] = frozenset()
    types: tuple[str, ...] = ()

    def match(self, entry: Entry) -> bool:
        rec = entry.record
        if rec is None:  # a raw line cannot be classified: show it only when unfiltered
            return not (self.jobs or self.nodes or self.types)
        if self.types and not any(fnmatch.fnmatchcase(str(rec.get("event", "")), t)
                                  for t in self.types):
            return False
        if self.jobs and not (self.jobs & jobs_of(rec, entry.source)):
            return False
        if self.nodes and not (self.nodes & nodes_of(rec, entry.source)):
            return False
        return True


def _ints(value: Any) -> Iterator[int]:
    """Ints in a value, one level of lists deep (`groups` is a list of lists)."""
    if isinstance(value, bool):
        return
    if isinstance(value, int):
        yield value
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, list):
                yield from (i for i in item if isinstance(i, int) and not isinstance(i, bool))
            elif isinstance(item, int) and not isinstance(item, bool):
                yield item
            elif isinstance(item, dict) and isinstance(item.get("job_id"), int):
                yield item["job_id"]


def jobs_of(rec: dict[str, Any], source: str) -> set[int]:
    """Job ids a record is about: job_id/job fields, job lists, or a trainer-<id> log."""
    found = set(_ints(rec.get("job_id"))) | set(_ints(rec.get("job")))
    for key in JOB_LISTS + ("groups",):
        found.update(_ints(rec.get(key)))
    comp = str(rec.get("component") or source)
    if comp.startswith("trainer-") and comp[8:].isdigit():
        found.add(int(comp[8:]))
    return found


def nodes_of(rec: dict[str, Any], source: str) -> set[str]:
    """Node names a record is about: node/nodes fields, gpus maps, or an agent-<node> log."""
    found: set[str] = set()
    for key in NODE_KEYS:
        value = rec.get(key)
        if isinstance(value, str):
            found.add(value)
        elif isinstance(value, list):
            found.update(v for v in value if isinstance(v, str))
    if isinstance(rec.get("gpus"), dict):
        found.update(str(k) for k in rec["gpus"])
    comp = str(rec.get("component") or source)
    if comp.startswith("agent-"):
        found.add(comp[6:])
    return found


def parse_ts(value: Any) -> float | None:
    """Epoch seconds of structlog's ISO timestamp (or a number), None if unreadable or no
    time a clock can show (inf, nan, 1e20: a corrupt line must not stop the merge, so it is
    placed and shown like a line that is not JSON)."""
    try:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            when = float(value)
        elif isinstance(value, str):
            when = datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        else:
            return None
        datetime.fromtimestamp(when)  # the clock column shows it
    except (ValueError, OverflowError, OSError):
        return None
    return when


@dataclass
class LogFile:
    """One log being read incrementally; holds back a last line that is not complete yet."""

    path: Path
    offset: int = 0
    seq: int = 0
    last_when: float = 0.0
    partial: str = ""
    inode: int | None = None

    def read_new(self, final: bool = False) -> list[Entry]:
        """Entries for lines appended since the last call; `final` flushes a partial line."""
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return []
        if self.inode is not None and (st.st_ino != self.inode or st.st_size < self.offset):
            self.offset, self.partial = 0, ""  # replaced or truncated: start over
        self.inode = st.st_ino
        out: list[Entry] = []
        if st.st_size > self.offset:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read(st.st_size - self.offset)
            self.offset += len(data)
            text = self.partial + data.decode("utf-8", errors="replace")
            lines = text.split("\n")
            self.partial = lines.pop()
            out.extend(self._entry(line) for line in lines if line.strip())
        if final and self.partial.strip():
            out.append(self._entry(self.partial))
            self.partial = ""
        return out

    def _entry(self, line: str) -> Entry:
        line = line.rstrip("\r")
        self.seq += 1
        record: dict[str, Any] | None = None
        try:
            parsed = json.loads(line)
            if isinstance(parsed, dict):
                record = parsed
        except ValueError:
            pass
        when = parse_ts(record.get("ts")) if record is not None else None
        if when is None:
            when = self.last_when
        else:
            self.last_when = when
        return Entry(when, self.path.stem, self.seq, record, line)


def log_files(run_dir: Path) -> list[Path]:
    return sorted(p for p in run_dir.glob("*.log") if p.is_file())


def merge(batches: Iterable[list[Entry]]) -> list[Entry]:
    """Merge per-file batches by time; each file's own order is kept (it is already in order)."""
    return list(heapq.merge(*batches, key=Entry.sort_key))


def _value(value: Any) -> str:
    if isinstance(value, str):
        return value if value and not any(c.isspace() or c in "\"=" for c in value) \
            else json.dumps(value)
    if isinstance(value, float):
        return f"{value:.6g}"
    return json.dumps(value, separators=(",", ":"), default=str)


def format_entry(entry: Entry, colour: bool = False) -> str:
    """`HH:MM:SS.mmm component event key=value ...`; a raw line as `component | line`."""
    rec = entry.record
    if rec is None:
        return f"{' ' * 12} {entry.source:<12} | {entry.raw}"
    ts = rec.get("ts")
    when = parse_ts(ts)
    clock = (datetime.fromtimestamp(when).strftime("%H:%M:%S.%f")[:12] if when is not None
             else f"{str(ts)[:12]:<12}")
    comp = str(rec.get("component") or entry.source)
    level = str(rec.get("level", "info")).lower()
    event = str(rec.get("event", "?"))
    head = f"{clock} {comp:<12} {event}"
    if level not in ("info", "debug"):
        head = f"{clock} {comp:<12} {level.upper()} {event}"
        if colour and level in COLOURS:
            head = f"{COLOURS[level]}{head}{RESET}"
    rest = " ".join(f"{k}={_value(v)}" for k, v in rec.items() if k not in HIDDEN)
    return f"{head} {rest}" if rest else head


class Tail:
    """Reads every *.log of a run dir; `snapshot` what is there, `poll` what was appended."""

    def __init__(self, run_dir: Path, filters: Filters = Filters()):
        self.run_dir, self.filters = run_dir, filters
        self.files: dict[Path, LogFile] = {}

    def _batches(self, final: bool) -> list[list[Entry]]:
        for path in log_files(self.run_dir):
            self.files.setdefault(path, LogFile(path))
        return [f.read_new(final) for f in self.files.values()]

    def snapshot(self) -> list[Entry]:
        """Everything readable now, merged and filtered (complete lines only)."""
        return [e for e in merge(self._batches(final=False)) if self.filters.match(e)]

    def poll(self) -> list[Entry]:
        return self.snapshot()

    def flush(self) -> list[Entry]:
        """Lines left without a newline (a writer that died mid-line), at the very end."""
        return [e for e in merge(self._batches(final=True)) if self.filters.match(e)]


def follow(tail: Tail, emit: Callable[[Entry], None], wait: Callable[[float], bool],
           poll_s: float = POLL_S) -> None:
    """Emit new entries until `wait(poll_s)` returns True (the stop signal)."""
    while not wait(poll_s):
        for entry in tail.poll():
            emit(entry)


def _parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog=PROG, description=(
        "Merge a run's JSON-line logs (RUN_DIR/*.log) by time and print one line per "
        "record; filter by job, node and event name."))
    p.add_argument("run_dir", metavar="RUN_DIR", help="the run directory")
    p.add_argument("--job", action="append", type=number(0, MAX_ID, integer=True), default=[],
                   metavar="ID",
                   help="only records about this job (repeatable)")
    p.add_argument("--node", action="append", default=[], metavar="N",
                   help="only records about this node, e.g. n0 (repeatable)")
    p.add_argument("--type", action="append", default=[], metavar="T",
                   help="only this event name; shell patterns allowed, e.g. 'job_*' (repeatable)")
    p.add_argument("--follow", "-f", action="store_true",
                   help="keep printing new lines until interrupted")
    p.add_argument("--colour", choices=("auto", "always", "never"), default="auto")
    return p


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    args = _parser().parse_args(argv)
    out = out if out is not None else sys.stdout
    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        print(f"{PROG}: {run_dir}: no such run directory", file=sys.stderr)
        return 1
    colour = args.colour == "always" or (args.colour == "auto" and out.isatty()
                                         and not os.environ.get("NO_COLOR"))
    types = tuple(t for arg in args.type for t in arg.split(",") if t)
    tail = Tail(run_dir, Filters(frozenset(args.job), frozenset(args.node), types))

    def emit(entry: Entry) -> None:
        out.write(format_entry(entry, colour) + "\n")

    try:
        for entry in tail.snapshot():
            emit(entry)
        if not args.follow:
            for entry in tail.flush():
                emit(entry)
            if not tail.files:
                print(f"{PROG}: {run_dir}: no *.log files yet", file=sys.stderr)
            return 0
        out.flush()
        stop = threading.Event()

        def emit_flush(entry: Entry) -> None:
            emit(entry)
            out.flush()

        follow(tail, emit_flush, stop.wait)
    except KeyboardInterrupt:
        return 0
    except BrokenPipeError:  # `interlace-tail RUN | head`
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
