"""Training-state checkpoints of torch jobs: model, optimizer, iteration, RNGs, workload state.

Why this exists beside the progress record (trainer/checkpoint/__init__.py): that small JSON
file is the agent's view (how far, done or not); this file holds what a resumed trainer needs to continue *exactly*
where it stopped. Files live in `<checkpoint-dir>/<job>.torch/it-<iteration>.pt`, written as
tmp + fsync + os.replace (+ directory fsync), so a reader sees whole files only; the newest
that loads is the one to resume from, and older ones beyond `keep` are removed. Everything is
stored as tensors and plain Python values so loading can stay `weights_only=True`.
"""
from __future__ import annotations

import os
import random
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trainer.checkpoint import fsync_dir

_NAME = re.compile(r"^it-(\d{12})\.pt$")


def job_dir(directory: str | os.PathLike, job_id: int) -> Path:
    return Path(directory) / f"{int(job_id)}.torch"


def rng_state() -> dict[str, Any]:
    """The torch, numpy, python (and CUDA, when present) random states, as safe values."""
    np_state = np.random.get_state(legacy=False)
    state = {"torch": torch.get_rng_state(),
             "numpy": {"key": torch.from_numpy(np_state["state"]["key"].astype(np.int64)),
                       "pos": int(np_state["state"]["pos"]),
                       "has_gauss": int(np_state["has_gauss"]),
                       "gauss": float(np_state["gauss"])},
             "python": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    np.random.set_state({"bit_generator": "MT19937",
                         "state": {"key": n["key"].numpy().astype(np.uint32), "pos": n["pos"]},
                         "has_gauss": n["has_gauss"], "gauss": n["gauss"]})
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def snapshot(workload: Any, meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a resumed trainer needs of `workload` (and of the process RNGs), as safe values."""
    return {"model": workload.model.state_dict(), "optimizer": workload.optimizer.state_dict(),
            "rng": rng_state(), "workload": workload.extra_state(), "meta": dict(meta or {})}


def write(directory: str | os.PathLike, job_id: int, iteration: int, state: dict[str, Any],
          keep: int = 2) -> Path:
    """Write `state` (a `snapshot`) as the job's state after `iteration` iterations; returns
    the file's path. Files beyond the newest `keep` are removed."""
    folder = job_dir(directory, job_id)
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / f"it-{int(iteration):012d}.pt"
    tmp = folder / f".{final.name}.{os.getpid()}.tmp"
    with open(tmp, "wb") as fh:
        torch.save({"iteration": int(iteration), **state}, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, final)
    fsync_dir(folder)
    for old in _listed(folder)[keep:]:
        old.unlink(missing_ok=True)
    return final


def save(directory: str | os.PathLike, job_id: int, iteration: int, workload: Any,
         meta: dict[str, Any] | None = None, keep: int = 2) -> Path:
    """Write the job's state after `iteration` iterations; returns the file's path."""
    return write(directory, job_id, iteration, snapshot(workload, meta), keep)


def _listed(folder: Path) -> list[Path]:
    """Checkpoint files, newest (highest iteration) first."""
    if not folder.is_dir():
        return []
    found = [p for p in folder.iterdir() if _NAME.match(p.name)]
    return sorted(found, key=lambda p: int(_NAME.match(p.name).group(1)), reverse=True)


def latest(directory: str | os.PathLike, job_id: int) -> tuple[int, Path] | None:
    """(iteration, path) of the newest checkpoint file, or None."""
    files = _listed(job_dir(directory, job_id))
    if not files:
        return None
    return int(_NAME.match(files[0].name).group(1)), files[0]


def path_for(directory: str | os.PathLike, job_id: int, iteration: int) -> Path:
    return job_dir(directory, job_id) / f"it-{int(iteration):012d}.pt"


def read(path: str | os.PathLike) -> dict[str, Any]:
    return torch.load(path, map_location="cpu", weights_only=True)


def apply(state: dict[str, Any], workload: Any, rng: bool = True) -> None:
    """Put a read checkpoint into `workload` (and the process RNGs)."""
    workload.model.load_state_dict(state["model"])
    workload.optimizer.load_state_dict(state["optimizer"])
    workload.load_extra_state(state["workload"])
    if rng:
        set_rng_state(state["rng"])


def restore(path: str | os.PathLike, workload: Any, rng: bool = True) -> dict[str, Any]:
    """Load a checkpoint into `workload` (and the process RNGs); returns its contents."""
    state = read(path)
    apply(state, workload, rng)
    return state
