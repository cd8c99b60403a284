"""Model presets as data: how the simulator accounts time, and the cost model policies plan with.

`paper` reproduces the published artifact's accounting (see the reference notes): a 1.015
calibration of iteration times, a restart overhead charged to every running job at every
scheduling event (a group member pays its group's sum), fixed group slowdown multipliers,
the trace's `duration` as the first remaining-time estimate of Muri-S, auto-unpack off,
the artifact's own matching implementation (its tie-breaking decides between equal matchings),
the artifact's float order (times from the CSV's milliseconds, attained service summed as
`(attained + now) - last`, no demotion slack, events compared exactly outside Muri and AntMan),
and one artifact quirk kept for fidelity only: Tiresias admits jobs by free-GPU count, so a
job the fragmented cluster cannot place still counts as running (with no GPUs).
`default` is the physically sensible model: overhead paid once per start, restart, regroup
or move; no multipliers; auto-unpack on so that no group is slower than running alone.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Mapping

from traces.muri_csv import csv_milliseconds

# Seconds of restart overhead by model, for 1/2/4/8/16/32 GPUs (profiled by the artifact).
_OVERHEAD_ROWS = {
    "vgg16": (7, 7, 8, 9, 9, 10),
    "vgg19": (7, 7, 8, 9, 10, 10),
    "resnet18": (4, 5, 5, 7, 7, 7),
    "shufflenet_v2_x1_0": (4, 4, 5, 5, 7, 8),
    "bert": (10, 10, 10, 10, 10, 10),
    "gpt2": (10, 10, 10, 10, 10, 10),
    "a2c": (38, 39, 39, 46, 46, 46),
    "dqn": (5, 5, 6, 6, 8, 8),
}
_GPU_COLUMNS = (1, 2, 4, 8, 16, 32)

RESTART_OVERHEAD: Mapping[tuple[str, int], float] = MappingProxyType({
    (model, gpus): float(sec)
    for model, row in _OVERHEAD_ROWS.items()
    for gpus, sec in zip(_GPU_COLUMNS, row)
})


@dataclass(frozen=True)
class Preset:
    name: str
    calibration: float = 1.0  # solo iteration time = trace iteration_time x calibration
    overhead_table: Mapping[tuple[str, int], float] = field(default_factory=lambda: RESTART_OVERHEAD)
    overhead_default: float = 10.0
    overhead_every_event: bool = False  # paper: charged at every event, not only on restarts
    overhead_group_sum: bool = False  # paper: a member pays the sum of its group's overheads
    group_slowdown: Mapping[int, float] = field(default_factory=dict)  # members -> TT factor
    nomatch_slowdown: Mapping[int, float] = field(default_factory=dict)  # override for no-matching ablation
    fresh_estimate_duration: bool = False  # Muri-S ranks a never-run job by the trace duration
    auto_unpack: bool = True
    normalize_profiles: bool = True  # scale stage times to sum to the solo iteration time
    sticky_placement: bool = True  # a running job keeps its GPUs when they are still free
    # A job regrouped on the GPUs it runs on goes on at the new group's pace, no restart (the
    # live system does this for emulated trainers); the paper charges every regroup.
    regroup_in_place: bool = True
    # A group that runs now counts this much more efficient when matching, so near-ties do
    # not regroup jobs (each regroup costs checkpoints and restarts) round after round.
    regroup_hysteresis: float = 0.1
    # Which maximum-weight matching: any exact one will do, but among equal-weight matchings
    # the artifact's own blossom implementation picks particular ones ("blossom" replays it).
    matching_backend: str = "auto"
    # A matching proven within this fraction of the best weight is accepted (the weights come
    # from profiles known to a few percent, and proving the last 0.5% can cost a dense
    # search of a second); 0 asks for a proven optimum every round.
    matching_rel_gap: float = 5e-3
    # Candidates of one class are matched in windows of at most this many, consecutive in
    # priority order (0: one matching over all). Matching cost grows with the cube of the
    # candidates; windows of 128 keep a round with 5,000 queued jobs well within a second,
    # and a class rarely has more than 128 candidates short of thousands of queued jobs.
    matching_window: int = 128
    max_group: int = 4
    cpu_per_gpu: int = 6
    cpu_single_gpu: int = 2
    tiresias_limits: tuple[float, ...] = (3250.0, 7200.0)
    tiresias_promote: float = 0.0  # starvation promotion factor; 0 = off (as the artifact)
    # The artifact's quirk, kept by the paper preset only: Tiresias admits a job when enough
    # GPUs are free in total, and a job no node can place then "runs" with no GPUs (it
    # progresses and is charged service). Off: a job runs only on GPUs it is placed on.
    admit_by_gpu_count: bool = False
    # Tiresias demotes a job whose attained GPU-seconds reach a queue limit minus this slack
    # (float sums of wall times must not miss a limit by a hair); the artifact has none.
    tiresias_demotion_slack: float = 1e-6
    # How attained service is summed at each event: "interval" adds `now - last`; "running"
    # computes `(attained + now) - last`, the artifact's float order (differs in the last bits,
    # which decide a demotion that lands exactly on a queue limit).
    service_sum: str = "interval"
    # Time in milliseconds as the CSV states it, turned into seconds the artifact's way:
    # stage times `float(ms) / 1000` and the solo time `(ms * calibration) / 1000`. Off: the
    # exact decimal seconds the reader gives, times the calibration.
    times_from_ms: bool = False
    # Seconds within which an event counts as the same event as an arrival (and ends within
    # it are taken together); by policy where listed, else `event_tolerance`. The artifact
    # folds only in its Muri and AntMan loops; its other loops compare event times exactly.
    event_tolerance: float = 1e-4
    event_tolerance_by_policy: Mapping[str, float] = field(default_factory=dict)
    # Relative closeness (math.isclose) within which times are one event, the artifact's event
    # lists: an arrival joins the first earlier arrival event this close (and arrives at its
    # time); a running job's end joins the first end, in plan order, this close (and ends at
    # its time), by policy (its Tiresias loop takes only exactly equal ends). 0: off.
    arrival_grouping_rel: float = 0.0
    end_grouping_rel: Mapping[str, float] = field(default_factory=dict)
    # How Themis solves its fairness program, which often has many optima: "bisection" (fast,
    # gives full shares where it can) or "ecos" (the artifact's program and interior-point
    # solver, built directly in ECOS's form: the artifact's optimum, bit for bit).
    themis_solver: str = "bisection"

    def overhead(self, model: str, num_gpu: int) -> float:
        return self.overhead_table.get((model, num_gpu), self.overhead_default)

    def tolerance(self, policy: str) -> float:
        return self.event_tolerance_by_policy.get(policy, self.event_tolerance)

    def solo_time(self, iteration_time: float) -> float:
        """A job's solo iteration time (s) from the trace's, calibrated."""
        if self.times_from_ms:
            return (csv_milliseconds(iteration_time) * self.calibration) / 1000
        return iteration_time * self.calibration

    def stage_times(self, stage_times: tuple[float, ...]) -> tuple[float, ...]:
        """A job's per-iteration stage times (s) from the trace's."""
        if self.times_from_ms:
            return tuple(csv_milliseconds(t) / 1000 for t in stage_times)
        return tuple(stage_times)

    def slowdown(self, members: int, ablation_nomatch: bool = False) -> float:
        if ablation_nomatch and members in self.nomatch_slowdown:
            return self.nomatch_slowdown[members]
        return self.group_slowdown.get(members, 1.0)


PAPER = Preset(
    name="paper",
    calibration=1.015,
    overhead_every_event=True,
    overhead_group_sum=True,
    group_slowdown=MappingProxyType({2: 1.33 / 1.015, 3: 1.5 / 1.015, 4: 1.37 / 1.015}),
    nomatch_slowdown=MappingProxyType({4: 1.3 / 1.015}),
    fresh_estimate_duration=True,
    auto_unpack=False,
    normalize_profiles=False,
    sticky_placement=False,
    regroup_in_place=False,
    regroup_hysteresis=0.0,
    matching_backend="blossom",
    matching_rel_gap=0.0,
    matching_window=0,
    admit_by_gpu_count=True,
    tiresias_demotion_slack=0.0,
    service_sum="running",
    times_from_ms=True,
    event_tolerance_by_policy=MappingProxyType(
        {"srtf": 0.0, "srsf": 0.0, "tiresias": 0.0, "themis": 0.0, "fifo": 0.0}),
    arrival_grouping_rel=1e-9,
    end_grouping_rel=MappingProxyType({p: 1e-9 for p in (
        "srtf", "srsf", "themis", "antman", "muri-s", "muri-l", "muri-l-worst",
        "muri-l-nomatch")}),
    themis_solver="ecos",
)

DEFAULT = Preset(name="default")

PRESETS: Mapping[str, Preset] = MappingProxyType({p.name: p for p in (PAPER, DEFAULT)})


def get_preset(name: str, **overrides) -> Preset:
    try:
        base = PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}") from None
    return replace(base, **overrides) if overrides else base
