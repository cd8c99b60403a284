"""The discrete-event driver: replays a trace against the core and plays the part of the
cluster, advancing each running job at its group's iteration time.

How restart overheads are charged is the preset's business (see presets.py); the core never
knows it is simulated.
"""
from __future__ import annotations

import bisect
import heapq
import math
import time
from itertools import repeat
from operator import le, mul, neg, sub
from dataclasses import dataclass, field
from typing import Callable, Sequence

from scheduler.core import plan_changes
from scheduler.core.engine import Core
from scheduler.core.metrics import JobOutcome, Summary, summarize
from scheduler.plugins import make_policy
from scheduler.core.presets import Preset
from scheduler.core.state import Group, Plan
from specs.spec import ClusterSpec
from traces.record import JobRecord


@dataclass(slots=True)
class _Run:
    """How one running job progresses until the next event."""

    tt: float
    overhead: float  # seconds of no progress still to pay (or charged per event, paper)
    group: tuple[int, ...]
    where: tuple
    source: Group  # the plan's group it was made from


@dataclass
class SimResult:
    policy: str
    preset: str
    outcomes: list[JobOutcome]
    summary: Summary
    utilisation: list[tuple[float, int]] = field(default_factory=list)  # (time, busy GPUs)
    rounds: int = 0
    wall_s: float = 0.0


class Simulator:
    def __init__(self, records: Sequence[JobRecord], spec: ClusterSpec, policy: str,
                 preset: Preset, progress: Callable[[int, int], None] | None = None,
                 on_round: Callable[[float, Plan, Core], None] | None = None):
        self.records = sorted(records, key=lambda r: r.submit_time)
        self.spec = spec
        self.preset = preset
        self.policy_name = policy
        self.core = Core(spec, make_policy(policy, preset), preset)
        self.progress = progress
        # sees every round's plan and the core after it (a sweep's time series); never writes
        self.on_round = on_round
        self.runs: dict[int, _Run] = {}
        self._cost = {r.job_id: preset.overhead(r.model_name, r.num_gpu) for r in records}
        self.arrivals = _grouped_arrivals(self.records, preset.arrival_grouping_rel)
        self._end_rel = preset.end_grouping_rel.get(policy, 0.0)
        self._busy: tuple[Plan | None, int] = (None, 0)  # the last plan and its busy GPUs
        # the groups _apply last made runs of, and how many runs: groups handed back again
        # (the same tuple) with every run still there keep the runs as they are
        self._applied: tuple[tuple[Group, ...] | None, int] = (None, 0)

    def _apply(self, plan: Plan, now: float) -> None:
        """Turn a plan into per-job run parameters, charging overheads as the preset says: at
        every event (paper), or when plan_changes says the job (re)starts (a start, a move, a
        regroup that is not in place); a job kept or regrouped in place pays what it still
        owed. A group the plan hands back unchanged (the same object) keeps its runs as they
        are: its members neither (re)start nor change pace, so a round costs what changed."""
        previous = self.runs
        applied, count = self._applied
        if plan.groups is applied and len(previous) == count:
            return  # the very groups applied last, every run still there: all kept
        preset, cost = self.preset, self._cost
        group_sum = preset.overhead_group_sum
        charge_all = preset.overhead_every_event
        runs: dict[int, _Run] = {}
        for group in plan.groups:
            members = group.jobs
            if len(members) == 1:  # a job alone (most groups): the same, without the sums
                job_id = members[0]
                old = previous.get(job_id)
                if old is not None and old.source is group:
                    runs[job_id] = old  # the same group: the same run (nothing spent)
                    continue
                if charge_all:
                    if old is not None and old.group == members:
                        # its last run, made afresh in place (nothing else holds it): the
                        # fields a new _Run would get, without making one per moved job
                        old.tt, old.overhead = group.tt, cost[job_id]
                        old.where, old.source = group.placement, group
                        runs[job_id] = old
                        continue
                    overhead = cost[job_id]
                elif self._starts(old, group):
                    overhead = cost[job_id]
                else:
                    overhead = old.overhead
                runs[job_id] = _Run(group.tt, overhead, members, group.placement, group)
                continue
            olds = [previous.get(j) for j in members]
            if all(old is not None and old.source is group for old in olds):
                runs.update(zip(members, olds))
                continue
            costs = [cost[j] for j in members]
            total = sum(costs)
            for job_id, own, old in zip(members, costs, olds):
                if charge_all or self._starts(old, group):
                    overhead = total if group_sum else own
                else:
                    overhead = old.overhead
                runs[job_id] = _Run(group.tt, overhead, members, group.placement, group)
        self.runs = runs
        self._applied = (plan.groups, len(runs))

    def _starts(self, old: _Run | None, group: Group) -> bool:
        """Whether a member of `group` (re)starts, as plan_changes classifies it from its
        last run `old` (None: it did not run)."""
        before = None if old is None else (old.group, old.where)
        return plan_changes.classify(before, (group.jobs, group.placement),
                                     self.preset) in plan_changes.STARTS

    def _busy_gpus(self, plan: Plan) -> int:
        """GPUs in use under `plan` (groups handed back unchanged are not counted again)."""
        last, busy = self._busy
        if last is None or plan.groups is not last.groups or plan.shared_gpus != last.shared_gpus:
            busy = _busy_gpus(plan)
            self._busy = (plan, busy)
        return busy

    def _done(self, dt: float) -> dict[int, float]:
        """Iterations each running job finished in the last `dt` seconds (what is left of
        its overhead is paid first, unless the preset charges it at every event)."""
        done = {}
        if self.preset.overhead_every_event:
            for job_id, run in self.runs.items():
                effective = dt - run.overhead
                tt = run.tt
                # max(effective, 0.0) / tt, without the calls (the same float, NaN included)
                done[job_id] = (0.0 if effective < 0.0 else effective) / tt if tt > 0 else 0.0
            return done
        for job_id, run in self.runs.items():
            effective = dt - run.overhead
            run.overhead = max(run.overhead - dt, 0.0)
            done[job_id] = max(effective, 0.0) / run.tt if run.tt > 0 else 0.0
        return done

    def _ends(self, now: float) -> list[tuple[float, int]]:
        """(when it ends if nothing changes, job id) of each running job, in plan order."""
        jobs = self.core.jobs
        if self.preset.overhead_every_event:
            return [(now + 0.0 + jobs[j].remaining * run.tt, j) for j, run in self.runs.items()]
        return [(now + run.overhead + jobs[j].remaining * run.tt, j)
                for j, run in self.runs.items()]

    def run(self) -> SimResult:
        started = time.perf_counter()
        core, records = self.core, self.records
        n, i, rounds, finished = len(records), 0, 0, 0
        utilisation: list[tuple[float, int]] = []
        wakeup: float | None = None
        ends: list[tuple[float, int]] = []
        last = 0.0
        # seconds within which an event is one with an arrival (the preset's, by policy)
        tolerance = self.preset.tolerance(self.policy_name)
        arrivals = self.arrivals
        while i < n or self.runs or core.queue:
            next_arrival = arrivals[i] if i < n else math.inf
            next_end = ends[0][0] if ends else math.inf
            t = min(next_arrival, next_end, wakeup if wakeup is not None else math.inf)
            if t == math.inf:
                raise RuntimeError(f"{len(core.queue)} jobs can never run on this cluster")
            if abs(next_arrival - t) <= tolerance:
                t = next_arrival
            ended = []
            while ends and ends[0][0] <= t + tolerance:
                ended.append(heapq.heappop(ends)[1])
            for job_id in ended:
                core.finish(job_id, t)
                del self.runs[job_id]
                finished += 1
            while i < n and arrivals[i] <= t + tolerance:
                core.submit(records[i], arrivals[i])
                i += 1
            core.advance(t, self._done(t - last))
            plan = core.round(t)
            rounds += 1
            self._apply(plan, t)
            wakeup = plan.wakeup
            ends = _end_heap(self._ends(t), self._end_rel)
            utilisation.append((t, self._busy_gpus(plan)))
            last = t
            if self.on_round is not None:
                self.on_round(t, plan, core)
            if self.progress is not None:
                self.progress(finished, n)
        outcomes = [JobOutcome.of(job) for job in core.jobs.values()]
        wall = time.perf_counter() - started
        return SimResult(self.policy_name, self.preset.name, outcomes,
                         summarize(outcomes, utilisation, self.spec.total_gpus),
                         utilisation, rounds, wall)


def _grouped_arrivals(records: Sequence[JobRecord], rel: float) -> list[float]:
    """When each record arrives: its submit time, or with `rel` > 0 the time of the first
    earlier arrival event within relative `rel` of it (the artifact's event list)."""
    if rel <= 0:
        return [r.submit_time for r in records]
    events: list[float] = []
    out = []
    for record in records:
        t = record.submit_time
        # events ascend; those close enough to t are at the end, the first of them wins
        k = len(events)
        while k > 0 and math.isclose(events[k - 1], t, rel_tol=rel):
            k -= 1
        if k < len(events):
            out.append(events[k])
        else:
            events.append(t)
            out.append(t)
    return out


def _end_heap(ends: list[tuple[float, int]], rel: float) -> list[tuple[float, int]]:
    """`_grouped_ends(ends, rel)` as a heap. Most rounds group nothing: then the ends sorted
    (a sorted list is a heap, and pops follow the values alone) are the answer, and the
    test that no two are close (as _grouped_ends makes it) reads that same sorted list."""
    if 0 < rel < 0.5:
        ordered = sorted(ends)
        times = [end for end, _ in ordered]
        if math.isfinite(sum(times)):
            later, earlier = times[1:], times[:-1]
            # any(b - a <= 2 rel * max(b, -a)) over neighbours a, b: the same arithmetic,
            # mapped (no Python frame per pair)
            if not any(map(le, map(sub, later, earlier),
                           map(mul, repeat(2.0 * rel), map(max, later, map(neg, earlier))))):
                return ordered
            ends = _grouped_near(ends, rel)
            heapq.heapify(ends)
            return ends
    if rel > 0:
        ends = _grouped_ends(ends, rel)
    heapq.heapify(ends)
    return ends


def _grouped_near(ends: list[tuple[float, int]], rel: float) -> list[tuple[float, int]]:
    """_grouped_ends over finite `ends` (0 < rel < 0.5), grouping only the ends that have
    another within reach. An end whose nearest values (in sorted order) are both out of
    reach (near |end|, which any end close to it is within, see _grouped_ends) is close to
    no other: it makes its own event and no other end joins it. So the ends within reach of
    another are grouped among themselves, in plan order, and the rest stay as they are."""
    near = 2.0 * rel / (1.0 - rel)
    times = [end for end, _ in ends]
    ranked = sorted(range(len(ends)), key=times.__getitem__)
    within = set()
    for a, b in zip(ranked, ranked[1:]):
        low, high = times[a], times[b]
        if high - low <= near * abs(low) or high - low <= near * abs(high):
            within.add(a)
            within.add(b)
    if len(within) == len(ends):
        return _grouped_ends(ends, rel)
    places = sorted(within)
    out = list(ends)
    for k, grouped in zip(places, _grouped_ends([ends[k] for k in places], rel)):
        out[k] = grouped
    return out


def _grouped_ends(ends: list[tuple[float, int]], rel: float) -> list[tuple[float, int]]:
    """With `rel` > 0 each end joins the first end event, in plan order, within relative
    `rel` of it and takes its time (the artifact's end-event list); else unchanged.

    The events are also kept sorted, so only those near an end are tried (within the bound
    that `rel` allows) instead of every event so far; of those close enough, the first made
    wins, as a scan in order would find."""
    if rel <= 0:
        return ends
    if rel >= 0.5:
        return _grouped_ends_scan(ends, rel)
    # Most rounds no two ends are close, and every end is its own event. In sorted order it
    # is enough to look at neighbours: were a < b < c with b within twice rel of neither,
    # c - a would exceed 2 rel |c|, well beyond what rounding can bring within rel.
    times = sorted([end for end, _ in ends])
    if math.isfinite(sum(times)):
        twice = 2.0 * rel
        if not any(b - a <= twice * max(b, -a) for a, b in zip(times, times[1:])):
            return ends
    near = 2.0 * rel / (1.0 - rel)  # |a - b| <= rel * max(|a|, |b|) implies within near * |b|
    events: list[float] = []  # in the order made
    times: list[float] = []  # the same, ascending
    made: list[int] = []  # index into events of each of times
    out = []
    isclose = math.isclose
    for end, job_id in ends:
        if not math.isfinite(end):
            first = next((k for k, e in enumerate(events) if isclose(e, end, rel_tol=rel)), None)
        else:
            reach = near * abs(end)
            top = end + reach
            k = bisect.bisect_left(times, end - reach)
            first = None
            while k < len(times) and times[k] <= top:
                index = made[k]
                if (first is None or index < first) and isclose(times[k], end, rel_tol=rel):
                    first = index
                k += 1
        if first is None:
            k = bisect.bisect_right(times, end)
            times.insert(k, end)
            made.insert(k, len(events))
            events.append(end)
        else:
            end = events[first]
        out.append((end, job_id))
    return out


def _grouped_ends_scan(ends: list[tuple[float, int]], rel: float) -> list[tuple[float, int]]:
    """_grouped_ends by trying every event so far (the definition)."""
    events: list[float] = []
    out = []
    for end, job_id in ends:
        for event in events:
            if math.isclose(event, end, rel_tol=rel):
                end = event
                break
        else:
            events.append(end)
        out.append((end, job_id))
    return out


def _busy_gpus(plan: Plan) -> int:
    if not plan.shared_gpus:
        return sum([g.num_gpu for g in plan.groups])
    cells = set()
    loose = 0
    for group in plan.groups:
        if not group.placement:
            loose += group.num_gpu
        for piece in group.placement:
            cells.update((piece.node, g) for g in piece.gpus)
    return len(cells) + loose


def simulate(records: Sequence[JobRecord], spec: ClusterSpec, policy: str, preset: Preset,
             progress: Callable[[int, int], None] | None = None,
             on_round: Callable[[float, Plan, Core], None] | None = None) -> SimResult:
    return Simulator(records, spec, policy, preset, progress, on_round).run()
