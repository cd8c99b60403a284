"""The placement ledger: where the scheduler believes each agent runs a job's trainers, and
which launches are out; and trainers found running outside any plan (strays).

Pure bookkeeping (no clock, no sockets, no lock of its own: its owner holds one), so every
rule about where a job runs can be unit-tested on its own. It says where, not what a job's
fate is: that is its lifecycle phase (lifecycle.py, the one writer of this ledger's jobs). A
job is in at most one of `placed` (its phase running or stopping) and `launching` (its phase
launching); `on_node` indexes `placed` by node, with the (agent incarnation, launch number)
that put it there, so a heartbeat can tell a job the agent lost from one launched after its
snapshot.
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

    def regroup(self, job_id: int, want: Placed) -> None:
        """The job's group and pace changed in place: same slices, so the index stays."""
        self.placed[job_id] = want

    def unplace(self, job_id: int) -> Placed | None:
        where = self.placed.pop(job_id, None)
        for node in (where.nodes if where else ()):
            self.on_node[node].pop(job_id, None)
        return where

    def release(self, job_id: int, keep: str | None) -> Placed | None:
        """The job ended outside a plan (finished, failed, lost): it is no longer placed nor
        launching (a launch still out learns so from the job's phase), and its trainers on
        other nodes than `keep` (the one that reported) become strays to stop. Returns where
        it was."""
        where = self.unplace(job_id) or self.launching.pop(job_id, None)
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

    def end_launch(self, job_id: int) -> None:
        """The launch is answered (or was released meanwhile)."""
        self.launching.pop(job_id, None)
