"""Themis: finish-time fairness. Each round finds the allocation that minimises the worst
ratio of a job's finish time under sharing to its finish time in an isolated 1/n cluster.

The program often has many optima, and which one a round takes decides the job order: its
setting `solver` picks the fast bisection, or ECOS on the artifact's own program
(themis_ecos), which returns the artifact's optimum."""
from __future__ import annotations

import math

import numpy as np

from scheduler.core.policies.base import (ArtifactLoop, Policy, RoundContext, greedy, place_units,
                                          solo_group)
from scheduler.core.policies.settings import ThemisSettings
from scheduler.core.policies.themis_ecos import ftf_allocation_artifact
from scheduler.core.state import JobView, Plan


def ftf_allocation(a, b, c, gpus, capacity: float) -> np.ndarray:
    """Solve  min_x max_i (a_i + b_i / x_i) / c_i  s.t. 0 <= x <= 1, sum(gpus * x) <= capacity.

    Each ratio falls as x_i grows, so the optimum is found by bisection on the ratio t:
    x_i(t) = b_i / (c_i t - a_i). When every job can have x_i = 1 within capacity at the
    lowest reachable ratio, x = 1 (the optimum is not unique there; full shares is the
    answer a fair scheduler would give). Exact and fast where a generic solver is not.
    """
    a, b, c, g = (np.asarray(v, dtype=float) for v in (a, b, c, gpus))
    t_low = float(np.max((a + b) / c))

    def need(t: float) -> np.ndarray:
        return np.minimum(b / np.maximum(c * t - a, 1e-300), 1.0)

    if float(g @ need(t_low)) <= capacity:
        x = need(t_low)
        slack = capacity - float(g @ x)
        # Share what is left in proportion to what each job still lacks of a full share.
        lack = g * (1.0 - x)
        total = float(lack.sum())
        if total > 0:
            x = x + (1.0 - x) * min(1.0, slack / total)
        return np.minimum(x, 1.0)
    lo, hi = t_low, t_low * 2 + 1.0
    while float(g @ need(hi)) > capacity:
        hi = hi * 2
    for _ in range(100):
        mid = (lo + hi) / 2
        if float(g @ need(mid)) > capacity:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * hi:
            break
    return need(hi)


def ftf_allocation_cvxpy(a, b, c, gpus, capacity: float) -> np.ndarray:
    """The same problem through cvxpy: the readable reference, used as the tests' oracle."""
    import cvxpy as cp

    n = len(a)
    x = cp.Variable(n)
    ratios = [(a[i] + b[i] * cp.inv_pos(x[i])) / c[i] for i in range(n)]
    objective = cp.Minimize(ratios[0] if n == 1 else cp.maximum(*ratios))
    constraints = [x >= 0, x <= 1, cp.sum(cp.multiply(np.asarray(gpus, float), x)) <= capacity]
    problem = cp.Problem(objective, constraints)
    problem.solve()
    if problem.status != cp.OPTIMAL:  # "optimal_inaccurate" may break a constraint: no oracle
        raise cp.error.SolverError(f"the conic solver ended {problem.status}")
    return np.asarray(x.value, dtype=float)


def ftf_bisection(age, remaining, solo_time, isolated, gpus, capacity: float) -> np.ndarray:
    """`ftf_allocation` on a job's terms: b_i is its remaining solo time."""
    b = [r * s for r, s in zip(remaining, solo_time)]
    return ftf_allocation(age, b, isolated, gpus, capacity)


def ftf_artifact(age, remaining, solo_time, isolated, gpus, capacity: float) -> np.ndarray:
    """The artifact's ECOS optimum, its throughput the reciprocal of the solo time."""
    tput = [1 / s for s in solo_time]
    return ftf_allocation_artifact(age, remaining, tput, isolated, gpus, capacity)


# ThemisSettings.solver -> solver. Both find an optimum of the same program; where it has
# many, "ecos" returns the artifact's (its interior point), "bisection" full shares.
SOLVERS = {"bisection": ftf_bisection, "ecos": ftf_artifact}


class _Ledger:
    """A job's Themis bookkeeping, kept by the policy (one object per job: a round touches
    every queued job, so attribute slots rather than several dict entries)."""

    __slots__ = ("iso_time", "prev_remaining", "prev_iso", "should", "rank", "deficit",
                 "alloc")

    def __init__(self):
        self.iso_time = 0.0  # time it would have had in its isolated 1/n cluster so far
        self.prev_remaining = None  # remaining iterations and isolated share last round
        self.prev_iso = 1.0
        self.should = 0.0  # time its allocations entitled it to
        self.rank = self.deficit = self.alloc = 0.0


class Themis(Policy):
    name = "themis"
    # the artifact's loop: exact event times, ends close to each other taken together
    plans_partial = True  # it plans ctx.queue's jobs
    artifact_loop = ArtifactLoop(exact_events=True, groups_ends=True)

    def __init__(self, model, settings: ThemisSettings = ThemisSettings(), solver=None):
        super().__init__(model)
        self.solver = solver or SOLVERS[settings.solver]
        self.last_round = 0.0
        self.ledgers: dict[int, _Ledger] = {}  # job id -> its ledger, while it is runnable

    def on_submit(self, job: JobView, now: float) -> None:
        self.ledgers[job.id] = _Ledger()

    def on_finish(self, job: JobView, now: float) -> None:
        self.ledgers.pop(job.id, None)

    def plan(self, ctx: RoundContext) -> Plan:
        queue, now = self.carried_order(ctx.queue), ctx.now
        if not queue:
            self.last_round = now
            return Plan(())
        capacity = ctx.cluster.spec.total_gpus
        share = math.ceil(capacity / len(queue))
        ledger_of = self.ledgers
        ledgers = [ledger_of[job.id] for job in queue]
        a, c, remaining, solo, gpus = [], [], [], [], []
        for job, led in zip(queue, ledgers):
            left, num_gpu = job.remaining, job.record.num_gpu
            if led.prev_remaining is not None:
                led.iso_time += (led.prev_remaining - left) / led.prev_iso
            iso = min(share / num_gpu, 1.0)
            led.prev_remaining, led.prev_iso = left, iso
            a.append(now - job.record.submit_time)
            c.append(led.iso_time + left / iso)
            remaining.append(left)
            solo.append(job.solo_time)
            gpus.append(num_gpu)
        x = self.solver(a, remaining, solo, c, gpus, capacity)
        elapsed = now - self.last_round
        for job, led, xi in zip(queue, ledgers, np.asarray(x, dtype=float).tolist()):
            attained = job.attained
            led.rank = xi * 1e9 if attained == 0 else xi / attained
            led.deficit = led.should - attained
            led.alloc = xi
            led.should += xi * elapsed
        self.last_round = now
        # the carried order sorted by (rank, deficit, alloc), descending (a stable sort)
        keys = [(led.rank, led.deficit, led.alloc) for led in ledgers]
        queue[:] = [queue[i] for i in sorted(range(len(queue)), key=keys.__getitem__,
                                             reverse=True)]
        cluster = ctx.cluster
        cluster.reset()
        chosen = {id(j) for j in greedy(cluster, queue, None, monotone=False)[0]}
        queue.sort(key=lambda j: j.record.num_gpu, reverse=True)
        picked = [job for job in queue if id(job) in chosen]
        placements = place_units(ctx, [(job.num_gpu, (job,)) for job in picked])
        return Plan(tuple(solo_group(job, s) for job, s in zip(picked, placements) if s is not None))
