"""The artifact-compatibility mode: the simulator replays the published Muri artifact's
accounting, which its figures depend on, where the `paper` preset turns it on.

What it changes, and where:

* the simulated cluster (cluster.Accounting): events folded into one where the artifact's
  event lists fold them (folding.py), and the restart overhead charged to every running
  job at every event, a group member paying its group's sum;
* the core's arithmetic (ArtifactModel): times from the CSV's milliseconds the artifact's
  way, and attained service summed as `(attained + now) - last`;
* Tiresias's admission by free-GPU count (its `admit_by_gpu_count` setting), so a job the
  fragmented cluster cannot place still counts as running (with no GPUs).

The artifact has one simulator loop per policy, and they differ in how they take events.
Rather than list policies by name here, each policy class says how its loop went
(`Policy.artifact_loop`, base.ArtifactLoop), and this mode reads it; a
policy the artifact has no loop for keeps the default, the simulator's own event tolerance,
taking only exactly equal ends together.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace

from scheduler.core.model import CostModel
from scheduler.core.policies.base import Policy
from scheduler.presets import Preset
from scheduler.sim.cluster import Accounting
from traces.muri_csv import csv_milliseconds

# Relative closeness (math.isclose) within which the artifact's event lists take two times
# as one event: an arrival joins the first earlier arrival event this close (and arrives at
# its time); a running job's end joins the first end, in plan order, this close; and (in
# the loops that fold an end into an arrival, with abs_tol=1e-4 and this default rel_tol)
# an end this close to the next arrival is taken at the arrival.
EVENT_REL = 1e-9


@dataclass(frozen=True)
class ArtifactModel(CostModel):
    """A cost model that reads and sums times as the artifact does: stage times
    `float(ms) / 1000` and the solo time `(ms * calibration) / 1000` from the CSV's
    milliseconds (91.3 ms is not 0.0913 s there), service summed from `now`."""

    running_sum = True

    @classmethod
    def of(cls, model: CostModel) -> "ArtifactModel":
        return cls(**{f.name: getattr(model, f.name) for f in fields(model)})

    def solo_time(self, iteration_time: float) -> float:
        return (csv_milliseconds(iteration_time) * self.calibration) / 1000

    def stage_times(self, stage_times: tuple[float, ...]) -> tuple[float, ...]:
        return tuple(csv_milliseconds(t) / 1000 for t in stage_times)


def for_core(preset: Preset) -> Preset:
    """`preset` as the core and the policies see it in the artifact mode."""
    tiresias = replace(preset.policies.tiresias, admit_by_gpu_count=True)
    return replace(preset, model=ArtifactModel.of(preset.model),
                   policies=replace(preset.policies, tiresias=tiresias))


def accounting(policy: Policy) -> Accounting:
    """How the simulated cluster accounts a run of `policy` in the artifact mode: as the
    artifact's loop for it did."""
    default = Accounting()
    loop = policy.artifact_loop
    return Accounting(
        event_tolerance=0.0 if loop.exact_events else default.event_tolerance,
        event_rel=0.0 if loop.exact_events else EVENT_REL,
        arrival_rel=EVENT_REL,
        end_rel=EVENT_REL if loop.groups_ends else 0.0,
        end_merge=default.event_tolerance if loop.merges_ends else 0.0,
        end_merge_rel=EVENT_REL if loop.merges_ends else 0.0,
        overhead_every_event=True,
        overhead_group_sum=True)
