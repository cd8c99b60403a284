"""The stage-gate turns the agents measured, for the web view's occupancy strips.

Why here and not in the round: the spans are for people, the planner never reads them. Each
heartbeat replaces its node's entry (O(gates) under the scheduler's lock: the spans are kept
as received and converted by the web view's thread, outside the lock; nothing per round), so
a group that ended or an agent that died leaves nothing behind once the node reports again.

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
    """node -> (trace time, wall time of receipt, time scale, {frozenset(group): spans as
    received}). Used under the scheduler's lock."""

    def __init__(self) -> None:
        self._nodes: dict[str, tuple[float, float, float, dict[frozenset, list]]] = {}

    def note(self, node: str, gates: list, now: float, wall: float, scale: float) -> None:
        """A heartbeat's `gate_spans` (validated by broker/messages.py) at trace time `now`."""
        self._nodes[node] = (now, wall, scale, {frozenset(g["group"]): g["spans"]
                                                for g in gates})

    def forget(self, node: str) -> None:
        self._nodes.pop(node, None)

    def measured(self, members: list[int], wall: float) -> dict[str, Any] | None:
        """The newest fresh report of the group `members` from any node: {node, at (trace
        time of receipt), scale, raw (the spans as received)}; None when no agent measured
        it lately. `spans_of` converts it."""
        key, best = frozenset(members), None
        for node in sorted(self._nodes):
            at, seen, scale, gates = self._nodes[node]
            if key in gates and wall - seen <= MAX_AGE_S and (best is None or at > best["at"]):
                best = {"node": node, "at": at, "scale": scale, "raw": gates[key]}
        return best


def spans_of(seen: dict[str, Any]) -> dict[str, Any]:
    """A `measured` report with its spans in trace seconds (no lock needed: the report's
    lists are never changed once received)."""
    return {"node": seen["node"], "at": seen["at"],
            "spans": to_trace(seen["raw"], seen["at"], seen["scale"])}
