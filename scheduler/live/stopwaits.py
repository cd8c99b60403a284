"""Rounds waiting for stops to end: the meeting point of the main thread, which sent a
`job.stop`, and the service thread, which receives the agent's `job.stopped` report (or
learns that the agent died). Registered before the request goes out: the report may beat
the reply."""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any


@dataclass
class StopWait:
    """One stop in progress on one agent, awaited by a round: `done` is set by the agent's
    `job.stopped` report (`result`: its fields) or by the agent's death (`result` None)."""

    done: threading.Event = field(default_factory=threading.Event)
    result: dict[str, Any] | None = None


class StopWaits:
    """(job, node) -> the waits on it. Not locked itself: its owner's lock guards it."""

    def __init__(self) -> None:
        self._waits: dict[tuple[int, str], list[StopWait]] = {}

    def watch(self, job_id: int, name: str) -> StopWait:
        wait = StopWait()
        self._waits.setdefault((job_id, name), []).append(wait)
        return wait

    def report(self, job_id: int, name: str, fields: dict[str, Any]) -> bool:
        """The agent reported the stop; False when no round waits for it."""
        waits = self._waits.get((job_id, name))
        if not waits:
            return False
        for wait in waits:
            if not wait.done.is_set():
                wait.result = dict(fields)
                wait.done.set()
        return True

    def node_gone(self, name: str) -> None:
        """No report will come from `name`: its waits end with result None."""
        for (_, node), waits in self._waits.items():
            if node == name:
                for wait in waits:
                    wait.done.set()

    def forget(self, job_id: int, name: str, wait: StopWait) -> None:
        left = [w for w in self._waits.get((job_id, name), ()) if w is not wait]
        if left:
            self._waits[(job_id, name)] = left
        else:
            self._waits.pop((job_id, name), None)
