"""A job's output files and the launch markers in them.

Why: each rank's stdout and stderr go to one file in RUN/trainers, appended across launches
(`<job>.stderr`, or `<job>.r<rank>.stderr` for a job of several ranks). The agent writes a
marker line before each launch's output, so a reader (`interlace-logs`) can tell where a
relaunch began and from which iteration, without a file per launch to gather.
"""
from __future__ import annotations

import os
import re
import time
from pathlib import Path

PREFIX = "--- interlace: launch"
_MARKER = re.compile(r"^--- interlace: launch from iteration (?P<start>\S+) on (?P<node>\S*) "
                     r"at (?P<at>\S+) ---$")
_RANK_FILE = re.compile(r"^(?P<job>\d+)\.r(?P<rank>\d+)\.stderr$")


def tail(path: str | os.PathLike, limit: int) -> tuple[str, bool] | None:
    """The file's last `limit` bytes at most, as text, and whether that cut the file (its
    first line is then partial); None when it cannot be read. Reads `limit` bytes whatever
    the file's size: a program's output and a progress file may grow without bound."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - limit))
            return fh.read().decode("utf-8", "replace"), size > limit
    except OSError:
        return None


def marker(start: float, node: str, at: float | None = None) -> str:
    """The line the agent writes before a launch's output (newline included)."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() if at is None
                                                               else at))
    return f"{PREFIX} from iteration {start:g} on {node} at {stamp} ---\n"


def parse_marker(line: str) -> dict[str, str] | None:
    """A marker's fields (start, node, at), or None for a line of the program's own."""
    if not line.startswith(PREFIX):
        return None
    found = _MARKER.match(line.rstrip("\r\n"))
    return found.groupdict() if found else None


def output_path(trainer_dir: Path, job_id: int, rank: int | None = None) -> Path:
    """Rank `rank`'s file (None: the file of a one-rank job)."""
    suffix = "" if rank is None else f".r{rank}"
    return Path(trainer_dir) / f"{int(job_id)}{suffix}.stderr"


def output_files(trainer_dir: Path, job_id: int) -> dict[int | None, Path]:
    """The job's output files by rank (None: a one-rank job's single file), ranks in order."""
    found: dict[int | None, Path] = {}
    single = output_path(trainer_dir, job_id)
    if single.is_file():
        found[None] = single
    ranks = []
    for path in Path(trainer_dir).glob(f"{int(job_id)}.r*.stderr"):
        match = _RANK_FILE.match(path.name)
        if match and int(match["job"]) == int(job_id):
            ranks.append((int(match["rank"]), path))
    found.update(sorted(ranks))
    return found


def open_output(trainer_dir: Path, job_id: int, rank: int | None, start: float, node: str):
    """The rank's output file opened to append, this launch's marker written first."""
    fh = open(output_path(trainer_dir, job_id, rank), "ab")
    fh.write(marker(start, node).encode())
    fh.flush()
    return fh
