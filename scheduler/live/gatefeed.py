"""The stage-gate turns the agents measured, for the web view's occupancy strips.

Why here and not in the round: the spans are for people, the planner never reads them. Each
heartbeat replaces its node's entry (O(spans) per heartbeat, nothing per round), so a group
that ended or an agent that died leaves nothing behind once the node reports again, and
lookups by a running group are O(1).

Times: an agent sends ages (seconds before its heartbeat was sent). They become the
scheduler's trace seconds at receipt: t = now - age * time_scale, the message's transit
(loopback or LAN: milliseconds) being the only error, and no clock of another process read.
"""
from __future__ import annotations

from typing import Any

MAX_AGE_S = 10.0  # wall seconds after which a node's report no longer counts as measured


def to_trace(spans: list, now: float, scale: float) -> list[dict[str, Any]]:
    """[[job, stage, age_start, age_end], ...] received at trace time `now` -> spans
    {start, end, stage, job_id} in trace seconds, oldest first."""
    out = [{"start": round(now - a0 * scale, 6), "end": round(now - a1 * scale, 6),
            "stage": stage, "job_id": job} for job, stage, a0, a1 in spans]
    out.sort(key=lambda s: (s["start"], s["end"]))
    return out


class GateFeed:
    """node -> (trace time, wall time of receipt, {frozenset(group): (group, spans)})."""

    def __init__(self) -> None:
        self._nodes: dict[str, tuple[float, float, dict[frozenset, tuple]]] = {}

    def note(self, node: str, gates: list, now: float, wall: float, scale: float) -> None:
        """A heartbeat's `gate_spans` (validated by broker/messages.py) at trace time `now`."""
        self._nodes[node] = (now, wall, {frozenset(g["group"]): (
            list(g["group"]), to_trace(g["spans"], now, scale)) for g in gates})

    def forget(self, node: str) -> None:
        self._nodes.pop(node, None)

    def measured(self, members: list[int], wall: float) -> dict[str, Any] | None:
        """The newest fresh report of the group `members` from any node: {node, at (trace
        time of receipt), spans}; None when no agent measured it lately."""
        key, best = frozenset(members), None
        for node in sorted(self._nodes):
            at, seen, gates = self._nodes[node]
            if key in gates and wall - seen <= MAX_AGE_S and (best is None or at > best["at"]):
                best = {"node": node, "at": at, "spans": gates[key][1]}
        return best
