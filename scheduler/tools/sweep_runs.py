"""One run of a sweep, and the local way to run many: a pool of processes.

A Task carries its jobs and spec (not paths), so the process or the Dask worker that runs it
needs no file of the sweep's (a tenants file travels as its text); the policy is made by
name there (simulate -> make_policy), so a policy installed as a plug-in works like a
built-in one. run_one returns the CSV row and the detail the plots need (JCTs, utilisation
and queue over time, groups, each tenant's figures), so a report never needs a run again.
"""
from __future__ import annotations

import os
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from typing import Iterable, Iterator

from scheduler.core.interleave import efficiency
from scheduler.presets import get_preset
from scheduler.sim.simulator import simulate
from specs.tenants import Tenancy, Tenant, parse_tenants
from traces.record import JobRecord

KEY = ("trace", "policy", "preset", "seed")
TENANTS = "tenants"  # the key's fifth column, in a sweep over tenants files
NONE = "none"  # its value for a run with one queue for all


@dataclass(frozen=True)
class Task:
    trace: str  # as the user named it (the CSV's key)
    policy: str
    preset: str
    seed: int
    spec_name: str
    spec: object  # a ClusterSpec
    records: tuple[JobRecord, ...]  # already perturbed for the seed
    # None: a sweep without --tenants; NONE: one queue, each tenant's figures watched; else
    # the tenants file as the user named it, with its text
    tenants: str | None = None
    tenants_text: str = ""

    @property
    def key(self) -> tuple[str, ...]:
        key = (self.trace, self.policy, self.preset, str(self.seed))
        return key if self.tenants is None else (*key, self.tenants)


class RoundLog:
    """Watches every round (the simulator's on_round hook): jobs waiting, and for each group
    the time it ran, its size, GPUs and efficiency (sum of stage times / (TT x slots))."""

    def __init__(self):
        self.queue: list[tuple[float, int]] = []
        self._last_t: float | None = None
        self._groups: tuple = ()  # the last plan's groups
        self.seconds: dict[tuple, float] = {}  # (jobs, tt) -> seconds it ran
        self.shape: dict[tuple, tuple[int, int, float]] = {}  # -> (size, GPUs, efficiency)

    def __call__(self, now: float, plan, core) -> None:
        if self._last_t is not None and now > self._last_t:
            dt = now - self._last_t
            for group in self._groups:
                key = (group.jobs, group.tt)
                self.seconds[key] = self.seconds.get(key, 0.0) + dt
        self._last_t, self._groups = now, plan.groups
        running = 0
        for group in plan.groups:
            running += len(group.jobs)
            key = (group.jobs, group.tt)
            if key not in self.shape:
                profiles = core.speeds.profiles_on([core.jobs[j] for j in group.jobs],
                                                   group.placement)
                self.shape[key] = (len(group.jobs), group.num_gpu,
                                   efficiency(profiles, group.tt) if len(profiles) > 1 else 1.0)
        waiting = len(core.queue) - running
        if not self.queue or self.queue[-1][1] != waiting:
            self.queue.append((now, waiting))

    def groups(self) -> list[tuple[int, int, float, float]]:
        """(size, GPUs, efficiency, seconds) of every group that ran, in order first seen."""
        return [(*self.shape[k], s) for k, s in self.seconds.items() if s > 0]


def _changes(series) -> list[tuple[float, int]]:
    out = []
    for t, v in series:
        if not out or out[-1][1] != v:
            out.append((t, v))
    return out


def run_one(task: Task) -> tuple[dict, dict]:
    """Simulate one task: (the CSV row, the detail for the plots)."""
    started = time.perf_counter()
    log = RoundLog()
    tenancy = watch = None
    if task.tenants == NONE:
        watch = trace_tenants(task.records)
    elif task.tenants is not None:
        tenancy = parse_tenants(task.tenants_text, task.tenants)
    result = simulate(task.records, task.spec, task.policy, get_preset(task.preset),
                      on_round=log, tenancy=tenancy, watch=watch)
    wall = time.perf_counter() - started
    s = result.summary
    groups = log.groups()
    gpu_s = sum(g * sec for _, g, _, sec in groups)
    shared = [(m, e, g * sec) for m, g, e, sec in groups if m > 1]
    shared_gpu_s = sum(w for _, _, w in shared)
    row = {
        "trace": task.trace, "policy": task.policy, "preset": task.preset, "seed": task.seed,
        "spec": task.spec_name, "jobs": s.jobs, "avg_jct_s": s.avg_jct, "p50_jct_s": s.p50_jct,
        "p99_jct_s": s.p99_jct, "makespan_s": s.makespan, "avg_queueing_s": s.avg_queueing,
        "gpu_utilisation": s.gpu_utilisation, "preemptions": s.preemptions,
        "rounds": result.rounds,
        # GPU-time weighted: how many jobs share a busy GPU, and how well shared groups pack
        "mean_group_size": sum(m * g * sec for m, g, _, sec in groups) / gpu_s if gpu_s else "",
        "group_efficiency": (sum(e * w for _, e, w in shared) / shared_gpu_s
                             if shared_gpu_s else ""),
        "wall_s": round(wall, 3),
    }
    detail = {
        "key": dict(zip((*KEY, TENANTS), task.key)),
        "jct_s": sorted(o.jct for o in result.outcomes if o.end is not None),
        "utilisation": _changes(result.utilisation),  # (s, busy GPUs)
        "total_gpus": task.spec.total_gpus,
        "queue": log.queue,  # (s, jobs waiting)
        "groups": groups,  # (size, GPUs, efficiency, seconds)
    }
    if task.tenants is not None:
        fairness = result.tenants["fairness"]
        row.update(tenants=task.tenants, fairness="" if fairness is None else fairness)
        if watch is not None:  # owed nothing: what quotas would say is not the run's
            for figures in result.tenants["by_tenant"].values():
                figures.update(dict.fromkeys(UNOWED))
        detail["tenants"] = result.tenants
    return row, detail


UNOWED = ("quota", "borrow_limit", "quota_gpu_hours", "borrowed_gpu_hours", "reclaims",
          "reclaimed_gpu_hours")


def trace_tenants(records) -> Tenancy:
    """A tenant for each name the jobs give (a job naming none: the tenant ""), owed
    nothing: who a job belongs to in a run without quotas, with no file to map names."""
    return Tenancy({name: Tenant(name, 0) for name in dict.fromkeys(r.tenant for r in records)})


def default_processes() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def run_local(tasks: Iterable[Task], processes: int) -> Iterator[tuple[Task, object]]:
    """(task, (row, detail)) or (task, the exception) for each task as it finishes, from a
    pool of `processes` processes; at most that many tasks are handed out at once, so a
    killed sweep loses only those."""
    pending = iter(tasks)
    with ProcessPoolExecutor(max_workers=processes) as pool:
        running = {}

        def refill():
            while len(running) < processes:
                task = next(pending, None)
                if task is None:
                    return
                running[pool.submit(run_one, task)] = task

        refill()
        while running:
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                task = running.pop(future)
                err = future.exception()
                yield task, (err if err is not None else future.result())
            refill()
