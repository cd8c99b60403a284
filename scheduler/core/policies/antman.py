"""AntMan: guaranteed jobs own their GPUs; an opportunistic job may share GPUs with at most one
guaranteed job and runs slower by how their stages overlap. Nothing is ever preempted.

GPU occupancy persists across rounds (unlike the other policies, which re-place from an empty
cluster), and a guaranteed job that does not fit holds what it could get and waits for the
rest, as the published artifact does. With tenants, a job the round holds back (a borrower
reclaimed, or one over its quota) lets go of its GPUs: what it held is its owner's again.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

from scheduler.core.memory import Room
from scheduler.core.placement import ClusterState
from scheduler.core.policies.base import ArtifactLoop, Policy, RoundContext
from scheduler.core.policies.order import CarriedOrder, Remaining
from scheduler.core.state import Group, JobView, NodeSlice, Plan, Status
from specs.fit import accepts

# A GPU's load as AntMan books it; opportunistic jobs go to the least-loaded GPUs below the
# cap. A guaranteed job's load is booked in two steps (most when it takes a GPU, the rest once
# it holds all its GPUs); the float sums are kept as they are, since ties between GPUs are
# broken by them.
GUARANTEED_LOAD, COMPLETION_LOAD, GUEST_LOAD, LOAD_CAP = 0.1, 0.01, 0.9, 0.8


@dataclass(slots=True)
class _Gpu:
    owner: int | None = None  # the guaranteed job holding it (fully placed or not yet)
    load: float = 0.0
    guests: list[int] = field(default_factory=list)  # opportunistic jobs on it
    stamp: int = 0  # AntMan._changes when it last changed


@dataclass(slots=True)
class _Hold:
    gpus: list[tuple[int, int]] = field(default_factory=list)  # (node, gpu)
    missing: int = 0
    last_node: int | None = None


def overlap_iteration_time(guest: JobView, host: JobView) -> float:
    """Iteration time of an opportunistic job squeezed into the gaps of a guaranteed job.

    The guest's data stage runs while the host computes and communicates, its compute while
    the host loads and communicates, its all-reduce while the host loads and computes; each
    spill into a further host iteration costs one more host iteration.
    """
    d, g, n = guest.profile[:3]
    hd, hg, hn = host.profile[:3]
    iters = 0

    def fit(work: float, gap: float) -> tuple[int, float]:
        if gap <= 0:
            return 0, work
        return math.floor(work / gap), math.fmod(work, gap)

    k, extra = fit(d, hg + hn)
    iters += k
    if extra > 0:
        iters += 1
        g -= min(g, hn, hg + hn - extra)
    k, extra = fit(g, hd + hn)
    iters += k
    if extra > 0:
        iters += 1
        if extra < hd:
            n -= min(n, hd + hg - extra)
    k, extra = fit(n, hd + hg)
    iters += k
    if extra > hd:
        iters += 1
    return iters * host.solo_time


class AntMan(Policy):
    name = "antman"
    interleaves = True
    plans_partial = True  # a job held back lets go of its GPUs (see _let_go)
    # the artifact's loop: an end before an arrival is its own event, however close; close
    # ends are one event, and so are ends within 1e-4 s of the first
    artifact_loop = ArtifactLoop(exact_events=True, groups_ends=True, merges_ends=True)

    def __init__(self, model):
        super().__init__(model)
        self.gpus: list[list[_Gpu]] | None = None
        self.holds: dict[int, _Hold] = {}
        self.guest_gpus: dict[int, list[tuple[int, int]]] = {}
        # The carried order by (priority, submit time): keys never change, so it is kept
        # between rounds; and the live jobs by id, and those the last plan ran.
        self._kept = CarriedOrder(lambda j: (j.priority, j.submit_time))
        self._by_id: dict[int, JobView] = {}
        self._placed: list[JobView] = []
        self._changes = 0  # how many times GPU ownership or load changed
        # job id -> (latest stamp of its GPUs, its solo time, its group): a group is the same
        # while nothing on its GPUs changed
        self._groups: dict[int, tuple[int, float, Group]] = {}
        # jobs stopped outside a plan (the live driver) that still hold their GPUs or guest
        # slots: the walk must reach them even when nothing is free
        self._stopped: dict[int, JobView] = {}
        # #GPUs -> how many opportunistic jobs of that size wait never placed (see plan)
        self._guest_sizes: dict[int, int] = {}
        # the last plan, and _changes when it was made: while no GPU changed and the same
        # jobs run, it is this round's plan too
        self._plan: Plan | None = None
        self._plan_changes = -1
        self._space: Room | None = None  # where jobs may run, and share GPUs (memory.Room)
        self._budget = math.inf  # GB the jobs on one GPU may hold together (memory.py)
        self._pools: list[range] = []  # each pool's nodes
        self._pool_of: list[int] = []
        self._cluster: ClusterState | None = None
        self._lonely = False  # a job must run alone (memory.py): every slot is checked
        # GPUs no guaranteed job holds, and GPUs below the load cap: kept as slots change,
        # since counting them takes a pass over every GPU of the cluster each round
        self._unowned = self._open = 0

    def queue_order(self, pending: Sequence[JobView]) -> list[JobView]:
        return sorted(pending, key=self._kept.key)  # stable: the order given among ties

    def on_submit(self, job: JobView, now: float) -> None:
        self._kept.add(job)
        self._by_id[job.id] = job
        if job.priority != 0:
            self._guest_sizes[job.num_gpu] = self._guest_sizes.get(job.num_gpu, 0) + 1

    def _init(self, ctx: RoundContext) -> None:
        spec = ctx.cluster.spec
        self._cluster = ctx.cluster
        self._space = ctx.cluster.room
        self._budget = self._space.budget if self._space.simple else math.inf
        self._pool_of = spec.node_pools()
        start = 0
        for pool in spec.layout:
            self._pools.append(range(start, start + pool.nodes))
            start += pool.nodes
        self.gpus = [[_Gpu() for _ in range(count)] for count in spec.node_gpus()]
        self._unowned = self._open = sum(spec.node_gpus())

    def on_finish(self, job: JobView, now: float) -> None:
        if (self._by_id.pop(job.id, None) is not None and job.priority != 0
                and job.id not in self.guest_gpus):
            self._uncount_guest(job)
        self._kept.remove(job)
        self._release(job.id)

    def _release(self, job_id: int) -> None:
        """The job's GPUs, held or shared as a guest, are free of it."""
        self._groups.pop(job_id, None)
        self._stopped.pop(job_id, None)
        self._changes += 1
        stamp = self._changes
        hold = self.holds.pop(job_id, _Hold())
        # a hold not yet complete booked its GPUs' load without the completion's share
        share = GUARANTEED_LOAD if hold.missing == 0 else GUARANTEED_LOAD - COMPLETION_LOAD
        for node, gpu in hold.gpus:
            slot = self.gpus[node][gpu]
            slot.owner = None
            self._unowned += 1
            self._add_load(slot, -share)
            slot.stamp = stamp
        for node, gpu in self.guest_gpus.pop(job_id, ()):
            slot = self.gpus[node][gpu]
            slot.guests.remove(job_id)
            self._add_load(slot, -GUEST_LOAD)
            slot.stamp = stamp

    def _add_load(self, slot: _Gpu, amount: float) -> None:
        """Books `amount` on `slot` (a float sum, as AntMan books it) and keeps the count
        of GPUs open to guests."""
        was_open = slot.load < LOAD_CAP
        slot.load += amount
        self._open += (slot.load < LOAD_CAP) - was_open

    def _let_go(self, shown: set[int]) -> None:
        """Jobs the round holds back (RoundContext.partial) give up their GPUs; an
        opportunistic one waits unplaced again."""
        gone = [j for j in (*self.holds, *self.guest_gpus) if j not in shown]
        for job_id in gone:
            job = self._by_id.get(job_id)
            if job is not None and job.priority != 0 and job_id in self.guest_gpus:
                self._guest_sizes[job.num_gpu] = self._guest_sizes.get(job.num_gpu, 0) + 1
            self._release(job_id)
        if gone:  # what the last plan ran, less them
            left = set(gone)
            self._placed = [j for j in self._placed if j.id not in left]

    def _unblock(self) -> None:
        """With nothing running, no hold can grow by a job's end: guaranteed jobs still
        missing GPUs (two that each wait on one node for GPUs the other holds, as a tenant
        layer's order can make them) give theirs back and are placed afresh."""
        for job_id in [j for j, hold in self.holds.items() if hold.missing]:
            self._release(job_id)

    def _uncount_guest(self, job: JobView) -> None:
        """An opportunistic job no longer waits unplaced (it was placed, or it left)."""
        left = self._guest_sizes[job.num_gpu] - 1
        if left:
            self._guest_sizes[job.num_gpu] = left
        else:
            del self._guest_sizes[job.num_gpu]

    def on_profile(self, job: JobView) -> None:
        self._groups.clear()  # its group and its neighbours' are timed by its profile
        self._plan = None
        self._lonely = self._lonely or job.alone

    def on_change(self, job: JobView) -> None:
        if job.status is Status.PENDING and (job.id in self.holds or job.id in self.guest_gpus):
            self._stopped[job.id] = job

    # -- guaranteed jobs -------------------------------------------------------------------
    def _free(self, node: int, job: JobView) -> list[int]:
        """The GPUs of `node` no guaranteed job holds and whose guests leave room for
        `job` (memory.fits)."""
        if self._budget == math.inf and not self._lonely and self._space.simple:
            return [i for i, s in enumerate(self.gpus[node]) if s.owner is None]
        return [i for i, s in enumerate(self.gpus[node])
                if s.owner is None and self._room_for(s, job, node)]

    def _room_for(self, slot: _Gpu, job: JobView, node: int) -> bool:
        """Whether `job` may join the jobs on `slot` (its owner and its guests), a GPU of
        `node` (whose pool's type and memory bound them on a cluster of pools)."""
        by_id = self._by_id
        jobs = [by_id[j] for j in slot.guests if j in by_id]
        if slot.owner is not None and slot.owner in by_id:
            jobs.append(by_id[slot.owner])
        return self._space.fits_in(jobs + [job], self._pool_of[node])

    def _nodes_for(self, job: JobView, hold: _Hold) -> tuple[range, int]:
        """The nodes a guaranteed job takes GPUs from, and their GPUs each: all of a one-shape
        cluster; on a cluster of pools one pool it may use (a job's GPUs lie in one pool):
        where it holds GPUs already, else the first with room for it, else the roomiest."""
        if self._space.simple:
            return range(len(self.gpus)), len(self.gpus[0])
        if hold.gpus:
            pool = self._pool_of[hold.gpus[0][0]]
        else:
            best, best_free = None, -1
            for pool in sorted(self._cluster.need((job,))):
                free = 0
                for node in self._pools[pool]:  # counted only as far as it must be
                    free += len(self._free(node, job))
                    if free >= hold.missing:
                        break
                if free >= hold.missing:
                    best = pool
                    break
                if free > best_free:
                    best, best_free = pool, free
            if best is None:
                return range(0), 1
            pool = best
        nodes = self._pools[pool]
        return nodes, len(self.gpus[nodes[0]])

    def _grab(self, job: JobView, hold: _Hold, node: int, count: int) -> int:
        free = self._free(node, job)[:count]
        if free:
            self._changes += 1
        for gpu in free:
            slot = self.gpus[node][gpu]
            slot.owner = job.id
            self._unowned -= 1
            self._add_load(slot, GUARANTEED_LOAD - COMPLETION_LOAD)
            slot.stamp = self._changes
            hold.gpus.append((node, gpu))
        hold.missing -= len(free)
        return len(free)

    def _place_guaranteed(self, job: JobView) -> bool:
        hold = self.holds.setdefault(job.id, _Hold(missing=job.num_gpu))
        nodes, per_node = self._nodes_for(job, hold)
        if job.num_gpu <= per_node:
            if hold.missing == job.num_gpu:
                best, best_free = None, 0
                for node in nodes:
                    free = len(self._free(node, job))
                    if free >= hold.missing:
                        self._grab(job, hold, node, hold.missing)
                        hold.last_node = node
                        return self._complete(hold)
                    if free > best_free:
                        best, best_free = node, free
                if best is not None:
                    self._grab(job, hold, best, best_free)
                    hold.last_node = best
                return False
            self._grab(job, hold, hold.last_node, hold.missing)
            return self._complete(hold)
        need = hold.missing
        n_full, rest = divmod(need, per_node)
        full = []
        if n_full:
            for node in nodes:
                if len(self._free(node, job)) >= per_node:
                    full.append(node)
                    if len(full) == n_full:
                        break
        enough = len(full) >= n_full
        last = None
        if rest:
            if rest < job.num_gpu % per_node:
                last = hold.last_node
            else:
                best, best_free = None, 0
                for node in nodes:
                    if node in full:
                        continue
                    free = len(self._free(node, job))
                    if free >= rest:
                        last = node
                        break
                    if free > best_free:
                        best, best_free = node, free
                if last is None:
                    enough, last = False, best
            if last is not None:
                self._grab(job, hold, last, rest)
                if rest == job.num_gpu % per_node:
                    hold.last_node = last
        for node in full:
            self._grab(job, hold, node, per_node)
        return enough and self._complete(hold)

    def _complete(self, hold: _Hold) -> bool:
        if hold.missing > 0:
            return False
        self._changes += 1
        for node, gpu in hold.gpus:
            slot = self.gpus[node][gpu]
            self._add_load(slot, COMPLETION_LOAD)
            slot.stamp = self._changes
        return True

    # -- opportunistic jobs ----------------------------------------------------------------
    def _place_opportunistic(self, job: JobView) -> bool:
        if self._space.simple:
            bounded = self._budget != math.inf or self._lonely
            open_gpus = [(slot.load, node, gpu)
                         for node, row in enumerate(self.gpus)
                         for gpu, slot in enumerate(row) if slot.load < LOAD_CAP
                         and (not bounded or self._room_for(slot, job, node))]
        else:  # one pool's: the one whose least loaded GPUs load least
            by_pool: dict[int, list] = {}
            for entry in self._open_in_pools(job):
                by_pool.setdefault(self._pool_of[entry[1]], []).append(entry)
            fitting = [sorted(found, key=_load)[:job.num_gpu] for found in by_pool.values()
                       if len(found) >= job.num_gpu]
            open_gpus = min(fitting, key=lambda found: sum(map(_load, found)), default=[])
        if len(open_gpus) < job.num_gpu:
            return False
        open_gpus.sort(key=lambda e: e[0])
        chosen = [(node, gpu) for _, node, gpu in open_gpus[:job.num_gpu]]
        self._changes += 1
        for node, gpu in chosen:
            slot = self.gpus[node][gpu]
            slot.guests.append(job.id)
            self._add_load(slot, GUEST_LOAD)
            slot.stamp = self._changes
        self.guest_gpus[job.id] = chosen
        return True

    def _open_in_pools(self, job: JobView) -> list[tuple[float, int, int]]:
        """(load, node, GPU) of each GPU below the load cap with room for `job`, node by
        node, on a cluster of pools. Pools of a type the job does not accept, or with fewer
        GPUs than it needs, are passed over (no GPU there could be chosen); the jobs already
        on a GPU are tested with it once per pool, not once per GPU (an owner holds several,
        and every idle GPU of a pool holds none)."""
        gpus, pools, found = self.gpus, self._space.pools, []
        types, tested = job.record.gpu_types, {}
        for p, nodes in enumerate(self._pools):
            if pools[p].gpus < job.num_gpu or not accepts(types, pools[p]):
                continue
            for node in nodes:
                for gpu, slot in enumerate(gpus[node]):
                    if slot.load >= LOAD_CAP:
                        continue
                    key = (p, slot.owner, *slot.guests)
                    room = tested.get(key)
                    if room is None:
                        room = tested[key] = self._room_for(slot, job, node)
                    if room:
                        found.append((slot.load, node, gpu))
        return found

    # -- the round -------------------------------------------------------------------------
    def plan(self, ctx: RoundContext) -> Plan:
        if self.gpus is None:
            self._init(ctx)
        if ctx.partial:
            self._let_go({job.id for job in ctx.queue})
            queue = self._kept.among(ctx.queue)
        else:
            queue = self._kept.sync()
        if len(queue) != len(ctx.queue):  # a caller that did not report every job
            queue = self._kept.rebuild(ctx.queue)
            self._by_id = {j.id: j for j in queue}
            self._placed = [j for j in queue if j.status is Status.RUNNING]
            self._guest_sizes = {}
            for job in queue:
                if job.priority != 0 and job.id not in self.guest_gpus:
                    self._guest_sizes[job.num_gpu] = self._guest_sizes.get(job.num_gpu, 0) + 1
            self._plan = None
        running = {j.id: j for j in self._placed if j.status is Status.RUNNING}
        if not running:
            self._unblock()
        # A pending job is tried in order; one that cannot change anything is passed over
        # without the search: a guaranteed job still missing GPUs when none is unowned, an
        # opportunistic job wider than the GPUs open to guests. When both hold for every job
        # left (no GPU unowned, and every opportunistic job left that waits unplaced wider
        # than the open GPUs; placing takes room, never gives it), the walk ends.
        left = Remaining(self._guest_sizes)
        seen = -1
        for job in queue:
            if seen != self._changes:
                seen = self._changes
                unowned, open_gpus = self._room()
            if unowned == 0 and open_gpus < left.smallest and not self._stopped:
                break
            if job.priority == 0:
                if job.status is not Status.PENDING:
                    continue
                hold = self.holds.get(job.id)
                if unowned == 0 and (job.num_gpu if hold is None else hold.missing) > 0:
                    continue
                placed = self._place_guaranteed(job)
            else:
                if job.status is not Status.PENDING:
                    continue
                new = job.id not in self.guest_gpus  # (not a job stopped on its slots)
                if new:
                    left.visit(job.num_gpu)
                if open_gpus < job.num_gpu:
                    continue
                placed = self._place_opportunistic(job)
                if placed and new:
                    self._uncount_guest(job)
            if placed:
                running[job.id] = job
                self._stopped.pop(job.id, None)
        if (self._plan is not None and self._plan_changes == self._changes
                and len(running) == len(self._placed)):
            return self._plan  # nothing on any GPU changed and the same jobs run
        entry = self._kept.entry
        self._placed = sorted(running.values(), key=entry)  # in the order's order
        groups = [self._group(job, self._by_id) for job in self._placed]
        self._plan = Plan(tuple(groups), shared_gpus=True)
        self._plan_changes = self._changes
        return self._plan

    def _room(self) -> tuple[int, int]:
        """GPUs no guaranteed job holds, and GPUs below the load cap (open to a guest)."""
        return self._unowned, self._open

    def _group(self, job: JobView, by_id: dict[int, JobView]) -> Group:
        """The job's group, from the cache while nothing on its GPUs changed."""
        cells = self.holds[job.id].gpus if job.priority == 0 else self.guest_gpus[job.id]
        gpus = self.gpus
        stamp = max((gpus[node][gpu].stamp for node, gpu in cells), default=-1)
        hit = self._groups.get(job.id)
        if hit is not None and hit[0] == stamp and hit[1] == job.solo_time:
            return hit[2]
        group = self._make_group(job, by_id)
        self._groups[job.id] = (stamp, job.solo_time, group)
        return group

    def _make_group(self, job: JobView, by_id: dict[int, JobView]) -> Group:
        if job.priority == 0:
            cells = self.holds[job.id].gpus
            tt = job.solo_time
        else:
            cells = self.guest_gpus[job.id]
            tt = job.solo_time
            for other in self._neighbours(job, cells):
                peer = by_id[other]
                if peer.priority == 0:
                    if self.holds[peer.id].missing == 0:
                        tt = max(tt, overlap_iteration_time(job, peer))
                else:
                    tt = max(tt, 2.0 * job.solo_time)
        slices: dict[int, list[int]] = {}
        for node, gpu in cells:
            slices.setdefault(node, []).append(gpu)
        placement = tuple(NodeSlice(n, tuple(g)) for n, g in slices.items())
        return Group(jobs=(job.id,), num_gpu=job.num_gpu, tt=tt, placement=placement)

    def _neighbours(self, job: JobView, cells) -> set[int]:
        found = set()
        for node, gpu in cells:
            slot = self.gpus[node][gpu]
            if slot.owner is not None:
                found.add(slot.owner)
            found.update(g for g in slot.guests if g != job.id)
        return found


def _load(entry: tuple) -> float:
    return entry[0]
