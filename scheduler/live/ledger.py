"""The placement ledger: what the scheduler believes each agent runs, and what is in flight.

Pure bookkeeping (no clock, no sockets, no lock of its own: its owner holds one), so every
rule about where a job runs can be unit-tested on its own. A job is in at most one of
`placed` (launched and acknowledged) and `launching` (a launch is out); `on_node` indexes
`placed` by node, with the (agent incarnation, launch number) that put it there, so a
heartbeat can tell a job the agent lost from one launched after its snapshot.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, NamedTuple

from scheduler.core.state import NodeSlice

Launch = tuple[str | None, int]  # (agent incarnation, launch number) of one launch


def node_name(index: int) -> str:
    return f"n{index}"


class Placed(NamedTuple):
    """Where and with whom a job runs; a change of either means stop and relaunch."""

    group: tuple[int, ...]
    tt: float
    slices: tuple[NodeSlice, ...]

    @property
    def key(self) -> tuple:
        return self.group, self.slices

    @property
    def nodes(self) -> tuple[int, ...]:
        return tuple(s.node for s in self.slices)


@dataclass
class Ledger:
    placed: dict[int, Placed] = field(default_factory=dict)  # what agents run, as launched
    # the same by node: node index -> {job: launch that placed it there, None if not told}
    on_node: dict[int, dict[int, Launch | None]] = field(default_factory=dict)
    launching: dict[int, Placed] = field(default_factory=dict)  # launch requests in flight
    aborted: set[int] = field(default_factory=set)  # crashed or finished while launching
    stopping: set[int] = field(default_factory=set)  # jobs a round is stopping right now
    strays: list[tuple[int, str]] = field(default_factory=list)  # (job, node) to stop

    def where(self, job_id: int) -> Placed | None:
        """Where the job runs or is being launched; None when neither."""
        return self.placed.get(job_id) or self.launching.get(job_id)

    def runs_on(self, job_id: int, name: str) -> bool:
        where = self.where(job_id)
        return where is not None and any(node_name(n) == name for n in where.nodes)

    def on(self, index: int) -> dict[int, Launch | None]:
        """Jobs placed on node `index` (a view: do not change it)."""
        return self.on_node.get(index, {})

    def place(self, job_id: int, where: Placed, launches: Mapping[int, Launch]) -> None:
        self.placed[job_id] = where
        for node in where.nodes:
            self.on_node.setdefault(node, {})[job_id] = launches.get(node)

    def unplace(self, job_id: int) -> Placed | None:
        where = self.placed.pop(job_id, None)
        for node in (where.nodes if where else ()):
            self.on_node[node].pop(job_id, None)
        return where

    def release(self, job_id: int, keep: str | None) -> Placed | None:
        """The job ended outside a plan (finished, failed, lost): it is no longer placed, a
        launch in flight is marked aborted, and its trainers on other nodes than `keep` (the
        one that reported) become strays to stop. Returns where it was."""
        where = self.unplace(job_id) or self.launching.get(job_id)
        if job_id in self.launching:
            self.aborted.add(job_id)
        for other in (where.nodes if where else ()):
            if node_name(other) != keep:
                self.strays.append((job_id, node_name(other)))
        return where

    def take_strays(self) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
        """(strays to stop, once each in order, and adopted ones), emptying the list. A stray
        found when its agent registered may have been placed on that very node since (the
        launch found it running and adopted it): it is no stray now."""
        strays, self.strays = self.strays, []
        adopted = [(j, n) for j, n in strays if self.runs_on(j, n)]
        left = [(j, n) for j, n in strays if not self.runs_on(j, n)]
        return list(dict.fromkeys(left)), adopted

    def begin_launch(self, job_id: int, want: Placed) -> None:
        self.launching[job_id] = want
        self.aborted.discard(job_id)

    def end_launch(self, job_id: int) -> bool:
        """The launch is answered; True when the job was aborted meanwhile."""
        self.launching.pop(job_id, None)
        aborted = job_id in self.aborted
        self.aborted.discard(job_id)
        return aborted
