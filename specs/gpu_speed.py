"""How fast each GPU type runs a job's GPU stage, relative to a V100.

The trace profiles this project ships are the Muri artifact's, measured on its testbed of
V100 GPUs (its cluster_exp README), so a V100 (Alibaba's V100M16 and V100M32) runs them at
speed 1 and a type of speed s runs a job's GPU stage in 1/s of its profile's time; the data,
CPU and network stages do not change with the GPU.

Where the figures come from:

* **Measured (P100, K80)**: Gavel's published single-GPU throughputs
  (stanford-futuredata/gavel, `scheduler/simulation_throughputs.json`, batch size 32 rows,
  consolidated), each type's throughput over the V100's, per model family. Interlace's
  models map to Gavel's by kind: ImageNet CNNs (vgg16, vgg19, resnet18, shufflenet) to its
  ImageNet ResNet-50, transformers (bert, gpt2) to its Transformer, RL (a2c, dqn) to its A3C.
  (Gavel's whole-iteration ratio is taken as the GPU stage's: a lower bound on the GPU's own
  gap, as the rest of Gavel's iteration does not speed up.) A model of no known family gets
  the geometric mean of Gavel's GPU-bound models (ResNet-50, Transformer, A3C, LM, CycleGAN).
* **Data sheets (other types)**: the smaller of the FP32 peak ratio and the memory bandwidth
  ratio to a V100 SXM2 (15.7 TFLOPS, 900 GB/s), a roofline bound: training is held back by
  the scarcer of the two. Checked against the measured types: it gives P100 0.68 where Gavel's
  geometric mean is 0.71, and K80 0.27 where it is 0.24 (tests/core/test_gpu_speed.py).
* **Assumed (G2, G3)**: Alibaba's undisclosed types run at speed 1, as their memory is
  assumed (specs/gpu_types.py). A type this module does not know also runs at 1.

The live scheduler replaces a figure once it has measured a job on two types.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

#: Interlace's models by the Gavel model family whose measurement stands for them.
FAMILY: Mapping[str, str] = MappingProxyType({
    "vgg16": "cnn", "vgg19": "cnn", "resnet18": "cnn", "resnet50": "cnn",
    "shufflenet_v2_x1_0": "cnn", "bert": "transformer", "gpt2": "transformer",
    "a2c": "rl", "dqn": "rl",
})

#: Gavel's single-GPU throughput over the V100's, by type and family ("other": the geometric
#: mean of its GPU-bound models), rounded to two places.
MEASURED: Mapping[str, Mapping[str, float]] = MappingProxyType({
    "P100": MappingProxyType({"cnn": 0.63, "transformer": 0.74, "rl": 0.79, "other": 0.71}),
    "K80": MappingProxyType({"cnn": 0.16, "transformer": 0.33, "rl": 0.48, "other": 0.24}),
})

#: Vendor data sheets: FP32 peak (TFLOPS) and memory bandwidth (GB/s) per GPU.
DATA_SHEET: Mapping[str, tuple[float, float]] = MappingProxyType({
    "V100": (15.7, 900.0), "P100": (10.6, 732.0), "K80": (4.37, 240.0),
    "T4": (8.1, 320.0), "A10": (31.2, 600.0), "A30": (10.3, 933.0),
    "A100": (19.5, 1555.0), "L4": (30.3, 300.0), "H100": (67.0, 3350.0),
})
_REFERENCE = DATA_SHEET["V100"]

#: Type names as cluster lists spell them, by the data-sheet part they are.
ALIASES: Mapping[str, str] = MappingProxyType({"V100M16": "V100", "V100M32": "V100"})
ASSUMED = frozenset({"G2", "G3"})  # undisclosed: speed 1 is this project's guess
# the speeds a measurement or an operator may set: from a K80's slowest to well past the
# fastest GPU sold; outside, a broken measurement or a typo
MIN_SPEED, MAX_SPEED = 0.05, 50.0


def data_sheet_speed(gpu_type: str) -> float | None:
    """The roofline bound for a data-sheet type (min of the FP32 and bandwidth ratios)."""
    sheet = DATA_SHEET.get(ALIASES.get(gpu_type, gpu_type))
    if sheet is None:
        return None
    return min(sheet[0] / _REFERENCE[0], sheet[1] / _REFERENCE[1])


def speed(model: str, gpu_type: str) -> float:
    """How fast `gpu_type` runs `model`'s GPU stage, a V100 being 1 (1 where unknown)."""
    part = ALIASES.get(gpu_type, gpu_type)
    measured = MEASURED.get(part)
    if measured is not None:
        return measured[FAMILY.get(model, "other")]
    if part == "V100" or not gpu_type:
        return 1.0
    found = data_sheet_speed(part)
    return 1.0 if found is None else found


def parse_speed(text: str) -> tuple[tuple[str, str], float]:
    """`[MODEL:]TYPE=SPEED` as ((model, "" for every model), type), speed); ValueError with
    the reason."""
    head, sep, value = text.partition("=")
    model, _, kind = head.rpartition(":")
    try:
        number = float(value)
    except ValueError:
        number = float("nan")
    if not sep or not kind.strip() or not MIN_SPEED <= number <= MAX_SPEED:
        raise ValueError(f"must be [MODEL:]TYPE=SPEED with SPEED in [{MIN_SPEED:g}, "
                         f"{MAX_SPEED:g}] (a V100 being 1), got {text!r}")
    return (model.strip(), kind.strip()), number


def missing_types(given, types) -> list[str]:
    """One line per `--gpu-speed` naming a type not among the spec's `types`."""
    stated = sorted(t for t in set(types) if t)
    return [f"--gpu-speed: the spec has no GPU type {kind!r} (it has: "
            f"{', '.join(stated) or 'none stated'})" for (_, kind), _ in given
            if kind not in stated]


def by_family(gpu_type: str) -> dict[str, float]:
    """A type's speed for each model family ("other": a model of no known family)."""
    models: dict[str, str] = {}
    for model, family in FAMILY.items():
        models.setdefault(family, model)
    models["other"] = ""
    return {family: speed(model, gpu_type) for family, model in models.items()}


def source(gpu_type: str) -> str:
    """Where a type's speed comes from, in words (`interlace-spec show` prints it)."""
    part = ALIASES.get(gpu_type, gpu_type)
    if not gpu_type or part == "V100":
        return "reference: the artifact's profiles"
    if part in MEASURED:
        return "Gavel's measurements, per model"
    if part in DATA_SHEET:
        return "data sheets: roofline bound"
    return "assumed: undisclosed type" if gpu_type in ASSUMED else "assumed: unknown type"
