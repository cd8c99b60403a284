"""The paper's model mix, as typical solo per-iteration profiles.

Numbers are medians of the 8-GPU jobs of a Philly-derived Muri trace, in seconds. Stage
order is STAGES_3 (data, gpu, net). A 1-GPU job does no all-reduce, so its net time is 0;
the multi-GPU `net` here is the 8-GPU value. `iteration_time` is the trace's measured solo
iteration time, which is not exactly the sum of the stages (the testbed overlaps a little).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping


@dataclass(frozen=True, slots=True)
class ModelProfile:
    """A workload's typical solo iteration, used when a trace row or a generator needs one."""

    name: str
    batch_size: int
    iteration_time: float
    stage_times: tuple[float, ...]


def _profile(name: str, batch_size: int, iteration_ms: float, *stage_ms: float) -> ModelProfile:
    return ModelProfile(
        name=name,
        batch_size=batch_size,
        iteration_time=iteration_ms / 1000,
        stage_times=tuple(t / 1000 for t in stage_ms),
    )


# name, batch size, iteration ms, data ms, gpu ms, net ms
MODELS: Mapping[str, ModelProfile] = MappingProxyType(
    {
        p.name: p
        for p in (
            _profile("vgg16", 16, 214, 82, 75, 66),
            _profile("vgg19", 16, 226, 82, 88, 60),
            _profile("resnet18", 128, 1010, 784, 117, 77),
            _profile("shufflenet_v2_x1_0", 128, 957, 769, 57, 10),
            _profile("bert", 4, 192, 0.5, 167, 59),
            _profile("gpt2", 4, 437, 0.6, 419, 49),
            _profile("a2c", 64, 555, 502, 14, 0.4),
            _profile("dqn", 128, 509, 435, 8, 0.5),
        )
    }
)
