"""What every policy shares: the round's inputs and the small hooks the core calls."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, NamedTuple, Sequence

from scheduler.core.model import CostModel
from scheduler.core.placement import ClusterState
from scheduler.core.policies.admission import AdmissionWalk
from scheduler.core.policies.order import fits_monotone
from scheduler.core.policies.sticky import place_sticky
from scheduler.core.state import Group, JobView, NodeSlice, Plan, Status, alone


@dataclass(slots=True)
class RoundContext:
    """One round's view. `queue` is the runnable jobs in the core's order (submission order),
    read-only: a policy that sorts works on its own list (see Policy.carried_order)."""

    now: float
    queue: Sequence[JobView]
    cluster: ClusterState
    model: CostModel
    previous: dict[int, tuple[NodeSlice, ...]]  # where running jobs are now (if sticky)
    # The queue leaves out runnable jobs the tenant layer holds back this round: a policy
    # that keeps its own order of every job plans only the queue's (CarriedOrder.among).
    partial: bool = False

    def where(self, job: JobView) -> tuple[NodeSlice, ...] | None:
        return self.previous.get(job.id)


class ArtifactLoop(NamedTuple):
    """How the published artifact's simulator loop for a policy took events, which its
    figures depend on. Only the simulator's artifact mode reads it (it replays that loop;
    scheduler/sim/artifact.py). Its loops differ by policy: Muri's folds an event within a
    tolerance of an arrival into it, the others compare times exactly (`exact_events`); most
    take a job's end together with the first end close to it, FIFO's and Tiresias's only
    exactly equal ends (`groups_ends`); AntMan's also takes every end within 1e-4 s of the
    first one with it (`merges_ends`). A policy the artifact has no loop for keeps all off
    (the simulator's own tolerance, equal ends)."""

    exact_events: bool = False
    groups_ends: bool = False
    merges_ends: bool = False


class Policy:
    """Base policy: subclasses implement `plan`, planning only the jobs of `ctx.queue`
    (docs/policies.md, "The contract"). A policy is made with the cost model it plans with
    (and a built-in with its own settings, see settings.py). What it declares below has a
    default that is safe for a policy that declares nothing; its hooks are no-ops.

    Jobs are the core's: a policy reads them (`JobView`) and never writes one. What it
    derives per job (a queue, a ledger, a mark) it keeps itself, by job id, and drops in
    `on_finish`."""

    name = "base"
    interleaves = False  # its groups may hold several jobs (AntMan's share GPUs instead)
    max_group = 4  # the most jobs an interleaving policy's group may hold (the core checks)
    runs_unplaced = False  # its plans may run a job on no GPUs (the core refuses it otherwise)
    # It plans only ctx.queue's jobs also when a tenant layer leaves some runnable ones out
    # (RoundContext.partial). Off, the core refuses it with tenants: a policy that plans
    # from a list of its own would run jobs the tenant layer holds back.
    plans_partial = False
    artifact_loop = ArtifactLoop()  # the simulator's artifact mode only (see ArtifactLoop)
    # Where the core takes a job's first remaining-time estimate (`Job.remaining_estimate`,
    # until the job runs or its progress is reported) from: its iterations x solo time, or
    # with this on the trace's `duration` (Muri-S under the paper preset, as the artifact
    # ranked a new job). The core owns the estimate; a policy only declares which it plans by.
    estimate_from_duration = False

    def __init__(self, model: CostModel):
        self.model = model
        self._order: list[JobView] = []  # the runnable jobs as this policy last sorted them

    def carried_order(self, queue: Sequence[JobView]) -> list[JobView]:
        """The runnable jobs in the order this policy left them last round (jobs new to it
        appended in the core's order), to be sorted in place by the caller.

        The published artifact sorts one job list in place at every event, so ties in a sort
        fall in the order of the previous event's last sort, and its results (which the paper
        preset reproduces) depend on that. The carried order is kept here, per policy, and
        never in the core's queue, whose order drivers see in `Core.running_jobs()`.
        `order.CarriedOrder` gives the same order kept between rounds, without re-sorting
        the backlog (the priority policies and AntMan use it).
        """
        live = {id(j) for j in queue}
        order = [j for j in self._order if id(j) in live]
        known = {id(j) for j in order}
        order.extend(j for j in queue if id(j) not in known)
        self._order = order
        return order

    def queue_order(self, pending: Sequence[JobView]) -> list[JobView]:
        """`pending` in this policy's order, for people (a job's queue position): as it
        last sorted its runnable jobs, jobs new to it after, in the order given. Read-only."""
        rank: dict[int, int] = {}
        for job in self._order:
            rank.setdefault(job.id, len(rank))
        tail = len(rank)
        return sorted(pending, key=lambda j: rank.get(j.id, tail))

    def on_submit(self, job: JobView, now: float) -> None:
        """A job arrived: set up the policy's own bookkeeping for it (a queue, a ledger)."""

    def set_model(self, model: CostModel) -> None:
        """The core's cost model changed (a group slowdown calibrated from measured paces):
        plan with it from now on, dropping what was derived from the old one."""
        self.model = model

    def on_profile(self, job: JobView) -> None:
        """A job's measured profile replaced the old one: drop what was derived from it."""

    def on_change(self, job: JobView) -> None:
        """The core changed a job's numbers (it ran, stopped, got a new estimate or profile):
        an order kept between rounds must look at it again (see order.CarriedOrder)."""

    def on_changes(self, jobs: Sequence[JobView]) -> None:
        """Time moved on for the running `jobs`, each brought up to date: the core's one
        call per advance. `on_change` for each, unless a policy takes them in bulk."""
        for job in jobs:
            self.on_change(job)

    def on_finish(self, job: JobView, now: float) -> None:
        """A job completed; release whatever the policy held for it."""

    def plan(self, ctx: RoundContext) -> Plan:
        raise NotImplementedError


def solo_group(job: JobView, placement: Sequence[NodeSlice]) -> Group:
    return Group(jobs=(job.id,), num_gpu=job.num_gpu, tt=job.solo_time,
                 placement=tuple(placement))


def place_units(ctx: RoundContext, units: Sequence[tuple[int, Sequence[JobView]]],
                replay: Replay | None = None) -> list:
    """Place units (#GPUs, member jobs) in the given order on an emptied cluster; returns the
    placement of each (None where it does not fit).

    With sticky placement (ctx.previous), running jobs keep their GPUs where they can, and
    a newcomer they leave no room is given room by moving the fewest of them (sticky.py).
    Without it, a policy's `replay` hands back last round's answers where this round asks
    the same.
    """
    cluster = ctx.cluster
    if not ctx.previous and replay is not None and not cluster.pooled:
        replay.start(cluster)
        result = [replay.place(cluster, gpus) for gpus, _ in units]
        replay.finish()
        return result
    return place_sticky(cluster, units, ctx.previous, ctx.now)


def place_in_order(ctx: RoundContext, order: Sequence[JobView],
                   sizes: Mapping[int, int] | None = None,
                   replay: Replay | None = None) -> Sequence[Group]:
    """Greedy consolidated placement on an emptied cluster: each job in turn, if it fits.

    With sticky placement, which jobs run is still decided greedily in priority order (on an
    empty cluster); where they run then prefers where they already are.

    `sizes` counts the jobs of `order` by #GPUs (counted here when not given): the walk stops
    once no job left could fit, so a round costs what runs, not the whole backlog. A policy
    that places this way every round passes its `Replay`, which hands back last round's
    placements (and groups) where this round asks the same.
    """
    chosen, where, _ = greedy(ctx.cluster, order, sizes, fits_monotone(ctx.model), replay)
    if not ctx.previous:
        if replay is None:
            return [solo_group(job, slices) for job, slices in zip(chosen, where)]
        return replay.groups(chosen, where)
    placements = place_units(ctx, [(job.num_gpu, (job,)) for job in chosen])
    return [solo_group(job, slices) for job, slices in zip(chosen, placements)
            if slices is not None]


class Replay:
    """The placements of a policy's last greedy walk, handed back while this walk repeats it.

    What `ClusterState.place` returns depends only on the requests made since the cluster
    was emptied (and on its offline nodes). A walk that asks for the same #GPUs as the last
    one, request by request, gets the same answers; so those are taken from the last walk
    without searching the nodes, and the cluster is brought up to date only where the two
    walks part (by making this walk's requests so far again). Most rounds repeat the running
    jobs' requests, so their placements, and their groups, are reused rather than made anew.
    The cluster is left as scratch: every user of it empties it first.
    """

    __slots__ = ("_trail", "_new", "_same", "_key", "_groups", "free_total")

    def __init__(self) -> None:
        self._trail: list[tuple[int, tuple | None, int]] = []  # (#GPUs, answer, free after)
        self._new: list[tuple[int, tuple | None, int]] = []
        self._same = False  # whether every request of this walk so far repeats the last
        self._key: tuple | None = None
        # job id -> its group alone where it was last placed: a job placed there again gets
        # that group back
        self._groups: dict[int, Group] = {}
        self.free_total = 0  # the cluster's free GPUs as this walk has left them

    def start(self, cluster: ClusterState) -> None:
        """A walk begins on `cluster` as if emptied; it is emptied only where this walk
        parts from the last (a walk that repeats the last one never touches it)."""
        key = (cluster.spec, cluster.demand, frozenset(cluster.offline))
        if key != self._key:  # another cluster, or other nodes offline: start afresh
            self._key, self._trail, self._groups = key, [], {}
        self._new = []
        self._same = True
        self.free_total = cluster.free_when_empty()

    def place(self, cluster: ClusterState, gpus: int) -> tuple | None:
        """`cluster.place(gpus)` as this walk's next request."""
        new = self._new
        if self._same:
            k = len(new)
            trail = self._trail
            if k < len(trail) and trail[k][0] == gpus:
                entry = trail[k]
                new.append(entry)
                self.free_total = entry[2]
                return entry[1]
            self._same = False  # the walks part here: make this walk's requests so far
            cluster.reset()
            for asked, answer, _ in new:
                if answer is not None:
                    cluster.place(asked)
        slices = cluster.place(gpus)
        self.free_total = cluster.free_total
        new.append((gpus, slices, self.free_total))
        return slices

    def place_all(self, cluster: ClusterState, sizes: Sequence[int]) -> list:
        """A whole walk: start, `place` for each of `sizes` (#GPUs) in turn, finish."""
        self.start(cluster)
        trail, new = self._trail, self._new
        k = 0
        for k, gpus in enumerate(sizes):  # the requests that repeat the last walk's
            if k >= len(trail) or trail[k][0] != gpus:
                break
            new.append(trail[k])
        else:
            k = len(sizes)
        if k:
            self.free_total = new[-1][2]
        result = [entry[1] for entry in new]
        place = self.place
        result.extend(place(cluster, gpus) for gpus in sizes[k:])
        self.finish()
        return result

    def finish(self) -> None:
        """The walk ended: the next one is compared with it."""
        self._trail = self._new

    def groups(self, jobs: Sequence[JobView], where: Sequence[tuple]) -> tuple[Group, ...]:
        """Each job's group alone on its GPUs: the one made before where the job's GPUs and
        solo time are unchanged (groups are values: this only saves making them again)."""
        known = self._groups
        if len(known) > 65536:
            known.clear()
        out = []
        append = out.append
        for job, slices in zip(jobs, where):
            job_id = job.id
            group = known.get(job_id)
            if group is None or group.placement != slices or group.tt != job.solo_time:
                group = known[job_id] = alone(job_id, job.num_gpu, job.solo_time,
                                              tuple(slices))  # solo_group
            append(group)
        return tuple(out)


def greedy(cluster: ClusterState, order: Iterable[JobView], sizes: Mapping[int, int] | None,
           monotone: bool, replay: Replay | None = None) -> tuple[list[JobView], list, list[int]]:
    """Place each job of `order` in turn where it fits, on `cluster` emptied first; the jobs
    placed, where, and their positions in `order` (which may be a lazy iterable when `sizes`
    is given). With `replay`, the last walk's answers are reused (see Replay).

    The walk is admission.AdmissionWalk's: it skips what cannot fit without asking the
    cluster, and stops when nothing left can fit. On a cluster of pools each job asks only
    for the pools it may use (see ClusterState.need), and no request says more of another.
    """
    if sizes is None:
        order = list(order)
        sizes = {}
        for job in order:
            sizes[job.num_gpu] = sizes.get(job.num_gpu, 0) + 1
    chosen: list[JobView] = []
    where: list = []
    if cluster.pooled:
        cluster.reset()
        need, place_in = cluster.need, cluster.place

        def take_in_pools(job: JobView, position: int) -> int | None:
            slices = place_in(job.num_gpu, need((job,)))
            if slices is None:
                return None
            chosen.append(job)
            where.append(slices)
            return cluster.free_total

        positions = AdmissionWalk(sizes, cluster.free_total, False).over(order, take_in_pools)
        return chosen, where, positions
    if replay is None:
        replay = Replay()
    replay.start(cluster)
    place = replay.place

    def take(job: JobView, position: int) -> int | None:
        slices = place(cluster, job.num_gpu)
        if slices is None:
            return None
        chosen.append(job)
        where.append(slices)
        return replay.free_total

    positions = AdmissionWalk(sizes, replay.free_total, monotone).over(order, take)
    replay.finish()
    return chosen, where, positions


def is_running(job: JobView) -> bool:
    return job.status is Status.RUNNING
