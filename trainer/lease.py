"""A trainer's side of its agent's lease (node_agent/lease.py): whether it has run out.

The file holds the wall time until which the trainer may run. Read at most every `every`
seconds (a step may take microseconds); once past, the trainer is fenced for good: its job
may already be running elsewhere, so it stops with a checkpoint at its next step. A file that
is missing or unreadable fences nothing (a trainer started by hand, or an agent that could
not write it): the scheduler's own checks remain.
"""
from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Callable


class LeaseWatch:
    def __init__(self, path: Path | None, every: float = 0.2,
                 clock: Callable[[], float] = time.time,
                 ticks: Callable[[], float] = time.monotonic):
        self.path, self.every = path, every
        self._clock, self._ticks = clock, ticks
        self._next_look = 0.0
        self.fenced = False

    def expired(self) -> bool:
        if self.fenced or self.path is None:
            return self.fenced
        now = self._ticks()
        if now < self._next_look:
            return False
        self._next_look = now + self.every
        try:
            until = float(self.path.read_text().strip())
        except (OSError, ValueError):
            return False
        self.fenced = math.isfinite(until) and self._clock() > until
        return self.fenced
