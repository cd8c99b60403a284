"""`interlace-logs JOB [-f]`: a job's output, every rank's, each launch marked.

    interlace-logs --endpoints RUN/endpoints.json 7
    interlace-logs --run-dir RUN 7 -f

Why: the agent appends each rank's stdout and stderr to RUN/trainers/<job>.stderr (or
<job>.r<rank>.stderr), with a marker line before each launch (node_agent/joblog.py); reading
those files by hand means knowing the names and telling launches apart. This prints them:
one rank's lines as they are, several ranks' lines each behind its rank, launch by launch,
each launch announced as `--- launch 2 (resumed at iteration 180) on n0 at TIME ---`.

`-f` follows the files as `tail -f` does until the scheduler says the job has ended
(finished, cancelled or failed; with only `--run-dir`, until Ctrl-C). RUN is `--run-dir`, or
the directory of the endpoints file. Exit status: 0 done; 1 no output or no such job; 2 bad
arguments; 130 interrupted.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from node_agent import joblog
from scheduler.tools.jobs import JOB_ID, _common, _connect, _request
from specs.options import OneLineParser
from traces.feeder import FeedError

PROG = "interlace-logs"
ENDED = ("finished", "cancelled", "failed")
POLL_S = 0.5  # how often -f looks at the files
STATUS_EVERY_S = 2.0  # and asks the scheduler whether the job has ended


def launch_line(number: int, fields: dict[str, str]) -> str:
    """How a launch marker reads in the output."""
    start = float(fields["start"])
    how = f"resumed at iteration {start:g}" if start > 0 else "from the start"
    return f"--- launch {number} ({how}) on {fields['node']} at {fields['at']} ---"


@dataclass
class RankReader:
    """One rank's file, read on from where it was left: whole lines only, launches counted."""

    path: Path
    rank: int | None
    offset: int = 0
    partial: bytes = b""
    launch: int = 0  # launches seen in this file so far

    def read(self, final: bool = False) -> list[tuple[int, dict | None, str]]:
        """New (launch, marker fields or None, line) since the last read; with `final`, a
        last line without its newline too."""
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except OSError:
            return []
        self.offset += len(data)
        data = self.partial + data
        lines = data.split(b"\n")
        self.partial = lines.pop()
        if final and self.partial:
            lines.append(self.partial)
            self.partial = b""
        out = []
        for raw in lines:
            text = raw.decode("utf-8", "replace").rstrip("\r")
            fields = joblog.parse_marker(text)
            if fields is not None:
                self.launch += 1
            out.append((self.launch, fields, text))
        return out


class Printer:
    """Turns rank readers' lines into the output: each launch announced once, a rank's
    lines behind `[rN]` when the job has several ranks."""

    def __init__(self, readers: Sequence[RankReader], write: Callable[[str], None]):
        self.readers, self.write = list(readers), write
        self.announced = 0
        self.labelled = len(self.readers) > 1 or self.readers[0].rank is not None

    def _line(self, reader: RankReader, launch: int, fields: dict | None, text: str) -> None:
        if fields is not None:
            if launch > self.announced:
                self.announced = launch
                self.write(launch_line(launch, fields))
            return
        self.write(f"[r{reader.rank}] {text}" if self.labelled else text)

    def dump(self, final: bool = False) -> None:
        """Everything in the files now, launch by launch, rank by rank within a launch."""
        read = [(r, r.read(final)) for r in self.readers]
        launches = sorted({launch for _, lines in read for launch, _, _ in lines})
        for launch in launches:
            for reader, lines in read:
                for at, fields, text in lines:
                    if at == launch:
                        self._line(reader, at, fields, text)

    def step(self, final: bool = False) -> int:
        """What each file gained since, in rank order; how many lines that was."""
        count = 0
        for reader in self.readers:
            for launch, fields, text in reader.read(final):
                self._line(reader, launch, fields, text)
                count += 1
        return count


def readers_for(trainer_dir: Path, job_id: int) -> list[RankReader]:
    return [RankReader(path, rank)
            for rank, path in joblog.output_files(trainer_dir, job_id).items()]


def _parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog=PROG, description=(
        "Print a job's output (stdout and stderr of each of its ranks), each launch marked; "
        "-f follows it until the job ends."))
    p.add_argument("job", type=JOB_ID, metavar="JOB")
    p.add_argument("-f", "--follow", action="store_true",
                   help="keep printing what it writes until the job has ended")
    p.add_argument("--run-dir", default=None, metavar="RUN",
                   help="the run directory (default: the endpoints file's directory)")
    _common(p)
    return p


class JobState:
    """The job's state as the scheduler says it, asked at most every STATUS_EVERY_S; None
    when there is no scheduler to ask (only --run-dir) or it did not answer."""

    def __init__(self, args: argparse.Namespace):
        self.args, self.requester = args, None
        self.asked, self.last = -float("inf"), None
        if args.endpoints:
            try:
                self.requester, _ = _connect(PROG, args)
            except FeedError as err:
                print(f"{PROG}: cannot ask the scheduler ({err}): following until Ctrl-C",
                      file=sys.stderr)

    def now(self, force: bool = False) -> str | None:
        if self.requester is None:
            return None
        if force or time.monotonic() - self.asked >= STATUS_EVERY_S:
            self.asked = time.monotonic()
            try:
                jobs = _request(self.requester, "status.query", what="all").get("jobs") or []
            except FeedError:
                return self.last
            found = [j for j in jobs if j.get("job_id") == self.args.job]
            self.last = found[0]["state"] if found else "unknown"
        return self.last

    def close(self) -> None:
        if self.requester is not None:
            self.requester.close()


def follow(args: argparse.Namespace, trainer_dir: Path, state: JobState,
           write: Callable[[str], None], sleep: Callable[[float], None] = time.sleep) -> int:
    """Print what there is, then what comes, until the job has ended (a last read then)."""
    readers = readers_for(trainer_dir, args.job)
    while not readers:  # launched yet? only a job the scheduler knows is waited for
        said = state.now()
        if said in (None, "unknown") or said in ENDED:
            return _no_output(args, trainer_dir, said)
        sleep(POLL_S)
        readers = readers_for(trainer_dir, args.job)
    printer = Printer(readers, write)
    printer.dump()
    while True:
        printer.step()
        if state.now() in ENDED:
            printer.step(final=True)
            return 0
        sleep(POLL_S)


def _no_output(args: argparse.Namespace, trainer_dir: Path, said: str | None) -> int:
    if said == "unknown":
        print(f"{PROG}: no job {args.job} on this scheduler", file=sys.stderr)
    else:
        print(f"{PROG}: no output of job {args.job} in {trainer_dir} (not launched yet, or "
              f"it ran on a node with another run directory)", file=sys.stderr)
    return 1


def _run_dir(args: argparse.Namespace) -> Path | None:
    if args.run_dir:
        return Path(args.run_dir)
    if args.endpoints:
        return Path(os.path.dirname(os.path.abspath(args.endpoints)))
    return None


def main(argv: Sequence[str] | None = None, write: Callable[[str], None] | None = None) -> int:
    args = _parser().parse_args(argv)
    write = write or (lambda line: print(line, flush=True))
    run = _run_dir(args)
    if run is None:
        print(f"{PROG}: no run directory: give --run-dir or --endpoints (or set "
              f"$INTERLACE_ENDPOINTS)", file=sys.stderr)
        return 2
    if not run.is_dir():
        print(f"{PROG}: {run}: no such run directory", file=sys.stderr)
        return 2
    trainer_dir = run / "trainers"
    if not args.follow:
        readers = readers_for(trainer_dir, args.job)
        if not readers:
            return _no_output(args, trainer_dir, None)
        Printer(readers, write).dump(final=True)
        return 0
    state = JobState(args)
    try:
        return follow(args, trainer_dir, state, write)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    finally:
        state.close()


if __name__ == "__main__":
    sys.exit(main())
