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


@dataclass(slots=True)
class Admission:
    admitted: set[int] = field(default_factory=set)  # job ids
    held: dict[str, Held] = field(default_factory=dict)  # by tenant name


def admit(tenancy: Tenancy, jobs: Mapping[str, Iterable[Ask]], total_gpus: int) -> Admission:
    """The jobs admitted this round. `jobs`: per tenant name, what its jobs ask in the
    tenant's order (most wanted first). Kept jobs are admitted first, whatever they hold;
    then owed jobs in that order; what it borrows, running jobs first, the longest running
    first, then waiting ones in that order."""
    tenants = tenancy.tenants
    out = Admission(held={name: Held(t.quota) for name, t in tenants.items()})
    rest: dict[str, list[tuple[int, int]]] = {}
    for name, queue in jobs.items():
        quota, held = tenants[name].quota, out.held[name]
        queue = list(queue)
        for ask in queue:
            if ask.kept:
                held.gpus += ask.gpus
                out.admitted.add(ask.job_id)
        left = []
        for ask in queue:
            if ask.kept:
                continue
            if held.gpus + ask.gpus <= quota:
                held.gpus += ask.gpus
                out.admitted.add(ask.job_id)
            elif ask.borrows:
                left.append(ask)
        left.sort(key=_borrow_order)  # stable: waiting jobs keep the tenant's order
        rest[name] = [(ask.job_id, ask.gpus) for ask in left]
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
        free -= lend - _lend(tenancy, members, rest, lend, out)
    return out


def _borrow_order(ask: Ask) -> tuple[bool, float]:
    since = ask.since
    return (since is None, 0.0 if since is None else since)


def _lend(tenancy: Tenancy, members: list[str], rest: Mapping[str, list[tuple[int, int]]],
          lend: int, out: Admission) -> int:
    """Lends up to `lend` GPUs among `members` by weighted turns; what is left unlent."""
    tenants = tenancy.tenants
    turns = [(0.0, name, 0) for name in sorted(members) if rest.get(name)]
    heapq.heapify(turns)
    while turns and lend > 0:
        _, name, at = heapq.heappop(turns)
        tenant, held, queue = tenants[name], out.held[name], rest[name]
        while at < len(queue):
            job_id, gpus = queue[at]
            at += 1
            if gpus <= lend and held.gpus + gpus <= tenant.quota + tenant.borrow_limit:
                held.gpus += gpus
                lend -= gpus
                out.admitted.add(job_id)
                break
        if at < len(queue):
            heapq.heappush(turns, (held.borrowed / tenant.weight, name, at))
    return lend
