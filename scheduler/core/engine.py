"""The scheduling core: events in, plans out. It holds no clock, socket or file; every call
carries the time the driver says it is, so the simulator and the live service drive it alike.
"""
from __future__ import annotations

import math
from dataclasses import replace
from types import MappingProxyType
from typing import Iterable, Mapping

from scheduler.core.memory import Room, on_each_gpu
from scheduler.core.model import CostModel
from scheduler.core.placement import ClusterState, Demand, cpu_misfit
from scheduler.core.plan_changes import NO_CHANGES, START, STARTS, STOP, PlanChanges, diff
from scheduler.core.plan_check import PlanCheck, PlanError
from scheduler.core.policies.base import Policy, RoundContext
from scheduler.core.speed import TypeSpeeds
from scheduler.core.state import Group, Job, NodeSlice, Plan, Status
from scheduler.core.tenant_layer import TenantLayer
from specs.limits import MAX_GPU_MEM_GB
from specs.fit import Fit
from specs.gpu_speed import MAX_SPEED, MIN_SPEED
from specs.spec import ClusterSpec
from specs.tenants import Tenancy
from traces.record import JobRecord

# the group slowdowns a measurement may set: below 1, the cyclic model was pessimistic (the
# stage gate can overlap more than its slots); past 4, no longer a pace but a fault
MIN_SLOWDOWN, MAX_SLOWDOWN = 0.5, 4.0

_new_plan = tuple.__new__  # the core's Plan made as the tuple it is, once a round


class SchedulingError(Exception):
    """An event the core cannot accept (unknown job, a job twice, a job too large)."""


def _finite(value: object) -> float | None:
    """`value` as a finite float, or None when it is not one."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None


class Core:
    def __init__(self, spec: ClusterSpec, policy: Policy, model: CostModel,
                 tenancy: Tenancy | None = None):
        self.spec = spec
        self.policy = policy
        self.model = model
        room = Room.of(spec, model)
        self.speeds = TypeSpeeds(spec, model.gpu_speed)
        self.cluster = ClusterState(spec, Demand(model.cpu_per_gpu, model.cpu_single_gpu), room,
                                    self.speeds)
        # the model's settings a round or an event reads, once
        self._sticky = model.sticky_placement
        self._in_place, self._in_gate = model.regroup_in_place, model.regroup_in_gate
        self._running_sum = model.running_sum
        self.jobs: dict[int, Job] = {}
        self.queue: list[Job] = []  # runnable jobs in submission order (policies never sort it)
        # The running jobs (a round touches these and what the plan runs, never the backlog),
        # and each job's place in submission order, which drivers see them in.
        self._running: dict[int, Job] = {}
        self._running_order: list[Job] | None = []  # cached, in submission order
        self._arrival: dict[int, int] = {}
        self._waiting: dict[int, int] = {}  # jobs that may start, by id: their #GPUs
        self._judged = 0  # how many jobs had been submitted when the last round began
        self.plan_now = Plan((), changes=NO_CHANGES)
        # What runs: each running job's group, as the last plans and the stops since left it.
        # Every plan is compared with this (plan_changes.diff), never with object identity.
        self.placed: dict[int, Group] = {}
        # Where each job of the last plan ran (sticky placement's "where it is now"), shown to
        # policies read-only.
        self._where: dict[int, tuple[NodeSlice, ...]] = {}
        self._where_view = MappingProxyType(self._where)
        # every plan that changes what runs is checked
        self.check = PlanCheck(spec, room)
        self._fit = Fit(spec)  # which pools hold a job submitted (specs.fit's rule)
        self._disturbed = False  # a job stopped or finished since the last round
        # jobs held back until a trace time (a failed job's backoff): no round plans them
        # before it, and the round wakes when the first hold ends
        self._held: dict[int, float] = {}
        self._lonely = False  # some job must run alone (memory.py): every plan is checked
        self.now = 0.0
        # Who shares the cluster (None: one queue for all): what each round admits, which
        # the policy plans alone, and which running jobs it may not stop now.
        if tenancy is not None and not policy.plans_partial:
            raise SchedulingError(f"policy {policy.name!r} cannot plan for tenants: it keeps "
                                  f"its own jobs running whatever the round's queue")
        self.tenants = None if tenancy is None else TenantLayer(tenancy)

    # -- events ----------------------------------------------------------------------------
    def submit(self, record: JobRecord, now: float) -> Job:
        problem = self.submit_problem(record)
        if problem:
            raise SchedulingError(problem)
        model = self.model
        solo = model.solo_time(record.iteration_time)
        profile = model.stage_times(record.stage_times)
        if model.normalize_profiles and sum(profile) > 0:
            # A trace's stage times may not add up to its iteration time; the rest of an
            # iteration is spread over the stages so a job alone runs at its solo speed.
            scale = solo / sum(profile)
            profile = tuple(t * scale for t in profile)
        # the first estimate: from the trace's duration where the policy plans by it
        from_duration = getattr(self.policy, "estimate_from_duration", False)
        estimate = record.duration if from_duration else record.iterations * solo
        job = Job(record=record, solo_time=solo, profile=profile,
                  remaining=float(record.iterations), remaining_estimate=estimate,
                  last_update=now,
                  restart_overhead=model.overhead(record.model_name, record.num_gpu))
        self.jobs[job.id] = job
        self._arrival[job.id] = len(self._arrival)
        self._waiting[job.id] = job.num_gpu
        self.queue.append(job)
        if self.tenants is not None:
            self.tenants.add(record)
        self.policy.on_submit(job, now)
        return job

    def submit_problem(self, record: JobRecord) -> str | None:
        """Why `submit` would refuse the job, or None (read-only)."""
        if record.job_id in self.jobs:
            return f"job {record.job_id} was already submitted"
        if record.num_gpu > self.spec.total_gpus:
            return (f"job {record.job_id} needs {record.num_gpu} GPUs; "
                    f"the cluster has {self.spec.total_gpus}")
        if self.cluster.pooled:
            why = self._fit.misfit(record.num_gpu, record.gpu_types, record.gpu_mem_gb)
            if why:
                return (f"job {record.job_id}: no pool of the cluster holds it: "
                        + "; ".join(message for _, message in why))
        if self.tenants is not None:
            return self.tenants.problem(record)
        return None

    def cpu_problem(self, record: JobRecord) -> str | None:
        """Why no node that could hold the job has the CPUs it asks for (None: some has).
        `submit` takes such a job (it waits, `waiting` says why); what takes jobs from
        users and traces refuses it first."""
        return cpu_misfit(self.cluster.demand, self.spec, record)

    def advance(self, now: float, done: Mapping[int, float] | None = None) -> None:
        """Time has moved to `now`; `done` gives iterations each running job finished since.

        Only running jobs change with time; a waiting job's clock is settled when it resumes.
        The policy hears of it once for all of them (`on_changes`).
        """
        done = done or {}
        running_sum = self._running_sum
        jobs = self.running_jobs()
        for job in jobs:
            last = job.last_update
            job.last_update = now
            remaining = job.remaining - done.get(job.id, 0.0)
            remaining = 0.0 if 0.0 > remaining else remaining  # max(remaining, 0.0)
            job.remaining = remaining
            job.remaining_estimate = remaining * job.solo_time
            if running_sum:  # the artifact's float order
                job.attained = (job.attained + now) - last
            else:
                job.attained += now - last
        if jobs:  # every running job's numbers changed
            self.policy.on_changes(jobs)
        self.now = now

    def update_profile(self, job_id: int, profile: Iterable[float] | None = None,
                       solo_time: float | None = None) -> None:
        """A measured profile replaces the trace's; the next round plans with it.

        The core is the last line before the planner's arithmetic: a stage time that is not
        a finite number >= 0, a profile of the wrong length or all zero, or a solo time that
        is not finite and > 0 is refused (SchedulingError) and nothing changes."""
        job = self._job(job_id)
        new_profile = None
        if profile is not None:
            try:
                new_profile = tuple(float(x) for x in profile)
            except (TypeError, ValueError):
                raise SchedulingError(f"job {job_id}: profile {profile!r} is not numbers") from None
            if len(new_profile) != len(job.profile):
                raise SchedulingError(f"job {job_id}: profile has {len(new_profile)} stages, "
                                      f"the job has {len(job.profile)}")
            total = sum(new_profile)
            if not all(math.isfinite(t) and t >= 0 for t in new_profile) \
                    or not (math.isfinite(total) and total > 0):
                raise SchedulingError(f"job {job_id}: stage times must be finite, >= 0 and "
                                      f"not all zero, got {new_profile}")
        solo = None if solo_time is None else _finite(solo_time)
        if solo_time is not None and not (solo is not None and solo > 0):
            raise SchedulingError(f"job {job_id}: solo time must be finite and > 0, "
                                  f"got {solo_time!r}")
        if new_profile is not None:
            job.profile = new_profile
        if solo is not None:
            job.solo_time = solo
            job.remaining_estimate = job.remaining * job.solo_time
        self.policy.on_profile(job)
        self.policy.on_change(job)

    def set_restart_overhead(self, job_id: int, seconds: float) -> None:
        """What a restart of this job was measured to cost (live trainers report it); a
        value that is not a finite number >= 0 is refused (it weighs every later regroup)."""
        job = self._job(job_id)
        value = _finite(seconds)
        if value is None or value < 0:
            raise SchedulingError(f"job {job_id}: restart overhead must be a finite number "
                                  f">= 0, got {seconds!r}")
        job.restart_overhead = value

    def note_gpu_memory(self, job_id: int, gb: float) -> bool:
        """Its trainers measured the GPU memory the job holds (GB per GPU): it replaces the
        declared figure, and matchings weigh it from the next round. True when the job
        shares a GPU with jobs it no longer fits beside: the driver stops it and asks it to
        run alone (`run_alone`). Refused unless a finite number within MAX_GPU_MEM_GB."""
        job = self._job(job_id)
        value = _finite(gb)
        if value is None or not 0 <= value <= MAX_GPU_MEM_GB:
            raise SchedulingError(f"job {job_id}: GPU memory must be a finite number of GB in "
                                  f"[0, {MAX_GPU_MEM_GB:g}], got {gb!r}")
        if value == job.gpu_mem_gb:
            return False
        job.gpu_mem_gb = value
        self.policy.on_profile(job)  # merges that fitted may not now, and others may
        return job.status is Status.RUNNING and not self._fits_where_it_runs(job_id)

    def outgrows_group(self, job_id: int, gb: float) -> bool:
        """Whether the job, holding `gb` GB on each GPU, would no longer fit beside the jobs
        on its GPUs (read-only): what `note_gpu_memory` would answer."""
        job = self._job(job_id)
        if job.status is not Status.RUNNING or gb == job.gpu_mem_gb or job_id not in self.placed:
            return False
        held = job.gpu_mem_gb
        job.gpu_mem_gb = gb  # restored below: the question is asked of the job as measured
        try:
            return not self._fits_where_it_runs(job_id)
        finally:
            job.gpu_mem_gb = held

    def run_alone(self, job_id: int) -> None:
        """The job ran out of GPU memory beside others: from now on it shares no GPU."""
        job = self._job(job_id)
        job.alone = self._lonely = True
        self.policy.on_profile(job)
        self.policy.on_change(job)

    def _fits_where_it_runs(self, job_id: int) -> bool:
        """Whether the jobs on each GPU of `job_id` still fit together (memory.fits)."""
        mine = on_each_gpu([self.placed[job_id]])
        # each running group once (its members share one Group value)
        on = on_each_gpu(set(self.placed.values()))
        room, pool_of = self.cluster.room, self.cluster.pool_of
        return all(room.fits_in([self.jobs[j] for j in on[gpu]], pool_of(gpu[0]))
                   for gpu in mine)

    def calibrate_slowdown(self, members: int, factor: float) -> None:
        """Groups of `members` jobs were measured to run `factor` times the cyclic model's
        time here (live trainers' paces): the cost model's factor for that size becomes it,
        and policies plan with it from the next round. Refused unless 2 <= members <= the
        policy's largest group and factor a finite number in [MIN_SLOWDOWN, MAX_SLOWDOWN]."""
        value = _finite(factor)
        if not (isinstance(members, int) and 2 <= members <= max(2, self.policy.max_group)):
            raise SchedulingError(f"no groups of {members!r} jobs to calibrate")
        if value is None or not MIN_SLOWDOWN <= value <= MAX_SLOWDOWN:
            raise SchedulingError(f"a group slowdown must be in [{MIN_SLOWDOWN:g}, "
                                  f"{MAX_SLOWDOWN:g}], got {factor!r}")
        slowdown = dict(self.model.group_slowdown)
        slowdown[members] = value
        self.model = replace(self.model, group_slowdown=MappingProxyType(slowdown))
        self.policy.set_model(self.model)

    def calibrate_speed(self, model: str, gpu_type: str, speed: float) -> None:
        """`gpu_type` was measured to run `model`'s GPU stage at `speed` (a V100 being 1):
        it replaces the shipped figure from the next round, for placement and the interleave
        model. Refused unless a finite number in [MIN_SPEED, MAX_SPEED] for a type the
        cluster has."""
        value = _finite(speed)
        if gpu_type not in self.speeds.types or not gpu_type:
            raise SchedulingError(f"no GPU type {gpu_type!r} in the cluster to calibrate")
        if value is None or not MIN_SPEED <= value <= MAX_SPEED:
            raise SchedulingError(f"a GPU speed must be in [{MIN_SPEED:g}, {MAX_SPEED:g}], "
                                  f"got {speed!r}")
        measured = dict(self.model.gpu_speed)
        measured[(str(model), gpu_type)] = value
        self.model = replace(self.model, gpu_speed=MappingProxyType(measured))
        self.speeds = TypeSpeeds(self.spec, self.model.gpu_speed)
        self.cluster.set_speeds(self.speeds)
        self.policy.set_model(self.model)

    def note_stop_time(self, job_id: int, seconds: float) -> None:
        """How long a stop of this job took before its GPUs were free (a backend measured
        it); a later regroup of it weighs that too. Refused unless finite and >= 0."""
        job = self._job(job_id)
        value = _finite(seconds)
        if value is None or value < 0:
            raise SchedulingError(f"job {job_id}: stop time must be a finite number >= 0, "
                                  f"got {seconds!r}")
        if job.status is not Status.DONE:
            job.stop_time = value
            self.policy.on_change(job)

    def set_node_online(self, node: int, online: bool) -> None:
        """The live driver says whether a node's agent is there; offline nodes get no work."""
        if not 0 <= node < self.spec.num_nodes:
            raise SchedulingError(f"unknown node {node}")
        (self.cluster.offline.discard if online else self.cluster.offline.add)(node)

    def stop(self, job_id: int, now: float, preempted: bool = True) -> Job:
        """A running job stopped outside a plan (its node died, its trainer crashed): it waits
        for the next round, which may place it elsewhere. `preempted` False: the job's own
        failure stopped it, which is no preemption."""
        job = self._job(job_id)
        if job.status is Status.RUNNING:
            job.attained += now - job.last_update
            job.last_update = now
            self._stopped(job, now, preempted)
            self._disturbed = True
            if self.tenants is not None:
                self.tenants.lost(job_id)
            self.policy.on_change(job)
        return job

    def hold(self, job_id: int, until: float) -> None:
        """No round plans the job before `until` (trace seconds): a failed job's backoff.
        A later hold replaces an earlier one; one that ended is dropped by the next round."""
        job = self._job(job_id)
        value = _finite(until)
        if value is None:
            raise SchedulingError(f"job {job_id}: a hold must end at a finite time, "
                                  f"got {until!r}")
        if job.status is not Status.DONE:
            self._held[job_id] = value

    def set_remaining(self, job_id: int, remaining: float) -> None:
        """Progress as the live system knows it for sure (a checkpoint), replacing estimates."""
        job = self._job(job_id)
        job.remaining = max(float(remaining), 0.0)
        job.remaining_estimate = job.remaining * job.solo_time
        self.policy.on_change(job)

    def finish(self, job_id: int, now: float) -> Job:
        job = self._job(job_id)
        if job.status is Status.DONE:
            raise SchedulingError(f"job {job_id} already finished")
        if job.status is Status.RUNNING:
            job.attained += now - job.last_update
        self._set_running(job, False)
        self._waiting.pop(job_id, None)
        self._unplace(job_id)
        self._disturbed = True
        job.status = Status.DONE
        job.running_since = None
        self._held.pop(job_id, None)
        if self.tenants is not None:
            self.tenants.finished(job_id)
        job.finish_time = now
        job.remaining = 0.0
        self.queue.remove(job)
        self.policy.on_finish(job, now)
        return job

    def round(self, now: float) -> Plan:
        """Decide what runs now: the policy's plan, checked, with its changes against what
        runs (`Plan.changes`). Updates the status, group and counters of each job it changes.

        A round is these stages, in order, each a method below."""
        self._judged = len(self._arrival)
        queue = self._admit(now)  # the runnable jobs this round may plan
        plan = self._plan(queue, now)  # the policy's plan of them
        plan = self._guard(plan)  # the tenant layer: what it held back, what it may not stop
        groups = self._retime(plan.groups)  # each group at its GPU type's pace
        changes = self._diff(groups)  # against what runs
        if changes.kinds or changes.added:
            self._check(plan, changes)  # refused before anything changes
            self._apply(changes, now)  # each changed job, and what runs, up to the plan
        self._disturbed = False
        plan = _new_plan(Plan, (groups, plan.wakeup, plan.shared_gpus, changes))
        self.plan_now = plan
        return plan

    # -- the stages of a round ---------------------------------------------------------------
    def _admit(self, now: float) -> tuple[Job, ...]:
        """The runnable jobs in the core's order, less those held back until later (a failed
        job's backoff) and those the tenant layer holds back. A tuple: a policy that sorts
        keeps its own order (Policy.carried_order)."""
        runnable = self._unheld(now) if self._held else self.queue
        if self.tenants is None:
            return tuple(runnable)
        return self.tenants.admitted(runnable, self.policy, self.placed, self.jobs,
                                     self.cluster, now)

    def _plan(self, queue: tuple[Job, ...], now: float) -> Plan:
        """The policy's plan of `queue` (partial: it leaves some runnable job out)."""
        where = self._where_view if self._sticky else {}
        partial = len(queue) < len(self.queue)
        plan = self.policy.plan(RoundContext(now, queue, self.cluster, self.model, where,
                                             partial))
        if self._held:  # a round is due when the first hold ends
            first = min(self._held.values())
            if plan.wakeup is None or first < plan.wakeup:
                plan = plan._replace(wakeup=first)
        return plan

    def _guard(self, plan: Plan) -> Plan:
        """Under tenants: the plan runs no job held back (else PlanError), and each running
        job the planner may not stop now runs on as it does (a round is due when the first
        such guard ends). Without tenants, the plan as it is."""
        tenants = self.tenants
        if tenants is None:
            return plan
        tenants.check(plan.groups, self.policy.name)
        groups, until = tenants.guard(plan.groups, self.placed, self.jobs, self._in_place,
                                      self._in_gate)
        if until is not None and (plan.wakeup is None or until < plan.wakeup):
            plan = plan._replace(wakeup=until)
        return plan._replace(groups=groups)

    def _retime(self, groups: tuple[Group, ...]) -> tuple[Group, ...]:
        """Each group at the pace of the GPU type it landed on (a cluster of one speed: as
        they are)."""
        if self.speeds.active:
            return self.speeds.retime(groups, self.jobs)
        return groups

    def _diff(self, groups: tuple[Group, ...]) -> PlanChanges:
        """What `groups` change against what runs (plan_changes.diff); a plan diff refuses
        is the policy's error (PlanError)."""
        if not self._disturbed and groups == self.plan_now.groups:
            # the groups of the last round, equal one by one, and no job stopped or finished
            # since: every status, group and counter is as it was
            return NO_CHANGES
        policy = self.policy
        try:
            return diff(self.placed, groups, self._in_place, self._waiting,
                        policy.max_group if policy.interleaves else 1, self._in_gate)
        except ValueError as err:
            raise PlanError(f"policy {policy.name!r} made a plan the core refuses: "
                            f"{err}") from None

    def _check(self, plan: Plan, changes: PlanChanges) -> None:
        """A plan that changes what runs is checked (plan_check.py): its GPUs, then the
        GPU memory of each group it adds."""
        policy = self.policy
        self.check.check(policy.name, plan, self.cluster.offline, policy.runs_unplaced)
        self.check.check_memory(policy.name, plan, changes.added, self.jobs, self._lonely)

    def _apply(self, changes: PlanChanges, now: float) -> None:
        """Bring each changed job's status, group and counters, and `placed`, up to the plan;
        the tenant layer counts the stops. (Each job's update is its own, so the order they
        are made in does not matter.)"""
        jobs, placed, waiting = self.jobs, self.placed, self._waiting
        added = changes.added
        # every member of a changed group runs in it now (kept members only at its pace)
        placed.update((j, group) for group in added for j in group.jobs)
        if self._sticky:
            self._where.update((j, group.placement) for group in added for j in group.jobs)
        stop, start = STOP, START
        for job_id, kind in changes.kinds.items():
            job = jobs[job_id]
            if kind is stop:
                self._stopped(job, now)
                continue
            if kind is start:
                job.status = Status.RUNNING
                job.starts += 1
                job.last_update = now
                if job.first_start is None:
                    job.first_start = now
                if job.pending_mark is not None:
                    job.pending_since_run += now - job.pending_mark
                    job.pending_mark = None
                job.running_since = now
                self._set_running(job, True)
                del waiting[job_id]
            elif kind in STARTS:
                job.relaunches += 1
                job.running_since = now
            job.group_key = placed[job_id].jobs
        if self.tenants is not None:
            self.tenants.stopped(changes.stopping, now)

    # -- what a round and an event share -------------------------------------------------------
    def _stopped(self, job: Job, now: float, preempted: bool = True) -> None:
        """A running job stops, by a plan or outside one, and waits again: counted as a
        preemption (unless its own failure stopped it), its wait begun at `now`, its group
        and GPUs given up."""
        job.status = Status.PENDING
        if preempted:
            job.preemptions += 1
        job.pending_mark = now
        job.group_key = ()
        job.running_since = None
        self._set_running(job, False)
        self._waiting[job.id] = job.num_gpu
        self._unplace(job.id)

    def _unheld(self, now: float) -> list[Job]:
        """The queue less the jobs held back at `now`; holds that ended are dropped."""
        held = self._held
        for job_id in [j for j, until in held.items() if until <= now]:
            del held[job_id]
        return [job for job in self.queue if job.id not in held] if held else self.queue

    def _unplace(self, job_id: int) -> None:
        """The job runs nowhere now (it stopped or finished)."""
        self.placed.pop(job_id, None)
        self._where.pop(job_id, None)

    # -- queries ---------------------------------------------------------------------------
    def _job(self, job_id: int) -> Job:
        try:
            return self.jobs[job_id]
        except KeyError:
            raise SchedulingError(f"unknown job {job_id}") from None

    def judged(self, job_id: int) -> bool:
        """Whether the last round saw the job (it was submitted before that round)."""
        return self._arrival[job_id] < self._judged

    def held_until(self, job_id: int) -> float | None:
        """When the job's hold ends (trace seconds), or None when it is not held back."""
        return self._held.get(job_id)

    def running_jobs(self) -> list[Job]:
        """Running jobs in submission order, whatever order a policy planned them in."""
        order = self._running_order
        if order is None:
            running = self._running
            order = [running[j] for j in sorted(running, key=self._arrival.__getitem__)]
            self._running_order = order
        return list(order)

    def _set_running(self, job: Job, running: bool) -> None:
        if running:
            self._running[job.id] = job
        elif self._running.pop(job.id, None) is None:
            return
        self._running_order = None
