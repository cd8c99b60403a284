"""When the live scheduler's next round is due, and what its rounds so far came to.

Why a part of its own: both threads ask for rounds (a request handler wakes one for an
arrival or a completion, the main thread runs them), and after a restart no round may run
until the nodes that ran journaled jobs are heard from (recovery.py). Called with the
state's lock held.
"""
from __future__ import annotations

import math


class Rounds:
    def __init__(self) -> None:
        self.reasons: set[str] = set()  # why the next round is wanted (events since the last)
        self.count = 0
        self.failures = 0  # rounds that raised (logged `round_failed`; the loop goes on)
        self.last = -math.inf  # wall time the last round's planning ended (or it failed)
        self.planning = 0.0  # wall seconds the last round's planning took
        self.wakeup: float | None = None  # trace time the policy asked to be woken at
        self.awaiting: set[str] = set()  # after a restart: nodes to hear from before a round
        self.asked_at: float | None = None  # trace time a round was first seen asked for

    def wake(self, reason: str) -> None:
        self.reasons.add(reason)

    def due(self, wall: float, now: float, round_s: float, period: float = 0.0) -> bool:
        """An event asked for a round, `round_s` wall seconds passed, or the policy's wake-up
        came (`now`: trace seconds). A round asked for by arrivals alone waits until as long
        has passed since the last round as its planning took: under a flood of submissions
        planning holds the lock at most about half the time, and the submissions between
        two rounds are planned together (at a few ms a round, the wait is a few ms).
        With a `period` (trace seconds), a round asked for waits for the next multiple of
        it, and none runs where nothing asked."""
        reasons = self.reasons
        if period:
            woken = self.wakeup is not None and now >= self.wakeup
            if not reasons and not woken:
                return False
            if self.asked_at is None:
                self.asked_at = now
            return math.floor(now / period) > math.floor(self.asked_at / period)
        if reasons and (wall - self.last >= self.planning or reasons != {"arrival"}):
            return True
        return wall - self.last >= round_s \
            or (self.wakeup is not None and now >= self.wakeup)

    def take_reasons(self) -> list[str]:
        """Why this round runs ("tick": only time passed), clearing them."""
        reasons = sorted(self.reasons) or ["tick"]
        self.reasons.clear()
        self.asked_at = None
        return reasons
