"""The artifact's event folding: times within a relative tolerance of an earlier event are
that event.

The published artifact keeps lists of event times and adds a new time to the first event, in
list order, that `math.isclose` finds within its tolerance, taking that event's time. It does
so for arrivals (in time order) and for the ends of running jobs (in its plan's order). Its
published figures depend on it, so the simulated cluster folds the same way when the artifact
mode asks (scheduler/sim/cluster.py); by default nothing is folded.
"""
from __future__ import annotations

import math
from itertools import repeat
from operator import le, mul, neg, sub
from typing import Iterator, Sequence


def fold(times: Sequence[float], rel: float) -> Sequence[float]:
    """`times` with each one that is within relative `rel` of an earlier event (a time, in
    the order given, that joined none before it) replaced by the first such event's time;
    `times` itself when none is (and always for `rel` <= 0).

    Only times that lie close together can join: in sorted order, neighbours b >= a with
    b - a > 2 rel max(|a|, |b|) split the times into runs that no tolerance of `rel` < 1/2
    bridges (two times close to each other have every time between them within reach of
    its neighbours). So the definition is applied within each run of two or more, in the
    given order, and most calls, where no two times are near, end after one sorted pass."""
    n = len(times)
    if rel <= 0 or n < 2:
        return times
    ranked = sorted(range(n), key=times.__getitem__)
    ordered = [times[k] for k in ranked]
    if rel < 0.5 and math.isfinite(sum(ordered)):
        near = list(_near(ordered, rel))
        if not any(near):
            return times
        runs, run = [], [ranked[0]]
        for k, joined in zip(ranked[1:], near):
            if joined:
                run.append(k)
            else:
                if len(run) > 1:
                    runs.append(run)
                run = [k]
        if len(run) > 1:
            runs.append(run)
    else:  # a tolerance this wide, or times that are not all finite: one run of all
        runs = [list(range(n))]
    out = list(times)
    isclose = math.isclose
    for run in runs:
        events: list[float] = []
        for k in sorted(run):  # the order given
            t = times[k]
            for event in events:
                if isclose(event, t, rel_tol=rel):
                    out[k] = event
                    break
            else:
                events.append(t)
    return out


def folds(ordered: Sequence[float], rel: float) -> bool:
    """Whether `fold` could change these times (given sorted): False when no two are near."""
    if rel <= 0 or len(ordered) < 2:
        return False
    if rel < 0.5 and math.isfinite(sum(ordered)):
        return any(_near(ordered, rel))
    return True


def _near(ordered: Sequence[float], rel: float) -> Iterator[bool]:
    """For sorted neighbours a <= b: b - a <= 2 rel max(b, -a) (max(b, -a) is max(|a|,
    |b|)), mapped: no Python frame per pair, and lazily (`any` stops at the first)."""
    later, earlier = ordered[1:], ordered[:-1]
    return map(le, map(sub, later, earlier),
               map(mul, repeat(2.0 * rel), map(max, later, map(neg, earlier))))
