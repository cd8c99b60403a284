"""Per-tenant Prometheus gauges, read at scrape time (`--tenants` with `--metrics`).

Why its own module: the tenant figures need a pass over the jobs and the reasons waiting jobs
wait (core/waiting.py), which the scheduler's other gauges do not; `snapshot` takes what
they need under the state's lock, `families` makes the metrics outside it.

What "lent" means: in each cohort, the quota its members leave idle that borrowers use,
shared out over the lenders in proportion to what each leaves idle.
"""
from __future__ import annotations

from collections import Counter
from typing import Any, Iterator, NamedTuple

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from scheduler.core.waiting import why_waiting


class TenantSnapshot(NamedTuple):
    tenants: dict[str, Any]  # name -> specs.tenants.Tenant
    in_use: Counter  # tenant -> GPUs of its running jobs (each job its own GPUs)
    pending: Counter  # (tenant, reason) -> waiting jobs
    preempted: Counter  # (tenant, cause) -> stops so far


def snapshot(core: Any) -> TenantSnapshot | None:
    """What the tenant gauges need, taken under the state's lock (None without tenants)."""
    layer = core.tenants
    if layer is None:
        return None
    in_use: Counter = Counter()
    for job_id in core.placed:
        in_use[layer.tenant[job_id]] += core.jobs[job_id].num_gpu
    pending: Counter = Counter((layer.tenant[j], w.reason) for j, w in why_waiting(core).items())
    return TenantSnapshot(dict(layer.tenancy.tenants), in_use, pending, Counter(layer.preempted))


def lent(tenants: dict[str, Any], in_use: Counter) -> dict[str, float]:
    """Each tenant's idle quota that borrowers of its cohort use (the module's rule)."""
    cohorts: dict[str, list[str]] = {}
    for name, tenant in tenants.items():
        cohorts.setdefault(tenant.cohort, []).append(name)
    out: dict[str, float] = {}
    for members in cohorts.values():
        idle = {n: max(0, tenants[n].quota - in_use[n]) for n in members}
        borrowed = sum(max(0, in_use[n] - tenants[n].quota) for n in members)
        total = sum(idle.values())
        for name in members:
            out[name] = idle[name] * min(1.0, borrowed / total) if total else 0.0
    return out


def families(snap: TenantSnapshot) -> Iterator[Any]:
    tenants, in_use = snap.tenants, snap.in_use
    gauges = {
        "quota": ("interlace_tenant_quota_gpus", "GPUs the tenant is owed"),
        "limit": ("interlace_tenant_borrow_limit_gpus", "GPUs past its quota it may hold"),
        "use": ("interlace_tenant_gpus_in_use", "GPUs its running jobs hold (a shared GPU "
                                                "counts for each job on it)"),
        "borrowed": ("interlace_tenant_gpus_borrowed", "GPUs it holds past its quota"),
        "lent": ("interlace_tenant_gpus_lent", "Its idle quota that its cohort's borrowers "
                                               "use"),
    }
    made = {k: GaugeMetricFamily(name, text, labels=["tenant"])
            for k, (name, text) in gauges.items()}
    shares = lent(tenants, in_use)
    for name in sorted(tenants):
        tenant = tenants[name]
        made["quota"].add_metric([name], tenant.quota)
        made["limit"].add_metric([name], tenant.borrow_limit)
        made["use"].add_metric([name], in_use[name])
        made["borrowed"].add_metric([name], max(0, in_use[name] - tenant.quota))
        made["lent"].add_metric([name], shares[name])
    yield from made.values()
    pending = GaugeMetricFamily("interlace_tenant_pending_jobs", "Its waiting jobs, by why "
                                "they wait (docs/waiting.md)", labels=["tenant", "reason"])
    for (name, reason), count in sorted(snap.pending.items()):
        pending.add_metric([name, reason], count)
    yield pending
    stops = CounterMetricFamily("interlace_tenant_preemptions", "Its running jobs stopped, by "
                                "cause: reclaim, planner, lost", labels=["tenant", "cause"])
    for (name, cause), count in sorted(snap.preempted.items()):
        stops.add_metric([name, cause], count)
    yield stops
