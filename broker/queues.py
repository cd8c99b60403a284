"""Requests waiting in the broker for a worker of their service with room for them.

The broker hands each worker at most a window of unanswered requests (broker.py); the rest
wait here, so a flood waits in the broker, in view, instead of in the worker's socket, where
a heartbeat sent behind it would wait for all of it. What waits is served in this order:

* the urgent lane first: the cluster's own liveness and orders (which requests are urgent is
  the broker's call, specs/keyroles.urgent);
* then one lane per requester (its key's name where the broker is keyed, else its
  connection), taken in turn, one request each: a client that floods waits behind itself,
  and an operator's one query waits for at most one request of each other client.

Bounds, each answered `overloaded` by the broker rather than grown past: `lane_max` requests
per lane, `total_max` requests and `total_bytes` bytes per service (the total admission limit,
beside the broker's per-client rate limit). A request that waited `max_wait` seconds is not
forwarded: its requester has timed out and resent it, or left (`expired`).
"""
from __future__ import annotations

import collections
from dataclasses import dataclass

LANE_MAX = 1_000          # requests one requester may have waiting for one service
TOTAL_MAX = 10_000        # requests waiting for one service, all lanes together
TOTAL_BYTES = 32 << 20    # ...and their payloads' bytes
MAX_WAIT_S = 1.0          # a request that waited this long is answered, not forwarded


@dataclass(slots=True)
class Waiting:
    """One request held for its service."""
    client: bytes      # the requester's connection, where the answer goes
    caller: bytes      # its key's name (b"" without keys)
    payload: bytes
    msg_id: str
    since: float       # monotonic seconds when it arrived


class ServiceQueue:
    """The requests waiting for one service; see the module docstring for the order."""

    def __init__(self, lane_max: int = LANE_MAX, total_max: int = TOTAL_MAX,
                 total_bytes: int = TOTAL_BYTES):
        self.lane_max, self.total_max, self.total_bytes = lane_max, total_max, total_bytes
        self._urgent: collections.deque[Waiting] = collections.deque()
        self._lanes: collections.OrderedDict[bytes, collections.deque[Waiting]] = \
            collections.OrderedDict()
        self._held: set[tuple[bytes, str]] = set()  # (client, id) of what waits
        self.count = 0
        self.bytes = 0

    def __len__(self) -> int:
        return self.count

    def push(self, lane: bytes, urgent: bool, item: Waiting) -> str | None:
        """Hold `item`; None when held (or already held: a resend of a waiting request is
        answered with it), else why not, for the `overloaded` answer."""
        key = (item.client, item.msg_id)
        if key in self._held:
            return None
        queue = self._urgent if urgent else self._lanes.get(lane)
        waiting = len(queue) if queue is not None else 0
        if waiting >= self.lane_max:
            return f"{waiting} of this requester's requests wait (limit {self.lane_max})"
        if self.count >= self.total_max:
            return f"{self.count} requests wait for it (limit {self.total_max})"
        if self.bytes + len(item.payload) > self.total_bytes:
            return f"{self.bytes} bytes of requests wait for it (limit {self.total_bytes})"
        if queue is None:
            queue = self._lanes[lane] = collections.deque()
        queue.append(item)
        self._held.add(key)
        self.count += 1
        self.bytes += len(item.payload)
        return None

    def peek(self) -> Waiting | None:
        """The request `pop` would take, left in place."""
        if self._urgent:
            return self._urgent[0]
        if not self._lanes:
            return None
        return next(iter(self._lanes.values()))[0]

    def pop(self) -> Waiting | None:
        """The next request to forward: urgent first, then the lanes in turn."""
        if self._urgent:
            return self._taken(self._urgent.popleft())
        if not self._lanes:
            return None
        lane, queue = next(iter(self._lanes.items()))
        item = queue.popleft()
        if queue:
            self._lanes.move_to_end(lane)
        else:
            del self._lanes[lane]
        return self._taken(item)

    def expired(self, now: float, max_wait: float) -> list[Waiting]:
        """Take out every request that has waited `max_wait` or longer (each lane is in
        arrival order, so only its head is looked at until one is young enough)."""
        out: list[Waiting] = []
        for key, queue in [(None, self._urgent), *self._lanes.items()]:
            while queue and now - queue[0].since >= max_wait:
                out.append(self._taken(queue.popleft()))
            if key is not None and not queue:
                del self._lanes[key]
        return out

    def drain(self) -> list[Waiting]:
        """Take out everything (the service has no worker left)."""
        out = list(self._urgent) + [w for q in self._lanes.values() for w in q]
        self._urgent.clear()
        self._lanes.clear()
        self._held.clear()
        self.count = self.bytes = 0
        return out

    def _taken(self, item: Waiting) -> Waiting:
        self._held.discard((item.client, item.msg_id))
        self.count -= 1
        self.bytes -= len(item.payload)
        return item
