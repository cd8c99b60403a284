"""Job checkpoints: one small JSON file per job (how far it got), written atomically.

The one checkpoint package of the project: this progress record, which the emulated and torch
trainers write and the agent and scheduler read, and `torch_state` (the torch trainer's full
training state, next to it on disk).

A checkpoint is the only state that survives a trainer, its agent or its node, so it is
written as tmp file + fsync + rename (+ directory fsync): a reader sees either the old or the
new file, never half of one. The trainer writes it; the agent reads it to answer `job.stop`
and fill heartbeats; the scheduler service may read a dead node's checkpoints to requeue its
jobs from the right iteration. Dependency-free on purpose (the trainer imports it at start).
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class Checkpoint:
    """What a job has done: `iterations` may be fractional (emulated trainers advance smoothly)."""

    job_id: int
    iterations: float
    total: float
    node: str = ""
    done: bool = False
    ts: float = 0.0


def path_for(directory: str | os.PathLike, job_id: int) -> Path:
    return Path(directory) / f"{int(job_id)}.json"


def write(directory: str | os.PathLike, ckpt: Checkpoint) -> Path:
    """Atomically replace the job's checkpoint file; returns its path."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    final = path_for(directory, ckpt.job_id)
    tmp = directory / f".{ckpt.job_id}.{os.getpid()}.tmp"
    data = asdict(ckpt)
    if not data["ts"]:
        data["ts"] = time.time()
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, final)
    fsync_dir(directory)
    return final


def fsync_dir(directory: str | os.PathLike) -> None:
    """Make a rename in `directory` durable; not every filesystem allows fsync on one."""
    try:
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass


def read(directory: str | os.PathLike, job_id: int) -> Checkpoint | None:
    """The job's checkpoint, or None when there is none or it cannot be understood."""
    try:
        with open(path_for(directory, job_id), encoding="utf-8") as fh:
            raw = json.load(fh)
        return Checkpoint(job_id=int(raw["job_id"]), iterations=float(raw["iterations"]),
                          total=float(raw.get("total", 0.0)), node=str(raw.get("node", "")),
                          done=bool(raw.get("done", False)), ts=float(raw.get("ts", 0.0)))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def iterations(directory: str | os.PathLike, job_id: int) -> float:
    """Iterations done according to the checkpoint; 0.0 without one."""
    ckpt = read(directory, job_id)
    return ckpt.iterations if ckpt is not None else 0.0
