"""Live profiles: fold the stage times trainers measure into the profiles the planner uses.

A trace's profile is a prior; what a trainer measures is the truth, with noise. The first
measurement replaces the prior, later ones are smoothed (EWMA), and the planner hears of a
profile only when it moved enough to matter: re-weighting the matching on every jitter would
regroup jobs (checkpoint, restart) for nothing.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from specs.limits import MAX_SECONDS  # the wire's ceiling on a stage time, kept here too

#: Stage names per profile layout (DESIGN.md: a trace may merge io+cpu into data).
LAYOUTS = {3: ("data", "gpu", "net"), 4: ("io", "cpu", "gpu", "net")}


def as_layout(stages: Mapping[str, float], length: int) -> tuple[float, ...] | None:
    """Measured per-stage seconds in the layout of a `length`-stage profile; None when the
    measurement cannot fill it (unknown layout, missing stages) or is not a time (negative,
    non-finite, over MAX_SECONDS, all zero): the messages are checked already, but a profile
    the planner weighs must never hold inf or nan, whoever calls this."""
    try:
        if length == 3:
            data = stages["data"] if "data" in stages else stages["io"] + stages["cpu"]
            values = (data, stages["gpu"], stages["net"])
        elif length == 4:  # a merged data stage cannot be split: no measurement then
            values = (stages["io"], stages["cpu"], stages["gpu"], stages["net"])
        else:
            return None
        values = tuple(float(v) for v in values)
    except (KeyError, TypeError, ValueError):
        return None
    if not all(math.isfinite(v) and 0.0 <= v <= MAX_SECONDS for v in values) or not any(values):
        return None
    return values


def moved(old: Sequence[float], new: Sequence[float]) -> float:
    """How far a profile moved: L1 distance relative to the old total (inf from nothing)."""
    total = sum(old)
    if total <= 0:
        return float("inf")
    return sum(abs(a - b) for a, b in zip(old, new)) / total


@dataclass
class ProfileEstimator:
    """Per-job smoothed measured profiles. `fold` says when the planner should hear of one."""

    smoothing: float = 0.3  # weight of a new measurement after the first
    threshold: float = 0.1  # relative move that is worth a re-plan
    estimates: dict[int, tuple[float, ...]] = field(default_factory=dict)

    def fold(self, job_id: int, current: Sequence[float], stages: Mapping[str, float]
             ) -> tuple[float, ...] | None:
        """Fold one measurement in; returns the new profile when it moved more than
        `threshold` from `current` (what the planner uses now), else None."""
        measured = as_layout(stages, len(current))
        if measured is None:
            return None
        previous = self.estimates.get(job_id)
        if previous is None:
            estimate = measured
        else:
            a = self.smoothing
            estimate = tuple((1 - a) * p + a * m for p, m in zip(previous, measured))
        self.estimates[job_id] = estimate
        return estimate if moved(current, estimate) > self.threshold else None

    def forget(self, job_id: int) -> None:
        self.estimates.pop(job_id, None)
