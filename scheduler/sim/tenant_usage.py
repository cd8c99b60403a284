"""What each tenant held over a simulated run, and what its jobs got from it.

Seen from outside the core, round by round: the GPUs each tenant's running jobs ask for
(a job counts its own GPUs, as the tenant layer charges them), held from one round to the
next. From those, GPU-hours used and borrowed (held past the quota), and per tenant the
jobs' JCT and waiting time from the run's outcomes. A reclaim is a running job the round's
tenant layer no longer admits, so its plan stops it (the layer's own rule); its GPU-hours
reclaimed are its GPUs times the hours from that stop until it runs again or ends: the
service its tenant gave back to the owners. The same counting watches a run without
a tenant layer (one queue for all), so the two can be compared tenant by tenant.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

from scheduler.core.engine import Core
from scheduler.core.metrics import JobOutcome
from scheduler.core.state import Plan, Status
from specs.tenants import Tenancy


@dataclass
class TenantUsage:
    """An `on_round` hook: each round, every tenant's GPUs in use."""

    tenancy: Tenancy
    owner: Mapping[int, str]  # job id -> its tenant (the tenant layer's, or the watcher's)
    # (time, tenant, GPUs in use) whenever a tenant's count changes
    rows: list[tuple[float, str, int]] = field(default_factory=list)
    used_s: dict[str, float] = field(default_factory=dict)  # GPU-seconds
    borrowed_s: dict[str, float] = field(default_factory=dict)  # GPU-seconds past quota
    peak: dict[str, int] = field(default_factory=dict)  # most GPUs held at once
    reclaims: dict[str, int] = field(default_factory=dict)  # its jobs stopped by a reclaim
    reclaimed_s: dict[str, float] = field(default_factory=dict)  # GPU-seconds given back
    _held: dict[str, int] = field(default_factory=dict)
    _last: float | None = None
    _running: dict[int, int] = field(default_factory=dict)  # job id -> GPUs, last round
    _out: dict[int, tuple[str, int, float]] = field(default_factory=dict)  # reclaimed, since

    def __call__(self, now: float, plan: Plan, core: Core) -> None:
        self._settle(now)
        held = dict.fromkeys(self.tenancy.tenants, 0)
        running = {}
        for job in core.running_jobs():
            held[self.owner[job.id]] += job.num_gpu
            running[job.id] = job.num_gpu
        self._note_reclaims(now, running, core)
        for name, gpus in held.items():
            if gpus != self._held.get(name):
                self.rows.append((now, name, gpus))
            self.peak[name] = max(self.peak.get(name, 0), gpus)
        self._held = held

    def _note_reclaims(self, now: float, running: dict[int, int], core: Core) -> None:
        jobs = core.jobs
        for job_id in [j for j in self._out if j in running or jobs[j].status is Status.DONE]:
            self._give_back(job_id, now)
        layer = core.tenants
        if layer is not None and layer.admission is not None:
            admitted = layer.admission.admitted
            for job_id, gpus in self._running.items():
                if (job_id not in running and job_id not in admitted
                        and jobs[job_id].status is not Status.DONE):
                    name = self.owner[job_id]
                    self.reclaims[name] = self.reclaims.get(name, 0) + 1
                    self._out[job_id] = (name, gpus, now)
        self._running = running

    def _give_back(self, job_id: int, now: float) -> None:
        name, gpus, since = self._out.pop(job_id)
        self.reclaimed_s[name] = self.reclaimed_s.get(name, 0.0) + gpus * (now - since)

    def _settle(self, now: float) -> None:
        """Count what was held from the last round until `now`."""
        if self._last is not None and now > self._last:
            span = now - self._last
            for name, gpus in self._held.items():
                quota = self.tenancy.tenants[name].quota
                self.used_s[name] = self.used_s.get(name, 0.0) + gpus * span
                self.borrowed_s[name] = (self.borrowed_s.get(name, 0.0)
                                         + max(0, gpus - quota) * span)
        self._last = now if self._last is None else max(self._last, now)

    def summary(self, outcomes: Iterable[JobOutcome], makespan: float) -> dict[str, dict]:
        """Per tenant: jobs, average JCT and waiting (s, finished jobs), GPU-hours used,
        owed (quota x makespan), borrowed and reclaimed, reclaims, the most GPUs held at
        once; and Jain's
        fairness index of GPU-hours used per GPU-hour owed over tenants with a quota and
        jobs (one without jobs asked for nothing: its share says nothing of fairness)."""
        for job_id in list(self._out):  # none should be left: every job ends
            self._give_back(job_id, makespan)
        tenant_of = self.owner
        jcts: dict[str, list[float]] = {}
        waits: dict[str, list[float]] = {}
        for o in outcomes:
            name = tenant_of[o.job_id]
            if o.end is not None:
                jcts.setdefault(name, []).append(o.jct)
                waits.setdefault(name, []).append(o.queueing)
        out: dict[str, dict] = {}
        for name, tenant in self.tenancy.tenants.items():
            done = jcts.get(name, [])
            out[name] = {
                "quota": tenant.quota, "borrow_limit": tenant.borrow_limit,
                "jobs": sum(1 for t in tenant_of.values() if t == name),
                "finished": len(done),
                "avg_jct": sum(done) / len(done) if done else None,
                "avg_queueing": (sum(waits[name]) / len(waits[name])) if done else None,
                "gpu_hours": self.used_s.get(name, 0.0) / 3600,
                "quota_gpu_hours": tenant.quota * makespan / 3600,
                "borrowed_gpu_hours": self.borrowed_s.get(name, 0.0) / 3600,
                "peak_gpus": self.peak.get(name, 0),
                "reclaims": self.reclaims.get(name, 0),
                "reclaimed_gpu_hours": self.reclaimed_s.get(name, 0.0) / 3600,
            }
        shares = [v["gpu_hours"] / v["quota_gpu_hours"] for v in out.values()
                  if v["quota_gpu_hours"] > 0 and v["jobs"]]
        square = sum(x * x for x in shares)
        fairness = (sum(shares) ** 2 / (len(shares) * square)) if square > 0 else None
        return {"fairness": fairness, "by_tenant": out}
