"""A plain script's progress file: the iterations it has done, in a file the agent reads.

Why: a program that does not use trainer/api.py writes no progress record, so the scheduler
would know nothing of how far it got. The agent gives each command job a file
(INTERLACE_PROGRESS_FILE, node_agent/user_command.py); the program may write its completed
iteration count there, one number a line, and the last line wins. The agent takes it as the
job's progress where it is ahead of the job's checkpoint. What is not a count within the job
(not a number, NaN, negative, beyond its iterations) is never trusted: the agent logs it once
and goes on as if the file said nothing.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

from node_agent import joblog

MAX_BYTES = 4096  # read from the end of the file: the last line is all that counts
NAME = "progress"  # the file's name in the job's checkpoint directory


def path_for(job_dir: str | os.PathLike) -> Path:
    return Path(job_dir) / NAME


def parse(text: str, total: float) -> tuple[float | None, str | None]:
    """(iterations, None) from the text's last non-blank line; (None, None) when there is
    none yet; (None, problem) when that line is not a count of 0..total iterations."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return None, None
    last = lines[-1]
    try:
        value = float(last)
    except ValueError:
        return None, f"not a number: {last[:40]!r}"
    if math.isnan(value) or math.isinf(value):
        return None, f"not a finite number: {last[:40]!r}"
    if value < 0:
        return None, f"negative: {last[:40]!r}"
    if value > total:
        return None, f"beyond the job's {total:g} iterations: {last[:40]!r}"
    return value, None


def read(path: str | os.PathLike, total: float) -> tuple[float | None, str | None]:
    """parse() of the file's end; (None, None) when there is no file (nothing written yet)."""
    read_back = joblog.tail(path, MAX_BYTES)
    return (None, None) if read_back is None else parse(read_back[0], total)
