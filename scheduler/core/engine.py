"""The scheduling core: events in, plans out. It holds no clock, socket or file; every call
carries the time the driver says it is, so the simulator and the live service drive it alike.
"""
from __future__ import annotations

import math
from typing import Iterable, Mapping

from scheduler.core.placement import ClusterState, Demand
from scheduler.core.policies.base import Policy, RoundContext
from scheduler.core.presets import Preset
from scheduler.core.state import Job, Plan, Status
from specs.spec import ClusterSpec
from traces.record import JobRecord


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
    def __init__(self, spec: ClusterSpec, policy: Policy, preset: Preset):
        self.spec = spec
        self.policy = policy
        self.preset = preset
        self.cluster = ClusterState(spec, Demand(preset.cpu_per_gpu, preset.cpu_single_gpu))
        self.jobs: dict[int, Job] = {}
        self.queue: list[Job] = []  # runnable jobs in submission order (policies never sort it)
        # The running jobs (a round touches these and what the plan runs, never the backlog),
        # and each job's place in submission order, which drivers see them in.
        self._running: dict[int, Job] = {}
        self._running_order: list[Job] | None = []  # cached, in submission order
        self._arrival: dict[int, int] = {}
        self.plan_now = Plan(())
        self._disturbed = False  # a job stopped or finished since the last round
        self.now = 0.0

    # -- events ----------------------------------------------------------------------------
    def submit(self, record: JobRecord, now: float) -> Job:
        if record.job_id in self.jobs:
            raise SchedulingError(f"job {record.job_id} was already submitted")
        if record.num_gpu > self.spec.total_gpus:
            raise SchedulingError(f"job {record.job_id} needs {record.num_gpu} GPUs; "
                                  f"the cluster has {self.spec.total_gpus}")
        solo = self.preset.solo_time(record.iteration_time)
        profile = self.preset.stage_times(record.stage_times)
        if self.preset.normalize_profiles and sum(profile) > 0:
            # A trace's stage times may not add up to its iteration time; the rest of an
            # iteration is spread over the stages so a job alone runs at its solo speed.
            scale = solo / sum(profile)
            profile = tuple(t * scale for t in profile)
        job = Job(record=record, solo_time=solo, profile=profile,
                  remaining=float(record.iterations),
                  remaining_estimate=record.iterations * solo, last_update=now,
                  restart_overhead=self.preset.overhead(record.model_name, record.num_gpu))
        self.jobs[job.id] = job
        self._arrival[job.id] = len(self._arrival)
        self.queue.append(job)
        self.policy.on_submit(job, now)
        return job

    def advance(self, now: float, done: Mapping[int, float] | None = None) -> None:
        """Time has moved to `now`; `done` gives iterations each running job finished since.

        Only running jobs change with time; a waiting job's clock is settled when it resumes.
        The policy hears of it per running job (`on_advance`), then once for all of them
        (`on_changes`, by default `on_change` for each).
        """
        done = done or {}
        running_sum = self.preset.service_sum == "running"
        policy = self.policy
        # a hook a policy leaves as the base's no-op is not called for every running job
        # (looked up on its class; a wrapper that is no Policy gets every hook called)
        kind = type(policy)
        on_advance = (None if getattr(kind, "on_advance", None) is Policy.on_advance
                      else policy.on_advance)
        changed = (getattr(kind, "on_change", None) is not Policy.on_change
                   or getattr(kind, "on_changes", None) is not Policy.on_changes)
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
                job.queue_attained = (job.queue_attained + now) - last
            else:
                job.attained += now - last
                job.queue_attained += now - last
            if on_advance is not None:
                on_advance(job, now)
        if changed and jobs:  # every running job's numbers changed (no policy needs both hooks)
            policy.on_changes(jobs)
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

    def set_node_online(self, node: int, online: bool) -> None:
        """The live driver says whether a node's agent is there; offline nodes get no work."""
        if not 0 <= node < self.spec.num_nodes:
            raise SchedulingError(f"unknown node {node}")
        (self.cluster.offline.discard if online else self.cluster.offline.add)(node)

    def stop(self, job_id: int, now: float) -> Job:
        """A running job stopped outside a plan (its node died, its trainer crashed): it waits
        for the next round, which may place it elsewhere."""
        job = self._job(job_id)
        if job.status is Status.RUNNING:
            job.attained += now - job.last_update
            job.last_update = now
            job.status = Status.PENDING
            job.preemptions += 1
            job.pending_mark = now
            job.group_key = ()
            self._set_running(job, False)
            self._disturbed = True
            self.policy.on_change(job)
        return job

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
        self._disturbed = True
        job.status = Status.DONE
        job.finish_time = now
        job.remaining = 0.0
        self.queue.remove(job)
        self.policy.on_finish(job, now)
        return job

    def round(self, now: float) -> Plan:
        """Decide what runs now. Updates each job's status, group and counters."""
        previous = ({j: g.placement for g in self.plan_now.groups for j in g.jobs}
                    if self.preset.sticky_placement else {})
        # a tuple: a policy that sorts keeps its own order (Policy.carried_order)
        plan = self.policy.plan(RoundContext(now, tuple(self.queue), self.cluster, self.preset,
                                             previous))
        if plan.groups is self.plan_now.groups and not self._disturbed:
            # the very groups of the last round (a policy hands them back unchanged), and no
            # job stopped or finished since: every status, group and counter is as it was
            self.plan_now = plan
            return plan
        self._disturbed = False
        running = plan.running()
        # Only jobs that ran or run now change; a waiting job stays as it is (no group).
        # (Each job's update is its own, so the order they are made in does not matter.)
        was = self._running
        stopped = [was[job_id] for job_id in was.keys() - running.keys()]
        for job in stopped:
            job.status = Status.PENDING
            job.preemptions += 1
            job.pending_mark = now
            job.group_key = ()
            self._set_running(job, False)
        jobs = self.jobs
        done, pending = Status.DONE, Status.PENDING
        for job_id, group in running.items():
            job = jobs.get(job_id)
            if job is None or job.status is done:
                continue  # not runnable: nothing to update (as for any job off the queue)
            if job.status is pending:
                job.status = Status.RUNNING
                job.starts += 1
                job.last_update = now
                if job.first_start is None:
                    job.first_start = now
                if job.pending_mark is not None:
                    job.pending_since_run += now - job.pending_mark
                    job.pending_mark = None
                self._set_running(job, True)
            job.group_tt = group.tt
            job.group_key = group.jobs
        self.plan_now = plan
        return plan

    # -- queries ---------------------------------------------------------------------------
    def _job(self, job_id: int) -> Job:
        try:
            return self.jobs[job_id]
        except KeyError:
            raise SchedulingError(f"unknown job {job_id}") from None

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
