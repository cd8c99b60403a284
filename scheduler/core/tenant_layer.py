"""The core's tenant layer: whose each job is, what each round admits, and which running
jobs the planner may not stop now.

The core asks it three things a round: the queue the policy may plan (`admitted`); that the
plan runs nothing held back (`check`); and the plan with every guarded job left as it runs
(`guard`). Admission itself is `tenants.admit`; the rules are in docs/tenants.md.
"""
from __future__ import annotations

import math
from collections import Counter, deque
from typing import Mapping, Sequence

from scheduler.core.placement import ClusterState
from scheduler.core.plan_changes import goes_on
from scheduler.core.plan_check import PlanError
from scheduler.core.policies.base import Policy
from scheduler.core.state import Group, Job
from scheduler.core.tenants import Admission, Ask, admit
from specs.tenants import PriorityClass, Tenancy, job_problem
from traces.record import JobRecord

HOUR = 3600.0


class TenantLayer:
    def __init__(self, tenancy: Tenancy):
        self.tenancy = tenancy
        self.tenant: dict[int, str] = {}  # each job's tenant
        self.kind: dict[int, PriorityClass] = {}  # each job's priority class
        self._stops: dict[int, deque[float]] = {}  # planner stops in the last hour, by job
        self._guards = tenancy.guards
        self.admission: Admission | None = None  # the last round's
        # the last round's order: each tenant's asks as admission was offered them (kept as
        # made; `waiting` reads the ids off them per query, not every round)
        self.order: dict[str, list[Ask]] = {}
        # the running jobs the planner may not stop this round, until when (`_guarded`),
        # and why: "unpreemptible", "min_run" or "restart_budget"
        self._held: dict[int, float | None] = {}
        self.cause: dict[int, str] = {}
        # the last round's guard: the guarded jobs it kept against the plan, and the jobs
        # of the groups it left out for them (read by `waiting`, for people)
        self.kept: frozenset[int] = frozenset()
        self.displaced: frozenset[int] = frozenset()
        # stops by (tenant, cause): "reclaim" (no longer admitted), "planner" (a regroup or
        # the policy's choice), "lost" (outside a plan: a node lost, a trainer failed)
        self.preempted: Counter[tuple[str, str]] = Counter()

    # -- jobs ------------------------------------------------------------------------------
    def problem(self, record: JobRecord) -> str | None:
        """Why the job cannot run under the tenancy, or None."""
        return job_problem(self.tenancy, record.job_id, record.tenant, record.num_gpu,
                           record.priority_class)

    def add(self, record: JobRecord) -> None:
        tenancy = self.tenancy
        self.tenant[record.job_id] = tenancy.tenant_of(record.tenant).name  # type: ignore[union-attr]
        self.kind[record.job_id] = tenancy.class_of(record.priority_class)  # type: ignore[assignment]

    def finished(self, job_id: int) -> None:
        self._stops.pop(job_id, None)

    def lost(self, job_id: int) -> None:
        """A running job stopped outside a plan (its node lost, its trainer failed)."""
        self.preempted[self.tenant[job_id], "lost"] += 1

    def stopped(self, job_ids: Sequence[int], now: float) -> None:
        """The plan stopped these running jobs (a restart counts): their restart budgets."""
        admitted = self.admission.admitted if self.admission is not None else ()
        for job_id in job_ids:
            cause = "planner" if job_id in admitted else "reclaim"
            self.preempted[self.tenant[job_id], cause] += 1
        if self._guards:
            for job_id in job_ids:
                if self.kind[job_id].restart_budget:
                    self._stops.setdefault(job_id, deque()).append(now)

    # -- a round ---------------------------------------------------------------------------
    def admitted(self, queue: Sequence[Job], policy: Policy, placed: Mapping[int, Group],
                 jobs: Mapping[int, Job], cluster: ClusterState, now: float
                 ) -> tuple[Job, ...]:
        """The runnable jobs admitted this round, in the core's order. Each tenant's jobs
        are offered by class priority, then in its policy's order (`Policy.queue_order`);
        the members of a guarded job's group are kept. GPUs and CPUs are the online
        nodes' (`cluster`), each job asking the CPUs placement gives it."""
        self._held = self._guarded(placed, jobs, now)
        kept = {member for job_id in self._held for member in placed[job_id].jobs}
        kind, tenant_of, by_tenant = self.kind, self.tenant, {}
        cpus = cluster.demand.cpus
        order = sorted(policy.queue_order(queue), key=lambda j: -kind[j.id].priority)
        for job in order:
            by_tenant.setdefault(tenant_of[job.id], []).append(
                Ask(job.id, job.num_gpu, job.running_since, kind[job.id].preemptible,
                    job.id in kept, cpus(job.num_gpu, job.num_gpu)))
        self.order = by_tenant
        self.admission = admission = admit(self.tenancy, by_tenant, cluster.free_when_empty(),
                                           cluster.cpus_when_empty())
        chosen = admission.admitted
        return tuple(job for job in queue if job.id in chosen)

    def check(self, groups: Sequence[Group], policy: str) -> None:
        """A plan runs no job held back this round."""
        chosen = self.admission.admitted  # type: ignore[union-attr]
        for group in groups:
            for job_id in group.jobs:
                if job_id not in chosen:
                    raise PlanError(f"policy {policy!r} planned job {job_id}, which the "
                                    f"tenant layer held back this round")

    def guard(self, groups: tuple[Group, ...], placed: Mapping[int, Group], jobs,
              in_place: bool, in_gate: bool = False) -> tuple[tuple[Group, ...], float | None]:
        """`groups` with no job guarded this round (`admitted`) stopped: each one the plan
        would stop (leave out, move, or regroup where that restarts) runs on as it does,
        and the plan's groups sharing a job or a GPU with those are left out. Also when the
        first guard ends (a round is due then, to take what it held back)."""
        guarded = self._held
        self.kept = self.displaced = frozenset()
        if not guarded:
            return groups, None
        ends = [end for end in guarded.values() if end is not None]
        wakeup = min(ends) if ends else None
        new = {j: g for g in groups for j in g.jobs}
        kept: dict[int, Group] = {}  # by guarded job: its group as it runs
        for job_id in guarded:
            if _stops(placed[job_id], new.get(job_id), in_place, in_gate):
                kept[job_id] = _as_it_runs(placed[job_id], placed, jobs)
        out, displaced = list(groups), set()
        while kept:
            jobs_kept = {j for g in kept.values() for j in g.jobs}
            gpus_kept = {(s.node, gpu) for g in kept.values() for s in g.placement
                         for gpu in s.gpus}
            left, more = [], False
            for g in out:
                if jobs_kept.isdisjoint(g.jobs) and gpus_kept.isdisjoint(
                        (s.node, gpu) for s in g.placement for gpu in s.gpus):
                    left.append(g)
                    continue
                displaced.update(g.jobs)
                for j in g.jobs:  # left out: its guarded jobs run on as they do
                    if j in guarded and j not in jobs_kept:
                        group = _as_it_runs(placed[j], placed, jobs)
                        kept.update((m, group) for m in group.jobs)
                        more = True
            out = left
            if not more:
                break
        self.kept = frozenset(j for g in kept.values() for j in g.jobs if j in guarded)
        self.displaced = frozenset(displaced - self.kept)
        return tuple(out) + tuple(dict.fromkeys(kept.values())), wakeup

    @property
    def guarded(self) -> frozenset[int]:
        """The running jobs the planner could not stop at the last round."""
        return frozenset(self._held)

    def guard_end(self, job_id: int) -> float | None:
        """When the running job's guard of the last round ends (None: never, or unguarded)."""
        return self._held.get(job_id)

    def _guarded(self, placed: Mapping[int, Group], jobs, now: float
                 ) -> dict[int, float | None]:
        """The running jobs the planner may not stop now, each with when that ends (None:
        never, an unpreemptible class)."""
        self.cause = {}
        if not self._guards:
            return {}
        out: dict[int, float | None] = {}
        kind, stops, cause = self.kind, self._stops, self.cause
        for job_id in placed:
            cls = kind[job_id]
            if not cls.preemptible:
                out[job_id] = None
                cause[job_id] = "unpreemptible"
                continue
            end = -math.inf  # guarded while now is before it
            since = jobs[job_id].running_since
            why = "min_run"
            if cls.min_run_s and since is not None:
                end = since + cls.min_run_s
            history = stops.get(job_id)
            if history:
                while history and history[0] <= now - HOUR:
                    history.popleft()
                if len(history) >= cls.restart_budget:
                    # spent while its oldest stop is within the hour (as the pruning judges
                    # it: the sum below may round to now)
                    spent = max(history[0] + HOUR, math.nextafter(now, math.inf))
                    if spent > end:
                        end, why = spent, "restart_budget"
            if end > now:
                out[job_id] = end
                cause[job_id] = why
        return out


def _stops(was: Group, group: Group | None, in_place: bool, in_gate: bool) -> bool:
    """Whether running in `group` instead of `was` stops the job (plan_changes' rule)."""
    if group is None or group.placement != was.placement:
        return True
    return group.jobs != was.jobs and not goes_on(was.jobs, in_place, in_gate)


def _as_it_runs(was: Group, placed: Mapping[int, Group], jobs) -> Group:
    """A running job's group with only the members that still run in it (a member whose
    partner finished or stopped is still in the group it was started in); one left alone
    runs at its own pace."""
    members = tuple(m for m in was.jobs if placed.get(m) == was)
    if members == was.jobs:
        return was
    if len(members) == 1:
        return was._replace(jobs=members, tt=jobs[members[0]].solo_time, empty_slot=False)
    return was._replace(jobs=members)
