"""Run a command as a child process with a time cap and read its own peak RSS.

os.wait4 gives the resource usage of exactly that child (RUSAGE_CHILDREN would mix every
child the benchmark has run), so each run's peak memory is its own.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

CHILD = Path(__file__).resolve().parent / "sim_child.py"
# ru_maxrss is in KiB on Linux, in bytes on macOS
_RSS_UNIT = 1 if sys.platform == "darwin" else 1024


@dataclass
class ChildRun:
    """How a child ended: its stdout, whether the cap stopped it, wall seconds, CPU seconds
    (user + system: what a loaded machine inflates less than wall time), peak RSS."""

    stdout: str
    stderr: str
    returncode: int
    timed_out: bool
    wall_s: float
    cpu_s: float
    peak_rss_bytes: int


def run_capped(cmd: Sequence[str], limit: float | None, cwd: str | None = None) -> ChildRun:
    """Run `cmd`, killing it after `limit` seconds; its own rusage via os.wait4."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(list(cmd), stdout=out, stderr=err, cwd=cwd)
        stopped = threading.Event()

        def stop() -> None:
            stopped.set()
            proc.kill()

        timer = threading.Timer(limit, stop) if limit else None
        if timer:
            timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            if timer:
                timer.cancel()
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)  # so Popen does not wait again
        out.seek(0)
        err.seek(0)
        return ChildRun(out.read(), err.read(), proc.returncode, stopped.is_set(), wall,
                        usage.ru_utime + usage.ru_stime, usage.ru_maxrss * _RSS_UNIT)


def simulate_capped(task: dict, limit: float | None, python: str = sys.executable) -> dict:
    """Simulate one task (see sim_child.py) in a child: its figures, or why there are none,
    plus `timed_out`, `child_wall_s`, `child_cpu_s` and `peak_rss_mb` of the whole child."""
    run = run_capped([python, str(CHILD), json.dumps(task)], limit)
    row: dict = {"timed_out": run.timed_out, "child_wall_s": run.wall_s,
                 "child_cpu_s": run.cpu_s, "peak_rss_mb": run.peak_rss_bytes / 2**20}
    if run.timed_out:
        row["error"] = f"> {limit:g} s"
        partial = last_heartbeat(run.stderr)
        if partial:
            row["partial"] = partial
    elif run.returncode != 0:
        row["error"] = f"failed ({run.returncode}): {run.stderr.strip()[-300:]}"
    else:
        row.update(json.loads(run.stdout.strip().splitlines()[-1]))
    return row


def last_heartbeat(stderr: str) -> dict | None:
    """The last progress line sim_child wrote (events, finished, cpu_s, wall_s), if any."""
    for line in reversed(stderr.splitlines()):
        if line.startswith("{"):
            try:
                beat = json.loads(line)
            except ValueError:
                continue
            if "events" in beat:
                return beat
    return None


def run_all(tasks: Iterable[dict], limit: float | None, workers: int,
            done: Callable[[dict, dict, int, int], None] | None = None) -> list[tuple[dict, dict]]:
    """Every task capped at `limit`, `workers` at a time; `done(task, row, k, n)` as each ends.
    Pairs (task, row) in the tasks' order."""
    tasks = list(tasks)
    rows: list = [None] * len(tasks)
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        futures = {pool.submit(simulate_capped, t, limit): i for i, t in enumerate(tasks)}
        for k, future in enumerate(as_completed(futures), start=1):
            i = futures[future]
            rows[i] = future.result()
            if done is not None:
                done(tasks[i], rows[i], k, len(tasks))
    return list(zip(tasks, rows))


__all__ = ["ChildRun", "run_capped", "simulate_capped", "run_all"]
