"""Whose turn it is on each stage of one interleaved group: the stage gate's state, no sockets.

Why a separate pure module: the rules (exclusive stages, cyclic turns, dropping a member that
blocks the others) are where the bugs would hide, so they live in a small state machine that
takes the time as an argument and returns the replies to send. The socket server in
`node_agent.gate` only decodes, calls and sends.

Rules (DESIGN.md 1 and 4.4):

* Each stage is held by at most one member. For each stage a turn pointer walks the members in
  slot order (0, 1, ..., m-1, 0, ...); a stage is granted only to the member whose turn it is,
  and releasing it passes the turn on. Member i therefore starts i stages behind member 0.
* A member that leaves is taken out of every rotation. So is one that blocks another member for
  longer than `stall_timeout`: it holds a stage someone waits for, or it is its turn on a stage
  someone waits for and it does not ask. Its own waiting request, if any, is answered `dropped`.
* A member takes turns from its first request (or `join`) on: one that never asks (a program
  that does not use the trainer API) is never waited for.
* A dropped or departed member may `join` again. To come back without deadlocking anyone it
  is given the earliest iteration from which it can take every stage in its usual place:

Turns are positions `(n, slot)`: the turn on a stage walks (0, 0), (0, 1), ..., (0, m-1),
(1, 0), ... skipping members that are out, and a member takes its n-th turn on every stage in
turn. Each member's requests then come in increasing order of `n * K + stage + slot`
(K = stages + members), and so does each stage's service; the pending request lowest in that
order can always be served next, hence no deadlock. A returning member that next asks for
stage r is placed at the smallest iteration n whose positions (n for stages >= r, n + 1 for
the ones before) no stage has passed yet, which keeps that order intact.

A regroup (new members, or a new slot order, on the same GPUs) is done in place: members no
longer in the group leave, turns are counted afresh, and each member that stays is placed
again as a returning one, in its new slot. The processes never restart for it.

Replies are `(token, reply)` pairs: the token is whatever the caller passed with the request
(the server's return address), so a deferred grant goes back to the request that asked for it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Hashable, Optional, Sequence

Reply = tuple[Any, dict]
Emit = Callable[[dict], None]


def error(code: str, reason: str) -> dict:
    return {"ok": False, "error": code, "reason": reason}


@dataclass
class _Pending:
    stage: str
    token: Any
    since: float


class TurnTable:
    """Turn state of one group. Not thread-safe: one server thread owns it."""

    def __init__(self, members: Sequence[Hashable], stages: Sequence[str], stall_timeout: float,
                 emit: Optional[Emit] = None):
        if not members or len(set(members)) != len(members):
            raise ValueError(f"members must be non-empty and distinct, got {members!r}")
        if not stages or len(set(stages)) != len(stages) or \
                not all(isinstance(s, str) and s for s in stages):
            raise ValueError(f"stages must be distinct non-empty names, got {stages!r}")
        if not stall_timeout > 0:
            raise ValueError(f"stall_timeout must be > 0, got {stall_timeout}")
        self.slots = tuple(members)
        self.stages = tuple(stages)
        self.stall_timeout = float(stall_timeout)
        self._emit = emit or (lambda event: None)
        self._slot = {job: i for i, job in enumerate(self.slots)}
        self._rank = {s: r for r, s in enumerate(self.stages)}
        self.active: set[Hashable] = set()
        # members that have not asked for a turn yet: they join by asking
        self._expected = set(self.slots)
        # first iteration from which a member takes turns on each stage; None: not placed yet
        self._from: dict[Hashable, Optional[dict[str, int]]] = {job: None for job in self.slots}
        self._next = {s: (0, 0) for s in self.stages}  # no turn before this position is left
        self.holder: dict[str, Optional[Hashable]] = {s: None for s in self.stages}
        self._since = {s: float("-inf") for s in self.stages}  # last grant/release/turn change
        self._pending: dict[Hashable, _Pending] = {}
        self.grants = {s: 0 for s in self.stages}

    # -- queries ---------------------------------------------------------------------------

    def turn(self, stage: str) -> Optional[Hashable]:
        """The member whose turn it is on `stage` (None when nobody takes turns)."""
        pos = self._turn_position(stage)
        return None if pos is None else self.slots[pos[1]]

    def next_deadline(self) -> Optional[float]:
        """Earliest time at which some member would be dropped for stalling."""
        deadlines = [d for d, _job, _why in self._stalls()]
        return min(deadlines) if deadlines else None

    # -- requests --------------------------------------------------------------------------

    def acquire(self, job: Hashable, stage: str, token: Any, now: float) -> list[Reply]:
        if job in self._expected:  # its first turn: it takes part from now on
            self._activate(job, now)
        refusal = self._check(job, stage, token)
        if refusal:
            return refusal
        if self.holder[stage] == job:  # a retried acquire: the grant stands
            return [(token, self._grant_reply(stage))]
        waiting = self._pending.get(job)
        if waiting is not None and waiting.stage != stage:
            return [(token, error("busy", f"job {job} already waits for {waiting.stage!r}"))]
        if self._from[job] is None:
            self._place(job, stage)
        since = waiting.since if waiting is not None else now
        self._pending[job] = _Pending(stage, token, since)
        return self._try_grant(stage, now)

    def release(self, job: Hashable, stage: str, token: Any, now: float) -> list[Reply]:
        refusal = self._check(job, stage, token)
        if refusal:
            return refusal
        if self.holder[stage] != job:
            return [(token, error("not_holder", f"job {job} does not hold {stage!r}"))]
        self.holder[stage] = None
        self._since[stage] = now
        self._emit({"event": "release", "job": job, "stage": stage, "t": now})
        return [(token, {"ok": True, "released": stage})] + self._try_grant(stage, now)

    def join(self, job: Hashable, token: Any, now: float) -> list[Reply]:
        if job not in self._slot:
            return [(token, error("unknown_job", f"job {job} is not a member of this group"))]
        if job not in self.active:
            self._activate(job, now)
        return [(token, {"ok": True, "joined": True})]

    def leave(self, job: Hashable, token: Any, now: float) -> list[Reply]:
        if job not in self._slot:
            return [(token, error("unknown_job", f"job {job} is not a member of this group"))]
        self._expected.discard(job)
        replies = self.remove(job, "left", now) if job in self.active else []
        return replies + [(token, {"ok": True, "left": True})]

    def regroup(self, members: Sequence[Hashable], now: float) -> list[Reply]:
        """The group's members and slot order are now `members`: the ones left out leave,
        new ones take turns from their first request, and the ones that stay are placed again
        in their new slots, turns counted afresh as in a new table (a stage's holder keeps it
        until it releases: holding, it waits for nobody). Replies to send: the left members' waiting requests, new grants."""
        if not members or len(set(members)) != len(members):
            raise ValueError(f"members must be non-empty and distinct, got {members!r}")
        replies: list[Reply] = []
        for job in self.slots:
            if job not in members:
                if job in self.active:
                    replies += self.remove(job, "left", now, "it left the group")
                self._expected.discard(job)
                self._from.pop(job, None)
        self._next = {s: (0, 0) for s in self.stages}  # turns as in a new table
        self.slots = tuple(members)
        self._slot = {job: i for i, job in enumerate(self.slots)}
        for job in self.slots:
            if job not in self._from:  # new to the group
                self._expected.add(job)
            self._from[job] = None
        for job, waiting in self._pending.items():
            self._place(job, waiting.stage)
        self._emit({"event": "regroup", "members": list(self.slots), "t": now})
        for stage in self.stages:
            replies += self._try_grant(stage, now)
        return replies

    def check_stalls(self, now: float) -> list[Reply]:
        """Drop every member that has blocked another one for longer than the timeout."""
        replies: list[Reply] = []
        due: dict = {}
        for deadline, job, why in self._stalls():
            if deadline <= now:
                due.setdefault(job, why)
        for job, why in due.items():
            if job in self.active:
                replies += self.remove(job, "dropped", now, why)
        return replies

    def remove(self, job: Hashable, kind: str, now: float, why: str = "") -> list[Reply]:
        """Take `job` out of every rotation (kind: 'left' or 'dropped'); its turns pass on."""
        turns = {s for s in self.stages if self.holder[s] == job or self.turn(s) == job}
        self.active.discard(job)
        self._from[job] = None
        replies: list[Reply] = []
        waiting = self._pending.pop(job, None)
        if waiting is not None:
            replies.append((waiting.token, error(kind, why or f"job {job} {kind} the group")))
        for stage in turns:
            if self.holder[stage] == job:
                self.holder[stage] = None
            self._since[stage] = now
        self._emit({"event": kind, "job": job, "reason": why, "t": now})
        for stage in self.stages:
            replies += self._try_grant(stage, now)
        return replies

    # -- internals -------------------------------------------------------------------------

    def _check(self, job: Hashable, stage: str, token: Any) -> list[Reply]:
        if stage not in self._rank:
            return [(token, error("unknown_stage",
                                  f"stage {stage!r} is not one of {list(self.stages)}"))]
        if job not in self._slot:
            return [(token, error("unknown_job", f"job {job} is not a member of this group"))]
        if job not in self.active:
            return [(token, error("not_member",
                                  f"job {job} left or was dropped; send join to come back"))]
        return []

    def _activate(self, job: Hashable, now: float) -> None:
        """`job` takes turns from its next request on (placed then)."""
        self._expected.discard(job)
        self.active.add(job)
        self._from[job] = None
        self._emit({"event": "join", "job": job, "t": now})

    def _grant_reply(self, stage: str) -> dict:
        return {"ok": True, "grant": stage, "n": self.grants[stage]}

    def _first_position(self, job: Hashable, stage: str) -> tuple[int, int]:
        """The member's first turn on `stage` at or after the stage's next position."""
        n, i = self._next[stage]
        slot = self._slot[job]
        return max(n + (slot < i), self._from[job][stage]), slot

    def _turn_position(self, stage: str) -> Optional[tuple[int, int]]:
        placed = [j for j in self.active if self._from[j] is not None]
        if not placed:
            return None
        return min(self._first_position(j, stage) for j in placed)

    def _place(self, job: Hashable, stage: str) -> None:
        """Give a returning member the earliest iteration whose turns no stage has passed."""
        slot, first = self._slot[job], self._rank[stage]
        n = 0
        for s, (n_s, i_s) in self._next.items():
            before = self._rank[s] < first  # taken in the iteration after
            n = max(n, n_s + (slot < i_s) - before)
        self._from[job] = {s: n + (self._rank[s] < first) for s in self.stages}

    def _try_grant(self, stage: str, now: float) -> list[Reply]:
        if self.holder[stage] is not None:
            return []
        pos = self._turn_position(stage)
        if pos is None:
            return []
        job = self.slots[pos[1]]
        waiting = self._pending.get(job)
        if waiting is None or waiting.stage != stage:
            return []
        del self._pending[job]
        self.holder[stage] = job
        n, i = pos
        self._next[stage] = (n, i + 1) if i + 1 < len(self.slots) else (n + 1, 0)
        self._since[stage] = now
        self.grants[stage] += 1
        self._emit({"event": "grant", "job": job, "stage": stage, "t": now})
        return [(waiting.token, self._grant_reply(stage))]

    def _stalls(self):
        """(deadline, blocking member, why) for each stage on which someone waits."""
        for stage in self.stages:
            blocker = self.holder[stage]
            doing = "holds"
            if blocker is None:
                blocker, doing = self.turn(stage), "does not take its turn on"
            if blocker is None:
                continue
            waits = [p.since for j, p in self._pending.items() if p.stage == stage and j != blocker]
            if not waits:
                continue
            since = max(self._since[stage], min(waits))
            yield (since + self.stall_timeout, blocker,
                   f"{doing} {stage!r} while others wait (stall timeout {self.stall_timeout}s)")
