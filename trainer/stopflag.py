"""The stop a trainer's SIGTERM/SIGINT asks for, as a flag a signal handler can set safely.

Why not threading.Event: its set() takes a lock that its wait() holds for a moment, and a
Python signal handler runs in the main thread between two bytecodes, possibly inside that
moment; the handler then waits for a lock its own thread holds, forever. A trainer hung that
way (seen: main thread blocked in lock acquire, no CPU, an hour after its agent was gone)
neither checkpoints nor notices it was orphaned. Setting a plain attribute takes no lock.
"""
from __future__ import annotations

import signal
import time


class StopFlag:
    """set()/is_set() like threading.Event, for one process's main thread and its handlers."""

    def __init__(self) -> None:
        self._set = False

    def set(self) -> None:
        self._set = True

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout: float) -> bool:
        """Sleep up to `timeout` unless set; a signal's handler runs during the sleep (which
        then goes on to its end: callers wait in short chunks and look again)."""
        if not self._set and timeout > 0:
            time.sleep(timeout)
        return self._set


def stop_on_signals(*signums: int) -> StopFlag:
    """A StopFlag set by each of `signums` (SIGTERM and SIGINT when none are given)."""
    flag = StopFlag()
    for signum in signums or (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: flag.set())
    return flag
