"""Admission across tenants: which jobs each tenant may run this round.

The policy still decides which admitted jobs run, where and with whom; it never sees a job
this layer holds back. The rules (docs/tenants.md):

* A job counts its own GPUs against its tenant while admitted, whether it has them alone or
  shares them in a group.
* Each tenant is owed its quota: its jobs are admitted in its order while they fit in it.
* What owed jobs leave unused of a cohort's quotas (and, for the cohort of tenants naming
  none, of the GPUs no quota covers) is lent: tenants of the cohort with more jobs take it
  one job at a time, the one with the least borrowed per weight first, while what it holds
  stays within its quota plus its borrowing limit. A tenant borrows what it holds past its
  quota; a job that did not fit in what its quota left takes the rest of it from this pool
  too (the pool holds it). Nothing is lent past the cluster's GPUs.
* Where CPUs bind, the turns are dominant-resource fair: each tenant is entitled to the
  cluster's CPUs in proportion to its quota's GPUs, and the next turn goes to the least
  dominant share borrowed per weight (the larger of its borrowed GPUs over the cluster's
  and its CPUs past its entitlement over the cluster's). Nothing is lent past the CPUs the
  admitted jobs leave. A job asks as many CPUs as placement gives it (`Demand`), so on a
  cluster with as many CPUs per GPU as the largest ask the CPU share never leads and the
  turns are the GPU ones.
* Reclaim follows: when an owner's jobs arrive, the next round's admission owes them first,
  so less is left to lend, and the borrowers' jobs past it are no longer admitted (the core
  stops them). Which borrowed jobs go first is the caller's order: running jobs started
  most recently last (their checkpoint is the newest, so stopping them loses least).
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Iterable, Mapping, NamedTuple

from specs.tenants import Tenancy


@dataclass(slots=True)
class Held:
    """What a tenant holds after admission (GPUs of admitted jobs), and its quota."""

    quota: int
    gpus: int = 0
    cpus: int = 0  # CPUs of admitted jobs

    @property
    def owed(self) -> int:
        """What it holds within its quota."""
        return min(self.gpus, self.quota)

    @property
    def borrowed(self) -> int:
        """What it holds past its quota."""
        return max(0, self.gpus - self.quota)


class Ask(NamedTuple):
    """A job asking to run this round."""

    job_id: int
    gpus: int
    since: float | None = None  # when it last (re)started, or None while waiting
    borrows: bool = True  # it may run on lent GPUs (an unpreemptible job may not)
    kept: bool = False  # it runs on whatever the round (the planner may not stop it now)
    cpus: int = 0  # the CPUs placement gives it (`Demand.cpus`); 0 where CPUs are not counted


@dataclass(slots=True)
class Admission:
    admitted: set[int] = field(default_factory=set)  # job ids
    held: dict[str, Held] = field(default_factory=dict)  # by tenant name
    cpus: int = 0  # the cluster's CPUs (0: not counted)
    cpus_short: set[int] = field(default_factory=set)  # not lent to for want of CPUs

    @property
    def cpus_left(self) -> int:
        return self.cpus - sum(h.cpus for h in self.held.values())


def admit(tenancy: Tenancy, jobs: Mapping[str, Iterable[Ask]], total_gpus: int,
          total_cpus: int = 0) -> Admission:
    """The jobs admitted this round. `jobs`: per tenant name, what its jobs ask in the
    tenant's order (most wanted first). Kept jobs are admitted first, whatever they hold;
    then owed jobs in that order; what it borrows, running jobs first, the longest running
    first, then waiting ones in that order. `total_cpus`: the cluster's CPUs, for
    dominant-resource turns (0: GPUs alone)."""
    tenants = tenancy.tenants
    out = Admission(held={name: Held(t.quota) for name, t in tenants.items()},
                    cpus=total_cpus)
    rest: dict[str, list[Ask]] = {}
    for name, queue in jobs.items():
        quota, held = tenants[name].quota, out.held[name]
        queue = list(queue)
        for ask in queue:
            if ask.kept:
                held.gpus += ask.gpus
                held.cpus += ask.cpus
                out.admitted.add(ask.job_id)
        left = []
        for ask in queue:
            if ask.kept:
                continue
            if held.gpus + ask.gpus <= quota:
                held.gpus += ask.gpus
                held.cpus += ask.cpus
                out.admitted.add(ask.job_id)
            elif ask.borrows:
                left.append(ask)
        left.sort(key=_borrow_order)  # stable: waiting jobs keep the tenant's order
        rest[name] = left
    free = total_gpus - sum(h.gpus for h in out.held.values())
    unquoted = max(0, total_gpus - sum(t.quota for t in tenants.values()))
    cohorts: dict[str, list[str]] = {}
    for name, tenant in tenants.items():
        cohorts.setdefault(tenant.cohort, []).append(name)
    for cohort in sorted(cohorts):
        members = cohorts[cohort]
        idle = sum(tenants[n].quota - out.held[n].gpus for n in members)  # kept: less
        if not cohort:
            idle += unquoted
        lend = max(0, min(idle, free))
        free -= lend - _lend(tenancy, members, rest, lend, out, total_gpus)
    return out


def _borrow_order(ask: Ask) -> tuple[bool, float]:
    since = ask.since
    return (since is None, 0.0 if since is None else since)


def _lend(tenancy: Tenancy, members: list[str], rest: Mapping[str, list[Ask]],
          lend: int, out: Admission, total_gpus: int) -> int:
    """Lends up to `lend` GPUs among `members` by weighted turns; what is left unlent."""
    tenants = tenancy.tenants
    share = _share(out.cpus, total_gpus)
    turns = [(share(out.held[name]) / tenants[name].weight, name, 0)
             for name in sorted(members) if rest.get(name)]
    heapq.heapify(turns)
    cpus_left = out.cpus_left
    while turns and lend > 0:
        _, name, at = heapq.heappop(turns)
        tenant, held, queue = tenants[name], out.held[name], rest[name]
        while at < len(queue):
            ask = queue[at]
            at += 1
            if ask.gpus <= lend and held.gpus + ask.gpus <= tenant.quota + tenant.borrow_limit:
                if out.cpus and ask.cpus > cpus_left:
                    out.cpus_short.add(ask.job_id)
                    continue
                held.gpus += ask.gpus
                held.cpus += ask.cpus
                lend -= ask.gpus
                cpus_left -= ask.cpus
                out.admitted.add(ask.job_id)
                break
        if at < len(queue):
            heapq.heappush(turns, (share(held) / tenant.weight, name, at))
    return lend


def _share(total_cpus: int, total_gpus: int):
    """What a tenant has borrowed, as a share of the cluster: its borrowed GPUs' share, or
    where CPUs are counted, the larger of that and its CPUs' past its entitlement (its
    quota's GPUs' worth of the cluster's CPUs)."""
    if not total_cpus or not total_gpus:
        return lambda held: held.borrowed / max(1, total_gpus)
    per_gpu = total_cpus / total_gpus

    def share(held: Held) -> float:
        cpus_borrowed = max(0.0, held.cpus - held.quota * per_gpu)
        return max(held.borrowed / total_gpus, cpus_borrowed / total_cpus)
    return share
