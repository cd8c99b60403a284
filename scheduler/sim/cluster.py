"""The simulated cluster: the driver loop's backend in virtual time.

It replays a trace's arrivals, runs each job of a plan at its group's iteration time, charges
the cost model's restart overheads, and tells the loop when the next thing happens (an
arrival, a job's end, a wake-up a policy asked for). It can also be told to meet what a real
cluster meets (`Faults`: a stop that takes time, a launch that fails, an agent that vanishes),
so that policies are tried against them in simulation.

Overheads are charged when plan_changes says a job (re)starts (a start, a move, a regroup that
is not in place); a job kept or regrouped in place pays what it still owed. How events and
overheads are accounted is an `Accounting`: the artifact's (artifact.py) charges every
running job at every event instead, and folds events that fall within a relative tolerance
of each other (folding.py).
"""
from __future__ import annotations

import heapq
from operator import attrgetter
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from scheduler.core.engine import Core
from scheduler.core.plan_changes import STARTS, STOP, STOPS, Change
from scheduler.core.model import CostModel
from scheduler.core.state import Plan
from scheduler.events import LaunchFailed, StopTook
from scheduler.loop import Outcome, Tick
from scheduler.sim.folding import fold, folds
from traces.record import JobRecord


_new_tick = tuple.__new__  # a Tick made as the tuple it is, once an event
_num_gpu = attrgetter("num_gpu")


@dataclass(slots=True)
class _Run:
    """How one running job progresses until the next event."""

    tt: float
    overhead: float  # seconds of no progress still to pay (or charged per event, paper)


@dataclass(frozen=True)
class Accounting:
    """How the simulated cluster takes events and charges restart overheads."""

    # Seconds within which an event counts as the same event as an arrival (and ends within
    # it are taken together).
    event_tolerance: float = 1e-4
    # ... or within this relative closeness to the arrival, where that is wider (the
    # artifact's math.isclose keeps its default rel_tol next to its abs_tol): 4.7 ms at
    # 4.7e6 s; 0: the seconds alone.
    event_rel: float = 0.0
    # Relative closeness within which arrivals, and the ends of running jobs, are one event
    # (folding.py); 0: none are folded.
    arrival_rel: float = 0.0
    end_rel: float = 0.0
    # Seconds, or this relative closeness where wider (math.isclose), within which the ends
    # after the first one taken are taken with it; 0: none.
    end_merge: float = 0.0
    end_merge_rel: float = 0.0
    overhead_every_event: bool = False  # charged at every event, not only on restarts
    overhead_group_sum: bool = False  # a group member pays the sum of its group's overheads


@dataclass(frozen=True)
class Faults:
    """What a real cluster does that a plan does not foresee, by job and by node.

    `slow_stops`: job id -> seconds its next stop takes (its GPUs are free, and the jobs a
    round starts begin, only then). `failed_launches`: job id -> how many of its next launches
    fail (it waits again; a round is due `retry_s` later). `lost_nodes`: (time, node, time it
    comes back or None): the node's agent vanishes and what ran there waits again."""

    slow_stops: Mapping[int, float] = field(default_factory=dict)
    failed_launches: Mapping[int, int] = field(default_factory=dict)
    lost_nodes: Sequence[tuple[float, int, float | None]] = ()
    retry_s: float = 1.0


class SimulatedCluster:
    """The backend of the simulator (see scheduler/loop.py's Backend)."""

    def __init__(self, records: Sequence[JobRecord], model: CostModel,
                 accounting: Accounting | None = None, faults: Faults | None = None,
                 progress: Callable[[int, int], None] | None = None,
                 round_interval: float = 0.0):
        """`round_interval`: plan only at multiples of so many seconds, and only where
        something happened since the last round, as a scheduler that wakes on a period does;
        arrivals wait for the next round and GPUs a job frees stay idle until then. 0: plan
        at every event."""
        accounting = accounting or Accounting()
        if not (math.isfinite(round_interval) and round_interval >= 0):
            raise ValueError(f"round interval must be a finite number of seconds >= 0, "
                             f"got {round_interval!r}")
        self._period = round_interval
        self._ticked = False
        self.records = sorted(records, key=lambda r: r.submit_time)
        self.accounting = accounting
        self.progress = progress
        self.runs: dict[int, _Run] = {}
        self._cost = {r.job_id: model.overhead(r.model_name, r.num_gpu) for r in records}
        self.arrivals = fold([r.submit_time for r in self.records], accounting.arrival_rel)
        self._next = 0  # the next record to arrive
        self._end_rel = accounting.end_rel
        self._end_merge = accounting.end_merge
        self._end_merge_rel = accounting.end_merge_rel
        self._tolerance = accounting.event_tolerance
        self._event_rel = accounting.event_rel
        self._every_event = accounting.overhead_every_event
        self._group_sum = accounting.overhead_group_sum
        self._ends: list[tuple[float, int]] = []  # a heap of (end if nothing changes, job id)
        self._wakeup: float | None = None
        self._last = 0.0
        self.finished = 0
        self.utilisation: list[tuple[float, int]] = []  # (time, busy GPUs) after each round
        self._busy = 0
        self._ended = False  # a job ended (or its node went) since the last plan
        self.faults = faults or Faults()
        if faults is not None and accounting.overhead_every_event:
            raise ValueError("faults are simulated with overheads charged per restart, not at "
                             "every event (the artifact's accounting)")
        self._slow = dict(self.faults.slow_stops)
        self._failing = dict(self.faults.failed_launches)
        self._node_events = sorted(
            [(t, node, False) for t, node, _ in self.faults.lost_nodes]
            + [(back, node, True) for _, node, back in self.faults.lost_nodes
               if back is not None])
        self._retry: float | None = None
        self._faulty = faults is not None  # anything to inject at all

    def round_failed(self, error: Exception) -> bool:
        return False  # a simulation that cannot go on ends with the error

    def refused(self, event: Any, error: Exception) -> None:
        raise error  # the simulator makes its own events: one the core refuses is a bug

    # -- what happens next -------------------------------------------------------------------
    def tick(self, core: Core) -> Tick | None:
        """The next event: jobs that end by then are finished, records that arrive by then
        submitted, and each running job advanced to it."""
        records, arrivals, i = self.records, self.arrivals, self._next
        n = len(records)
        if i >= n and not self.runs and not core.queue:
            return None
        next_arrival = arrivals[i] if i < n else math.inf
        ends = self._ends
        t = min(next_arrival, ends[0][0] if ends else math.inf,
                math.inf if self._wakeup is None else self._wakeup)
        if self._faulty:
            t = min(t, math.inf if self._retry is None else self._retry,
                    self._node_events[0][0] if self._node_events else math.inf)
        if t == math.inf:
            raise RuntimeError(f"{len(core.queue)} jobs can never run on this cluster")
        period = self._period
        tolerance = self._tolerance
        if period:  # the first round at or after the next event, after the last one
            t = period * math.ceil(t / period)
            if self._ticked and t <= self._last:
                t = self._last + period
        else:
            if self._event_rel and next_arrival < math.inf:
                tolerance = max(tolerance, self._event_rel * abs(next_arrival))
            if abs(next_arrival - t) <= tolerance:
                t = next_arrival
        self._ticked = True
        finished = []
        runs = self.runs
        limit = t + tolerance
        if self._end_merge and ends and ends[0][0] <= limit:
            first = ends[0][0]
            limit = max(limit, first + max(self._end_merge, self._end_merge_rel * abs(first)))
        ended = {}
        while ends and ends[0][0] <= limit:
            end, job_id = heapq.heappop(ends)
            finished.append(job_id)
            del runs[job_id]
            if period and end < t:
                ended[job_id] = end
        self.finished += len(finished)
        self._ended = bool(finished)
        arrived = []
        due = t if period else t + tolerance  # a round takes no arrival after it
        while i < n and arrivals[i] <= due:
            arrived.append((records[i], arrivals[i]))
            i += 1
        self._next = i
        done = self._done(t - self._last)
        self._last = t
        lost, back = [], []
        if self._faulty:
            if self._retry is not None and self._retry <= t:
                self._retry = None
            while self._node_events and self._node_events[0][0] <= t:
                _, node, up = self._node_events.pop(0)
                (back if up else lost).append(node)
        if lost:
            self._ended = True
            for job_id, group in core.placed.items():
                if any(piece.node in lost for piece in group.placement):
                    runs.pop(job_id, None)
        if self.progress is not None:
            self.progress(self.finished, n)
        return _new_tick(Tick, (t, done, finished, arrived, lost, back, ended, ()))

    def _done(self, dt: float) -> dict[int, float]:
        """Iterations each running job finished in the last `dt` seconds (what is left of
        its overhead is paid first, unless it is charged at every event)."""
        done = {}
        if self._every_event:
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

    # -- acting on a plan --------------------------------------------------------------------
    def act(self, core: Core, plan: Plan) -> list[Outcome]:
        """Make each changed job's run as the plan says, then when each running job ends if
        nothing changes (in plan order: the artifact folds ends in that order)."""
        changes = plan.changes
        outcomes: list[Outcome] = []
        if changes.kinds or changes.added:
            self._change(plan, outcomes)
            self._busy = _busy_gpus(plan)
        elif self._ended:  # jobs ended since the last plan: their groups are gone from it
            self._busy = _busy_gpus(plan)
        self._ended = False
        now = self._last
        self._wakeup = plan.wakeup
        jobs = core.jobs
        if self._every_event:
            ends = [(now + 0.0 + jobs[j].remaining * run.tt, j) for j, run in self.runs.items()]
        else:
            ends = [(now + run.overhead + jobs[j].remaining * run.tt, j)
                    for j, run in self.runs.items()]
        rel = self._end_rel
        if rel > 0:
            ordered = sorted(ends)  # a sorted list is a heap
            if folds([end for end, _ in ordered], rel):
                # the artifact folds ends in its plan's order
                by_job = {j: end for end, j in ends}
                ids = [j for group in plan.groups for j in group.jobs if j in by_job]
                ordered = list(zip(fold([by_job[j] for j in ids], rel), ids))
                heapq.heapify(ordered)
            self._ends = ordered
        else:
            heapq.heapify(ends)
            self._ends = ends
        self.utilisation.append((now, self._busy))
        return outcomes

    def _change(self, plan: Plan, outcomes: list[Outcome]) -> None:
        """The runs of the jobs the plan changes: a job that (re)starts pays its restart
        overhead (its group's sum, where the preset says), one kept or regrouped in place
        goes on at its group's pace owing what it owed; faults turn some into outcomes."""
        cost, runs = self._cost, self.runs
        kinds = plan.changes.kinds
        group_sum = self._group_sum
        stop = STOP
        for job_id, kind in kinds.items():
            if kind is stop:
                runs.pop(job_id, None)
        for group in plan.changes.added:
            members, _, tt, _, _ = group
            if len(members) == 1:  # a job alone (most groups): the same, without the sums
                job_id = members[0]
                run = runs.get(job_id)
                if run is None:
                    runs[job_id] = _Run(tt, cost[job_id])
                else:  # its run, changed in place (nothing else holds it)
                    if kinds.get(job_id) in STARTS:
                        run.overhead = cost[job_id]
                    run.tt = tt
                continue
            total = sum([cost[j] for j in members])
            for job_id in members:
                run = runs.get(job_id)
                overhead = total if group_sum else cost[job_id]
                if run is None:
                    runs[job_id] = _Run(tt, overhead)
                else:
                    if kinds.get(job_id) in STARTS:
                        run.overhead = overhead
                    run.tt = tt
        if self._slow or self._failing:
            self._faults(kinds, outcomes)

    def _faults(self, kinds: Mapping[int, Change], outcomes: list[Outcome]) -> None:
        """Stops that take time (the jobs this round starts begin once the slowest ended);
        launches that fail (the job does not run: it waits again)."""
        delay = 0.0
        for job_id, kind in kinds.items():
            if kind in STOPS and job_id in self._slow:
                seconds = self._slow.pop(job_id)
                delay = max(delay, seconds)
                outcomes.append(StopTook(job_id, seconds))
        for job_id, kind in kinds.items():
            if kind not in STARTS:
                continue
            left = self._failing.get(job_id, 0)
            if left > 0:
                self._failing[job_id] = left - 1
                self.runs.pop(job_id, None)
                outcomes.append(LaunchFailed(job_id, "a simulated launch failure"))
                self._retry = self._last + self.faults.retry_s
            elif delay:
                self.runs[job_id].overhead += delay


def _busy_gpus(plan: Plan) -> int:
    """GPUs in use under `plan` (a GPU that groups share counts once)."""
    if not plan.shared_gpus:
        return sum(map(_num_gpu, plan.groups))
    cells = set()
    loose = 0
    for group in plan.groups:
        if not group.placement:
            loose += group.num_gpu
        for piece in group.placement:
            cells.update((piece.node, g) for g in piece.gpus)
    return len(cells) + loose
