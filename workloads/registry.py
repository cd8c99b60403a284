"""Trace model names -> workloads. Imports lazily, so listing names never loads torch.

`make(name, **config)` builds a torch `Workload` (workloads/base.py) for the model names the
traces use; `real` builds `workloads.real.RealStages` (every stage on the real resource it
names, for measuring interleaving; not a trace model); `emulated` builds the torch-free
`EmulatedSpec` (config: total, iteration_time, stages, time_scale). Unknown names and unknown settings are a ValueError.
"""
from __future__ import annotations

from typing import Any

CV = ("resnet18", "vgg16", "vgg19", "shufflenet_v2_x1_0")
NLP = ("bert", "gpt2")
RL = ("dqn", "a2c")
TORCH_NAMES = CV + NLP + RL
REAL = "real"
NAMES = TORCH_NAMES + (REAL, "emulated")


def make(name: str, **config: Any) -> Any:
    if name in CV:
        from workloads import cv

        return cv.make(name, **config)
    if name in NLP:
        from workloads import nlp

        return nlp.make(name, **config)
    if name in RL:
        from workloads import rl

        return rl.make(name, **config)
    if name == REAL:
        from workloads import real

        return real.make(**config)
    if name == "emulated":
        from workloads.emulated import EmulatedSpec

        return EmulatedSpec(**config)
    raise ValueError(f"unknown workload {name!r}; known: {', '.join(NAMES)}")
