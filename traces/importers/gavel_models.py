"""Gavel's models: how fast each runs alone on one V100, and the catalogue profile that
stands for it.

A Gavel trace states a job's length in steps of its model, not in seconds, so the import
needs each model's step rate. The rates are Gavel's own measurements:
stanford-futuredata/gavel, `scheduler/simulation_throughputs.json` at commit
c4fa40097339e9608ab71fd64c8bdea96a5e4a4c, the `v100` rows of each model on one GPU (key
`(model, 1)`, value `null`: the model alone), in steps per second, to four significant
digits. One GPU because that is the only row every model has (a Philly job of 16 GPUs has
none), and because Gavel turns a run time into steps at one V100's rate when it builds a trace.

Gavel's models are not this project's, and interleaving needs stage times, so each is given
the catalogue profile (traces/models.py) of its family: image CNNs (ResNet-18, ResNet-50)
resnet18; CycleGAN, a GPU-bound image CNN, vgg16; the translation Transformer bert; the
LSTM language model (LM) gpt2, the catalogue's language model; A3C, reinforcement
learning, a2c; Recommendation, which the catalogue lacks, dqn, the data-bound profile the
PAI import also gives recommendation (CTR) jobs.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

# Gavel's model name before " (batch size N)" -> (family, catalogue model)
FAMILIES: Mapping[str, tuple[str, str]] = MappingProxyType({
    "ResNet-18": ("cnn", "resnet18"),
    "ResNet-50": ("cnn", "resnet18"),
    "CycleGAN": ("cnn", "vgg16"),
    "Transformer": ("transformer", "bert"),
    "LM": ("language model", "gpt2"),
    "A3C": ("rl", "a2c"),
    "Recommendation": ("recommendation", "dqn"),
})

# Gavel's job type -> steps per second alone on one V100
STEPS_PER_S: Mapping[str, float] = MappingProxyType({
    "A3C": 7.176,
    "CycleGAN": 4.426,
    "LM (batch size 5)": 109.2,
    "LM (batch size 10)": 81.65,
    "LM (batch size 20)": 64.74,
    "LM (batch size 40)": 45.24,
    "LM (batch size 80)": 28.24,
    "Recommendation (batch size 512)": 23.32,
    "Recommendation (batch size 1024)": 13.28,
    "Recommendation (batch size 2048)": 7.47,
    "Recommendation (batch size 4096)": 3.906,
    "Recommendation (batch size 8192)": 2.842,
    "ResNet-18 (batch size 16)": 32.35,
    "ResNet-18 (batch size 32)": 29.95,
    "ResNet-18 (batch size 64)": 24.09,
    "ResNet-18 (batch size 128)": 17.99,
    "ResNet-18 (batch size 256)": 10.3,
    "ResNet-50 (batch size 16)": 11.4,
    "ResNet-50 (batch size 32)": 7.787,
    "ResNet-50 (batch size 64)": 4.395,
    "ResNet-50 (batch size 128)": 2.497,
    "Transformer (batch size 16)": 11.06,
    "Transformer (batch size 32)": 10.62,
    "Transformer (batch size 64)": 8.618,
    "Transformer (batch size 128)": 5.446,
    "Transformer (batch size 256)": 1.595,
})


def family_of(job_type: str) -> tuple[str, str]:
    """(family, catalogue model) of a Gavel job type; KeyError for one not in the table."""
    return FAMILIES[job_type.split(" (", 1)[0]]


def model_map() -> dict[str, str]:
    """Each Gavel model -> 'catalogue model (family)', as the import's summary states it."""
    return {name: f"{model} ({family})" for name, (family, model) in FAMILIES.items()}
