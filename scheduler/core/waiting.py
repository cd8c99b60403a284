"""Why each waiting job waits: one reason from a fixed list, read off the core after its
last round, for people (status, the web view).

Why its own module: the rules that hold a job back live elsewhere (the tenant layer's
admission and guard, the policy's order, free GPUs); this only says which of them held each
job back, computed per query and never on the round's path. docs/waiting.md lists the
reasons; `REASONS` is that list.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Any, NamedTuple

from scheduler.core.state import Job, Status

#: every reason a waiting job may be given, with what it means (docs/waiting.md)
REASONS = MappingProxyType({
    "arrived": "submitted since the last round; the next round judges it",
    "launching": "the last round started it: its trainers are being launched (live only)",
    "backoff": "its last run failed (its program exited with an error or would not start): "
               "it may start again at `until`, after its backoff",
    "unfit": "the online nodes that could hold it have fewer GPUs than it needs",
    "over_quota": "its tenant would pass its quota plus borrowing limit (its quota alone, "
                  "for a class that may not borrow)",
    "no_idle_to_borrow": "with it, its tenant would pass its quota (within its borrowing "
                         "limit), but its cohort has no idle GPUs to lend it now",
    "no_cpus_to_borrow": "its tenant may borrow the GPUs, but the CPUs the admitted jobs leave "
                         "are fewer than it asks (lending is dominant-resource fair)",
    "waiting_for_reclaim": "owed to its tenant, but borrowers still hold the GPUs: they are "
                           "guarded until `until`",
    "guarded": "planned, but the GPUs are held by running jobs the planner may not stop now "
               "(`guard`: unpreemptible, min_run or restart_budget) until `until`",
    "no_room": "fewer GPUs are free together where it can run than it needs",
    "behind": "enough GPUs are free where it can run, but the policy starts the jobs ahead "
              "of it first",
})


class Waiting(NamedTuple):
    reason: str  # a key of REASONS
    text: str  # one line for people, with the numbers behind the reason
    ahead: int  # jobs ahead of it: of its tenant (quota reasons), else pending in order
    until: float | None = None  # trace time the reason ends, where known
    guard: str = ""  # for `guarded`: what guards the jobs in its way


def why_waiting(core: Any) -> dict[int, Waiting]:
    """job id -> why it waits, for every pending job of `core` (read-only)."""
    pending = [j for j in core.queue if j.status is Status.PENDING]
    if not pending:
        return {}
    layer = core.tenants
    admitted = None if layer is None or layer.admission is None else layer.admission.admitted
    free, capacity = _free_by_node(core)
    room = _Room(core, free, capacity)
    order = core.policy.queue_order(pending)
    out: dict[int, Waiting] = {}
    ahead = 0  # pending jobs before this one in the policy's order (admitted, with tenants)
    places: dict[str, dict[int, int]] = {}  # tenant -> job id -> its place in tenant order
    cpu_short: dict[tuple, str | None] = {}  # by (GPUs, types, memory): no node's CPUs do
    for job in order:
        need = job.num_gpu
        if not core.judged(job.id):
            out[job.id] = Waiting("arrived", "submitted since the last round", 0)
            continue
        until = core.held_until(job.id)
        if until is not None and until > core.now:
            out[job.id] = Waiting("backoff", "its last run failed; it backs off before it "
                                             "may start again", 0, until)
            continue
        can, free_there, together = room.of(job)
        rec = job.record
        key = (rec.num_gpu, rec.gpu_types, rec.gpu_mem_gb)
        short = cpu_short[key] if key in cpu_short else cpu_short.setdefault(
            key, core.cpu_problem(rec))
        if can < need or short:
            out[job.id] = Waiting("unfit", short or f"needs {need} GPUs; the online nodes "
                                                    f"that could hold them have {can}", 0)
            continue
        if admitted is not None and job.id not in admitted:
            out[job.id] = _held_back(layer, job, places)
            continue
        no_room = free_there < need or not together
        blocked = None
        if layer is not None and (no_room or job.id in layer.displaced):
            blocked = _guarded(layer, job, ahead)
        if blocked is not None:
            out[job.id] = blocked
        elif not no_room:
            out[job.id] = Waiting("behind", f"{free_there} GPUs are free where it can run; "
                                            f"the policy starts {ahead} jobs ahead of it first",
                                  ahead)
        else:
            scattered = ", scattered over nodes" if free_there >= need else ""
            out[job.id] = Waiting("no_room", f"needs {need} GPUs; {free_there} are free where "
                                             f"it can run{scattered}; {ahead} jobs wait ahead "
                                             f"of it", ahead)
        ahead += 1
    return out


def _held_back(layer: Any, job: Job, places: dict[str, dict[int, int]]) -> Waiting:
    """A job the tenant layer did not admit: over its tenant's bound, or nothing to borrow."""
    name = layer.tenant[job.id]
    tenant = layer.tenancy.tenants[name]
    held = layer.admission.held[name].gpus
    place = places.get(name)
    if place is None:
        place = places[name] = {ask.job_id: i
                                for i, ask in enumerate(layer.order.get(name, ()))}
    ahead = place.get(job.id, 0)
    borrows = layer.kind[job.id].preemptible
    bound = tenant.quota + (tenant.borrow_limit if borrows else 0)
    of = f"{ahead} of its jobs are ahead of it"
    if held + job.num_gpu > bound:
        what = (f"quota {tenant.quota} + borrowing limit {tenant.borrow_limit}" if borrows
                else f"quota {tenant.quota}; its class may not borrow")
        return Waiting("over_quota", f"tenant {name} holds {held} GPUs; {job.num_gpu} more "
                                     f"would pass {bound} ({what}); {of}", ahead)
    admission = layer.admission
    if job.id in admission.cpus_short:
        asks = layer.order[name][ahead].cpus
        return Waiting("no_cpus_to_borrow", f"tenant {name} may borrow {job.num_gpu} GPUs, but "
                                            f"it asks {asks} CPUs and "
                                            f"{max(0, admission.cpus_left)} of the cluster's "
                                            f"{admission.cpus} are left; {of}", ahead)
    return Waiting("no_idle_to_borrow", f"tenant {name} holds {held} GPUs; {job.num_gpu} "
                                        f"more would pass its quota {tenant.quota} and its "
                                        f"cohort lends no idle GPUs now; {of}", ahead)


def _guarded(layer: Any, job: Job, ahead: int) -> Waiting | None:
    """Why an admitted job that did not start waits on guarded running jobs: owed to its
    tenant while other tenants' guarded borrowers hold GPUs, or planned and left out by the
    guard; None when neither (then it waits for room like any job)."""
    held = layer.admission.held
    mine = layer.tenant[job.id]
    tenant_of = layer.tenant
    borrowers = sorted(k for k in layer.guarded
                       if tenant_of[k] != mine and held[tenant_of[k]].borrowed > 0)
    owed = held[mine].gpus <= layer.tenancy.tenants[mine].quota
    if owed and borrowers:
        until = _first_end(layer, borrowers)
        return Waiting("waiting_for_reclaim", f"owed to tenant {mine}; borrowing jobs "
                                              f"{_ids(borrowers)} are guarded", ahead, until)
    if job.id not in layer.displaced:
        return None
    blockers = sorted(layer.kept)
    until = _first_end(layer, blockers)
    causes = sorted({layer.cause.get(k, "") for k in blockers} - {""})
    return Waiting("guarded", f"its GPUs are held by jobs {_ids(blockers)}, which the planner "
                              f"may not stop now ({', '.join(causes)})", ahead, until,
                   ",".join(causes))


def _first_end(layer: Any, job_ids: list[int]) -> float | None:
    ends = (layer.guard_end(k) for k in job_ids)
    return min((e for e in ends if e is not None), default=None)


def _ids(job_ids: list[int]) -> str:
    shown = ", ".join(str(j) for j in job_ids[:5])
    return shown + (f" and {len(job_ids) - 5} more" if len(job_ids) > 5 else "")


def _free_by_node(core: Any) -> tuple[list[int], list[int]]:
    """Each node's free GPUs under the last plan, and its GPUs (0 for an offline node)."""
    capacity = list(core.spec.node_gpus())
    for node in core.cluster.offline:
        capacity[node] = 0
    used: dict[int, set[int]] = {}
    for group in core.plan_now.groups:
        for piece in group.placement:
            used.setdefault(piece.node, set()).update(piece.gpus)
    free = [max(0, gpus - len(used.get(node, ()))) for node, gpus in enumerate(capacity)]
    return free, capacity


class _Room:
    """What the nodes a job may run on hold and have free (by the set of pools it needs)."""

    def __init__(self, core: Any, free: list[int], capacity: list[int]):
        self.cluster, self.free, self.capacity = core.cluster, free, capacity
        self.per_node = core.spec.gpus_per_node
        self._seen: dict[Any, tuple[int, int, int]] = {}

    def of(self, job: Job) -> tuple[int, int, bool]:
        """(GPUs of the online nodes it may use, of those free, whether they lie so that it
        fits: on one node for a job no larger than one)."""
        pools = self.cluster.need([job])
        seen = self._seen.get(pools)
        if seen is None:
            nodes = [n for n in range(len(self.capacity))
                     if pools is None or self.cluster.pool_of(n) in pools]
            seen = self._seen[pools] = (sum(self.capacity[n] for n in nodes),
                                        sum(self.free[n] for n in nodes),
                                        max((self.free[n] for n in nodes), default=0))
        can, total, largest = seen
        return can, total, job.num_gpu > self.per_node or largest >= job.num_gpu
