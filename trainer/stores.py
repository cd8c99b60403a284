"""Where a job's training state goes: the stores `trainer.api.Job` saves into and resumes from.

Why apart from the progress record (trainer/checkpoint): that record says how far a job got
and is read by the agent and the scheduler; a store holds what the job itself needs to go on
exactly (a model, an optimizer, RNGs), in whatever form its trainer keeps. A store is
`latest()` (the newest iteration it holds, or None), `load(iteration)` and
`save(iteration, state)`; every write is whole (tmp + fsync + rename), so the newest file is
always a complete one. A job without a store keeps no state beyond its progress record (the
emulated trainer: its progress is all there is).
"""
from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any, Protocol

from trainer import checkpoint

KEEP = 2  # the newest states kept; older ones are removed


class Store(Protocol):
    def latest(self) -> int | None: ...

    def load(self, iteration: int) -> Any: ...

    def save(self, iteration: int, state: Any) -> None: ...


class FileStore:
    """A user's state, any picklable object (torch objects welcome), as DIR/ckpt-N.pt."""

    def __init__(self, directory: str | os.PathLike, keep: int = KEEP):
        self.directory = Path(directory)
        self.keep = keep

    def latest(self) -> int | None:
        saved = self._saved()
        return saved[-1][0] if saved else None

    def load(self, iteration: int) -> Any:
        with open(self._path(iteration), "rb") as fh:
            return _load(fh)

    def save(self, iteration: int, state: Any) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        final = self._path(iteration)
        tmp = final.with_suffix(f".{os.getpid()}.tmp")
        with open(tmp, "wb") as fh:
            _dump(state, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, final)
        checkpoint.fsync_dir(self.directory)
        for _, old in self._saved()[:-self.keep]:
            old.unlink(missing_ok=True)

    def _path(self, iteration: int) -> Path:
        return self.directory / f"ckpt-{int(iteration)}.pt"

    def _saved(self) -> list[tuple[int, Path]]:
        found = []
        for path in self.directory.glob("ckpt-*.pt"):
            step = path.stem.split("-", 1)[1]
            if step.isdigit():
                found.append((int(step), path))
        return sorted(found)


class TorchStore:
    """The torch trainer's state (trainer/checkpoint/torch_state.py: DIR/<job>.torch/it-N.pt),
    loaded with weights_only; torch is imported only when it is used."""

    def __init__(self, directory: str | os.PathLike, job_id: int, keep: int = KEEP):
        self.directory, self.job_id, self.keep = Path(directory), int(job_id), keep

    def latest(self) -> int | None:
        from trainer.checkpoint import torch_state

        found = torch_state.latest(self.directory, self.job_id)
        return found[0] if found else None

    def load(self, iteration: int) -> Any:
        from trainer.checkpoint import torch_state

        return torch_state.read(self.path(iteration))

    def save(self, iteration: int, state: Any) -> None:
        from trainer.checkpoint import torch_state

        torch_state.write(self.directory, self.job_id, iteration, state, self.keep)

    def path(self, iteration: int) -> Path:
        from trainer.checkpoint import torch_state

        return torch_state.path_for(self.directory, self.job_id, iteration)


def _dump(state: Any, fh: Any) -> None:
    try:
        import torch
    except ImportError:
        pickle.dump(state, fh)
        return
    torch.save(state, fh)


def _load(fh: Any) -> Any:
    try:
        import torch
    except ImportError:
        return pickle.load(fh)
    return torch.load(fh, weights_only=False)
