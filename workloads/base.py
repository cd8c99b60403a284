"""The stage interface every torch workload offers the trainer, and the settings they share.

Why one interface: the trainer's stage loop (trainer/stages.py) times and gates `io`, `cpu`,
`gpu` and `net` without knowing what model it trains. A workload splits an iteration into
`load` (io: bytes from disk, or env steps for RL), `prepare` (cpu: decode/augment into
tensors), `compute` (gpu: forward+backward, grads left in the parameters) and `apply`
(optimizer step, after the trainer's gradient all-reduce). Whatever the checkpoint must carry
besides model and optimizer (data cursor, env, replay buffer, target net) goes through
`extra_state`/`load_extra_state`.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import torch

from workloads.data import Throttle, default_data_dir


@dataclass(frozen=True)
class Common:
    """Settings every workload understands; the rest of a config is workload-specific."""

    device: str = "cpu"
    batch_size: int | None = None  # None: the workload's default
    seed: int = 0
    lr: float | None = None  # None: the workload's default
    data_dir: str | None = None
    io_bandwidth: float | None = None  # bytes/s for the io stage; None: unthrottled
    rank: int = 0
    world_size: int = 1

    @staticmethod
    def split(config: dict[str, Any]) -> tuple["Common", dict[str, Any]]:
        names = {f.name for f in fields(Common)}
        common = Common(**{k: v for k, v in config.items() if k in names})
        if common.batch_size is not None and common.batch_size <= 0:
            raise ValueError(f"batch_size must be > 0, got {common.batch_size}")
        if not 0 <= common.rank < common.world_size:
            raise ValueError(f"rank {common.rank} outside world_size {common.world_size}")
        return common, {k: v for k, v in config.items() if k not in names}

    @property
    def data_path(self) -> Path:
        return Path(self.data_dir) if self.data_dir else default_data_dir()

    @property
    def throttle(self) -> Throttle:
        return Throttle(self.io_bandwidth)


def reject_unknown(name: str, extra: dict[str, Any]) -> None:
    if extra:
        raise ValueError(f"workload {name}: unknown settings {sorted(extra)}")


class Workload:
    """Base class: holds model, optimizer and device; subclasses fill in the stages."""

    name: str = "workload"

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                 device: torch.device, common: Common):
        self.model = model
        self.optimizer = optimizer
        self.device = device
        self.common = common

    def load(self, step: int) -> Any:
        raise NotImplementedError

    def prepare(self, raw: Any) -> Any:
        raise NotImplementedError

    def compute(self, batch: Any) -> float:
        raise NotImplementedError

    def apply(self) -> None:
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def extra_state(self) -> dict[str, Any]:
        return {}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        pass

    def step(self, step: int) -> float:
        """One whole iteration without a trainer (tests, single-process use)."""
        loss = self.compute(self.prepare(self.load(step)))
        self.apply()
        return loss


def seeded(seed: int, *parts: int) -> torch.Generator:
    """A CPU generator for one (seed, rank, step, ...) tuple: augmentation that survives resume."""
    g = torch.Generator()
    g.manual_seed(hash_ints(seed, *parts))
    return g


def hash_ints(*parts: int) -> int:
    """A stable 63-bit mix of integers (Python's hash() of tuples is fine but not documented)."""
    h = 0x9E3779B97F4A7C15
    for p in parts:
        h ^= (int(p) + 0x9E3779B97F4A7C15 + (h << 6) + (h >> 2)) & (2**64 - 1)
        h = (h * 0xBF58476D1CE4E5B9) & (2**64 - 1)
    return h >> 1


def torch_device(spec: str | torch.device) -> torch.device:
    """'auto' -> cuda when available, else cpu; anything else as torch spells it."""
    if isinstance(spec, torch.device):
        return spec
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(spec)


def cpu_threads() -> int:
    """Torch intra-op threads from OMP_NUM_THREADS (1 if unset: trainers share the CPUs)."""
    try:
        return max(1, int(os.environ.get("OMP_NUM_THREADS", "1")))
    except ValueError:
        return 1
