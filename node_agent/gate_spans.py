"""The recent grant/release spans of this node's stage gates, for the scheduler's web view.

Why: the page draws who holds io/cpu/gpu/net; the planner only knows its cyclic model, the
gates know what happened. Each gate keeps its last spans in a bounded deque (O(1) an event,
memory bounded whatever the rate), and the heartbeat carries them as ages relative to its
own send time, so the scheduler never reads another process's monotonic clock.
"""
from __future__ import annotations

import threading
from collections import deque
from typing import Any, Callable

from broker.messages import MAX_GATE_SPANS as MAX_SPANS  # per gate: the newest ones
from broker.messages import MAX_BEAT_SPANS as MAX_TOTAL  # spans in one heartbeat
from broker.messages import MAX_SPAN_GATES as MAX_GATES  # gates in one heartbeat

HORIZON_S = 10.0  # spans older than this are not sent (a hold open longer is clipped)


def group_of(gate: str) -> list[int] | None:
    """The job ids of a gate named `node:1-2` (node_agent.gates names them so); None when
    the name is not one."""
    try:
        return [int(j) for j in gate.rsplit(":", 1)[1].split("-")]
    except (IndexError, ValueError):
        return None


class GateSpans:
    """gate name -> its closed spans (job, stage, start, end) and its open holds."""

    def __init__(self, clock: Callable[[], float], max_spans: int = MAX_SPANS,
                 horizon: float = HORIZON_S):
        self._clock, self.max_spans, self.horizon = clock, max_spans, horizon
        self._lock = threading.Lock()
        self._spans: dict[str, deque] = {}
        self._open: dict[str, dict[str, tuple[Any, float]]] = {}  # gate -> stage -> job, since
        self._groups: dict[str, list] = {}  # gate -> its members since a regroup (else its name's)

    def gate_event(self, gate: str, event: dict) -> None:
        """One stage-gate event (node_agent.gate_turns): a grant opens a span, a release
        closes it; a member that leaves or is dropped closes what it held; a regroup names
        the gate's members from then on. O(stages)."""
        kind, t = event.get("event"), event.get("t")
        if not isinstance(t, (int, float)):
            return
        with self._lock:
            held = self._open.setdefault(gate, {})
            if kind == "grant":
                held[event["stage"]] = (event["job"], t)
            elif kind == "release":
                self._close(gate, event["stage"], t)
            elif kind in ("left", "dropped"):
                for stage in [s for s, (job, _) in held.items() if job == event.get("job")]:
                    self._close(gate, stage, t)
            elif kind == "regroup":
                self._groups[gate] = list(event["members"])

    def forget(self, gate: str) -> None:
        """The gate is closed: nothing of it is drawn any more."""
        with self._lock:
            for table in (self._spans, self._open, self._groups):
                table.pop(gate, None)

    def _close(self, gate: str, stage: str, t: float) -> None:
        opened = self._open.get(gate, {}).pop(stage, None)
        if opened is None:
            return
        spans = self._spans.get(gate)
        if spans is None:
            spans = self._spans[gate] = deque(maxlen=self.max_spans)
        spans.append((opened[0], stage, opened[1], t))

    def recent(self) -> list[dict[str, Any]]:
        """The heartbeat's `gate_spans`: per gate with spans in the last `horizon` seconds,
        {"group": job ids in slot order, "spans": [[job, stage, age_start, age_end], ...]},
        ages in seconds before now (0 for a turn still held). Gates quiet for the whole
        horizon are forgotten here."""
        now = self._clock()
        out, budget = [], MAX_TOTAL
        with self._lock:
            for gate in list(self._spans.keys() | self._open.keys()):
                closed = [s for s in self._spans.get(gate, ()) if now - s[3] <= self.horizon]
                still = [(job, stage, since, now)
                         for stage, (job, since) in self._open.get(gate, {}).items()]
                group = group_of(gate)
                if not closed and not still:
                    self._spans.pop(gate, None)
                    self._open.pop(gate, None)
                    continue
                group = self._groups.get(gate, group)
                if group is not None:  # a member that left at a regroup is not drawn
                    closed = [s for s in closed if s[0] in group]
                    still = [s for s in still if s[0] in group]
                if group is None or len(out) >= MAX_GATES or budget <= 0:
                    continue
                spans = (closed + still)[-min(self.max_spans, budget):]
                budget -= len(spans)
                out.append({"group": group, "spans": [
                    [job, stage, round(min(max(now - start, 0.0), self.horizon), 6),
                     round(max(now - end, 0.0), 6)]
                    for job, stage, start, end in spans]})
        return out
