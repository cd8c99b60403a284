"""The agent's lease: how long its trainers may go on without the scheduler having heard it.

Why: the scheduler declares an agent it has not heard for `--agent-timeout` dead and runs its
jobs elsewhere. A paused or cut-off agent cannot stop its trainers (they run in sessions of
their own and outlive its pause), so each trainer fences itself: the agent writes into a file
the wall time until which its trainers may run, renewed whenever the scheduler answers it,
and a trainer that finds that time past stops with a checkpoint (trainer/lease.py). The
scheduler tells the agent the lease at registration: shorter than its timeout, so a fenced
trainer has stopped before its job is launched elsewhere.
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable

DEFAULT_S = 6.0  # without a scheduler that says: 0.6 of its default --agent-timeout (10 s)


class Lease:
    """The file a node's trainers read; `renew()` after every answer from the scheduler."""

    def __init__(self, path: Path, seconds: float = DEFAULT_S,
                 clock: Callable[[], float] = time.time):
        self.path, self.seconds, self._clock = Path(path), float(seconds), clock

    def renew(self) -> None:
        """Written whole (a new file renamed over the old), so a trainer never reads half."""
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            tmp.write_text(f"{self._clock() + self.seconds:.3f}\n")
            os.replace(tmp, self.path)
        except OSError:  # a full disk: the trainers go on by the last lease they can read
            pass
