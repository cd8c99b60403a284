"""Sticky placement: the units a policy chose, placed so that running jobs keep their GPUs.

A running job that moves is stopped and restarted elsewhere (a checkpoint, a restart's
overhead), so where it can stay it does. That can leave a chosen newcomer no room: running
jobs scattered one per node leave no node with the GPUs a bigger job needs, or no GPU of the
type it accepts. Then the fewest running units ranked after it give up their GPUs (on the
node where that moves fewest jobs; the units moved are placed again wherever they fit).
Where even that leaves a unit out, three answers are weighed: leave it out for now, that
answer, or place the units in the policy's order first (the units up to each one left out,
else all of them as on an empty cluster). Each costs what a ski renter counts (`cost`): a
moved job its restart overhead, a job left out the time it has waited times its GPUs. A job is so left
out until, at some round, its wait has paid for the moves; placing everything afresh
whenever one job was left out moved hundreds of running jobs a round on Alibaba's mixed
openb cluster.
"""
from __future__ import annotations

from typing import Mapping, Sequence

from scheduler.core.placement import ClusterState
from scheduler.core.state import JobView

Unit = tuple[int, Sequence[JobView]]  # (#GPUs, the jobs that share them)

# How many left-out units one round gives room to by moving others, at most: each costs a
# pass over the units.
REPAIRS = 16


def place_sticky(cluster: ClusterState, units: Sequence[Unit],
                 previous: Mapping[int, tuple], now: float) -> list:
    """Place `units` (in the policy's order) with running jobs kept where they run
    (`previous`: job id -> its GPUs); each unit's placement, None where it does not fit."""
    pools = [cluster.need(members) for _, members in units] if cluster.pooled \
        else [None] * len(units)
    first, kept = _sticky(cluster, units, pools, previous, 0)
    if None not in first or not previous:
        return first
    repaired = _repair(cluster, units, pools, previous, first, kept)
    if None not in repaired:
        return repaired
    cut, older = 0, first
    while None in older[cut:]:  # a unit left out: let it go before the running keep theirs
        cut = older.index(None, cut) + 1
        older = _sticky(cluster, units, pools, previous, cut)[0]
    candidates = [first, repaired, older]
    if None in older:  # kept GPUs still split the room: as on an empty cluster
        candidates.append(_sticky(cluster, units, pools, {}, len(units))[0])
    return min(candidates, key=lambda r: (cost(units, r, previous, now), r.count(None)))


def cost(units: Sequence[Unit], result: Sequence, previous: Mapping[int, tuple],
         now: float) -> float:
    """What an answer costs, the way a ski renter counts: each running job it moves, its
    restart overhead (seconds); each job it leaves out, the time it has waited so far times
    its GPUs (a bigger job left out holds back more work). A unit is left out until its wait
    has paid for the moves that make room for it."""
    total = 0.0
    for (gpus, members), where in zip(units, result):
        for job in members:
            was = previous.get(job.record.job_id)
            if where is None:
                total += waited(job, now) * gpus
            elif was is not None and was != where:
                total += job.restart_overhead
    return total


def waited(job: JobView, now: float) -> float:
    """How long `job` has waited to run: since it stopped, or since it arrived."""
    if job.pending_mark is not None:
        return max(now - job.pending_mark, 0.0)
    if job.first_start is None:
        return max(now - job.submit_time, 0.0)
    return 0.0


def _sticky(cluster: ClusterState, units: Sequence[Unit], pools: Sequence,
            previous: Mapping[int, tuple], cut: int,
            pinned: Mapping[int, int] | None = None,
            dropped: frozenset[int] = frozenset()) -> tuple[list, list[bool]]:
    """Units before `cut` in order, each where a member runs if those GPUs are free, else
    wherever it fits; then the rest: those whose GPUs are free keep them (a unit in `pinned`
    takes its node, one in `dropped` does not keep its GPUs), the others are placed in order
    (None where nothing fits). Also which units kept a member's GPUs."""
    cluster.reset()
    keep = cluster.keep
    result: list = [None] * len(units)
    kept = [False] * len(units)
    for i, (gpus, members) in enumerate(units):
        if i == cut:
            break
        result[i] = _kept(keep, gpus, members, previous, pools[i])
        kept[i] = result[i] is not None
        if result[i] is None:
            result[i] = cluster.place(gpus, pools[i])
    for i in range(cut, len(units)):
        gpus, members = units[i]
        if pinned and i in pinned:
            result[i] = cluster.place_on(pinned[i], gpus, pools[i])
        elif i not in dropped:
            result[i] = _kept(keep, gpus, members, previous, pools[i])
            kept[i] = result[i] is not None
    for i in range(cut, len(units)):
        if result[i] is None and not (pinned and i in pinned):
            result[i] = cluster.place(units[i][0], pools[i])
    return result, kept


def _kept(keep, gpus: int, members: Sequence[JobView], previous: Mapping[int, tuple],
          pools: frozenset[int] | None):
    """The GPUs a member of the unit runs on, taken again if all are free (and in `pools`,
    where given); else None."""
    for job in members:
        where = previous.get(job.record.job_id)  # ctx.where(job), inlined
        if where is not None and keep(where, gpus, pools):
            return where
    return None


def _repair(cluster: ClusterState, units: Sequence[Unit], pools: Sequence,
            previous: Mapping[int, tuple], result: list, kept: list[bool]) -> list:
    """Give each left-out unit, first in order first, a node by moving the kept units ranked
    after it that cost fewest moved jobs there; `result` and `kept` are the plain sticky
    pass's. Returns the last pass's placements (still with None where this gave up)."""
    pinned: dict[int, int] = {}
    dropped: set[int] = set()
    tried: set[tuple[int, int]] = set()
    for _ in range(REPAIRS):
        if None not in result:
            break
        left = result.index(None)
        room = _room(cluster, units, pools, result, kept, pinned, left, tried)
        if room is None:
            break
        node, moved = room
        tried.add((left, node))
        pinned[left] = node
        dropped.update(moved)
        result, kept = _sticky(cluster, units, pools, previous, 0, pinned, frozenset(dropped))
    return result


def _room(cluster: ClusterState, units: Sequence[Unit], pools: Sequence, result: list,
          kept: list[bool], pinned: Mapping[int, int], left: int,
          tried: set[tuple[int, int]]) -> tuple[int, list[int]] | None:
    """The node for unit `left` whose kept units ranked after it move fewest jobs to free
    room enough (and those units), fastest tier first among equals; None where no node of
    its pools can be freed. Only units that fit one node are given room this way."""
    gpus = units[left][0]
    allowed = pools[left]
    node_gpus = cluster.node_gpus
    if gpus > max(node_gpus, default=0):
        return None
    tier_of = {}
    for rank, tier in enumerate(getattr(allowed, "tiers", ()) or ()):
        for pool in tier:
            tier_of[pool] = rank
    fixed = [0] * len(node_gpus)  # GPUs held by what may not move: pinned, or ranked before
    movable: dict[int, list[int]] = {}
    for i, where in enumerate(result):
        if where is None or not (kept[i] or i in pinned):
            continue  # placed afresh after the kept and pinned: it takes no room first
        if len(where) == 1 and kept[i] and i > left:
            movable.setdefault(where[0].node, []).append(i)
        else:
            for piece in where:
                fixed[piece.node] += len(piece.gpus)
    best = None
    for node, size in enumerate(node_gpus):
        if size < gpus or (left, node) in tried or node in cluster.offline:
            continue
        if allowed is not None and cluster.pool_of(node) not in allowed:
            continue
        held = sum(units[i][0] for i in movable.get(node, ()))
        if size - fixed[node] < gpus:
            continue
        need = gpus - (size - fixed[node] - held)  # GPUs the moved units must free
        moved: list[int] = []
        for i in sorted(movable.get(node, ()), key=lambda i: (len(units[i][1]), -units[i][0])):
            if need <= 0:
                break
            moved.append(i)
            need -= units[i][0]
        cost = (sum(len(units[i][1]) for i in moved), tier_of.get(cluster.pool_of(node), 0), node)
        if best is None or cost < best[0]:
            best = (cost, node, moved)
    return None if best is None else (best[1], best[2])
