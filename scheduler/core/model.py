"""The cost model: what the core and every policy plan with, and what a job's time costs.

A job's solo iteration time and stage times from its trace record (calibrated, and scaled to
add up where asked), what a (re)start costs by model and #GPUs, how much slower a group runs
than the interleave model says, the CPUs a placement takes per GPU, whether a regroup on the
same GPUs goes on in place, and whether running jobs keep their GPUs. Two presets give two
models (scheduler/presets.py): the physically sensible one and the published artifact's.

How the core reads times and sums service is the model's too (`solo_time`, `stage_times`,
`running_sum`), so that the simulator's artifact mode (scheduler/sim/artifact.py) can give
the core the artifact's float arithmetic without the core knowing of it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import ClassVar, Mapping

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

# How much slower a group of 2, 3 or 4 members runs than the cyclic interleave model says, for
# contention the model does not see (memory bandwidth, PCIe, caches), and what a (re)start
# costs: fitted to the paper's real 64-V100 testbed run (interlace-calibrate on its per-job
# logs; the command and the fit's spread in EXPERIMENTS.md#calibration). The live scheduler
# refines the slowdowns from its trainers' measured group paces.
INTERFERENCE: Mapping[int, float] = MappingProxyType({2: 1.25, 3: 1.3, 4: 1.25})
MEASURED_OVERHEAD = 26.3  # seconds a (re)start, every model and size alike

RESTART_OVERHEAD: Mapping[tuple[str, int], float] = MappingProxyType({
    (model, gpus): float(sec)
    for model, row in _OVERHEAD_ROWS.items()
    for gpus, sec in zip(_GPU_COLUMNS, row)
})


@dataclass(frozen=True)
class CostModel:
    calibration: float = 1.0  # solo iteration time = trace iteration_time x calibration
    overhead_table: Mapping[tuple[str, int], float] = field(default_factory=lambda: RESTART_OVERHEAD)
    overhead_default: float = 10.0  # seconds, for a (model, #GPUs) the table does not list
    group_slowdown: Mapping[int, float] = field(default_factory=dict)  # members -> TT factor
    # members -> TT factor of the no-matching ablation's groups, where it differs
    nomatch_slowdown: Mapping[int, float] = field(default_factory=dict)
    normalize_profiles: bool = True  # scale stage times to sum to the solo iteration time
    cpu_per_gpu: int = 6
    cpu_single_gpu: int = 2
    # GB of each GPU's memory no group may count on (scheduler/core/memory.py): every
    # co-located process holds its own CUDA context (~0.5 GB), and the allocator its slack
    group_mem_reserve_gb: float = 2.0
    # (model, GPU type) -> speed of its GPU stage, a V100 being 1, where measured here or
    # given (model "": every model); the rest from specs/gpu_speed.py's table
    gpu_speed: Mapping[tuple[str, str], float] = field(default_factory=dict)
    sticky_placement: bool = True  # a running job keeps its GPUs when they are still free
    # A job regrouped on the GPUs it runs on goes on at the new group's pace, no restart (the
    # live system does this for emulated trainers; torch trainers restart).
    regroup_in_place: bool = True
    # Where regroups restart (above), a job that already shares its GPUs still regroups on
    # them in place: its trainers take turns at a stage gate, which takes the new members and
    # slot order (the live system's agents do this; the artifact restarts every regroup).
    regroup_in_gate: bool = False

    # How the core sums a running job's attained service at each event: False adds
    # `now - last`; True computes `(attained + now) - last` (the artifact's float order,
    # which only the simulator's artifact mode asks for).
    running_sum: ClassVar[bool] = False

    def overhead(self, model: str, num_gpu: int) -> float:
        return self.overhead_table.get((model, num_gpu), self.overhead_default)

    def solo_time(self, iteration_time: float) -> float:
        """A job's solo iteration time (s) from the trace's, calibrated."""
        return iteration_time * self.calibration

    def stage_times(self, stage_times: tuple[float, ...]) -> tuple[float, ...]:
        """A job's per-iteration stage times (s) from the trace's."""
        return tuple(stage_times)

    def slowdown(self, members: int, ablation_nomatch: bool = False) -> float:
        if ablation_nomatch and members in self.nomatch_slowdown:
            return self.nomatch_slowdown[members]
        return self.group_slowdown.get(members, 1.0)
