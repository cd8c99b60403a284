"""GPU types' speeds as this cluster measures them.

Profiles are a V100's (specs/gpu_speed.py); a trainer on another type measures its GPU stage
at that type's pace. So a report is brought back to a V100's time before it is folded into
the job's profile (`to_reference`), and the planner's table learns from jobs seen on two
types: the same job's GPU stage on types A and B gives B's speed as A's times their ratio
(`observe`), a step of STEP of the way, left alone within TOLERANCE (each change re-plans).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from scheduler.core.speed import TypeSpeeds

STEP, TOLERANCE = 0.3, 0.02
#: a job's GPU stage seconds by type are kept for this many jobs at most (the oldest go)
MAX_JOBS = 100_000


def to_reference(stages: Mapping[str, float], speed: float) -> dict[str, float]:
    """Measured stage times with the GPU stage at a V100's pace (speed 1)."""
    out = dict(stages)
    if "gpu" in out and speed != 1.0:
        out["gpu"] = float(out["gpu"]) * speed
    return out


@dataclass
class TypePaces:
    """Each job's last measured GPU stage seconds on each type it has run on."""

    seen: dict[int, dict[str, float]] = field(default_factory=dict)

    def observe(self, job_id: int, model: str, gpu_type: str, gpu_seconds: float,
                speeds: TypeSpeeds) -> float | None:
        """Note a report; the new speed of (`model`, `gpu_type`) when a move is due."""
        if not gpu_type or not gpu_seconds > 0:
            return None
        mine = self.seen.pop(job_id, {})
        mine[gpu_type] = gpu_seconds
        self.seen[job_id] = mine  # most recent last: the oldest are dropped first
        while len(self.seen) > MAX_JOBS:
            del self.seen[next(iter(self.seen))]
        others = [(kind, t) for kind, t in mine.items() if kind != gpu_type]
        if not others:
            return None
        observed = sum(speeds.of(model, kind) * t / gpu_seconds for kind, t in others) \
            / len(others)
        current = speeds.of(model, gpu_type)
        new = current + STEP * (observed - current)
        return new if abs(new - current) > TOLERANCE * current else None

    def forget(self, job_id: int) -> None:
        self.seen.pop(job_id, None)
