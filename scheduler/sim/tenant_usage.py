"""What each tenant held over a simulated run, and what its jobs got from it.

Seen from outside the core, round by round: the GPUs each tenant's running jobs ask for
(a job counts its own GPUs, as the tenant layer charges them), held from one round to the
next. From those, GPU-hours used and borrowed (held past the quota), and per tenant the
jobs' JCT and waiting time from the run's outcomes. The same counting watches a run without
a tenant layer (one queue for all), so the two can be compared tenant by tenant.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

from scheduler.core.engine import Core
from scheduler.core.metrics import JobOutcome
from scheduler.core.state import Plan
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
    _held: dict[str, int] = field(default_factory=dict)
    _last: float | None = None

    def __call__(self, now: float, plan: Plan, core: Core) -> None:
        self._settle(now)
        held = dict.fromkeys(self.tenancy.tenants, 0)
        for job in core.running_jobs():
            held[self.owner[job.id]] += job.num_gpu
        for name, gpus in held.items():
            if gpus != self._held.get(name):
                self.rows.append((now, name, gpus))
            self.peak[name] = max(self.peak.get(name, 0), gpus)
        self._held = held

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
        owed (quota x makespan) and borrowed, the most GPUs held at once; and Jain's
        fairness index of GPU-hours used per GPU-hour owed over tenants with a quota and
        jobs (one without jobs asked for nothing: its share says nothing of fairness)."""
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
            }
        shares = [v["gpu_hours"] / v["quota_gpu_hours"] for v in out.values()
                  if v["quota_gpu_hours"] > 0 and v["jobs"]]
        square = sum(x * x for x in shares)
        fairness = (sum(shares) ** 2 / (len(shares) * square)) if square > 0 else None
        return {"fairness": fairness, "by_tenant": out}
