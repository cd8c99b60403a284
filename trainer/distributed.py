"""torch.distributed for one job's ranks: setup, gradient averaging, agreeing on small facts.

Why a module of its own: the stage loop's `net` stage must all-reduce gradients without
knowing about process groups, and the trainer must agree across ranks on when to stop and
where to resume, or one rank would wait forever in a collective the others left. Gradients
are flattened into one buffer per dtype (few large collectives beat many small ones), and the
stop vote rides in the float buffer as one extra element, so agreeing on a stop costs nothing.
"""
from __future__ import annotations

import datetime
import socket
from typing import Any

import torch
import torch.distributed as dist


def backend_for(device: torch.device) -> str:
    return "nccl" if device.type == "cuda" else "gloo"


def init(master_addr: str, master_port: int, world_size: int, rank: int,
         backend: str = "auto", timeout: float = 120.0,
         device: torch.device | None = None) -> str:
    """Join the job's process group over TCP; returns the backend used."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} outside world_size {world_size}")
    device = device or torch.device("cpu")
    if backend == "auto":
        backend = backend_for(device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend=backend, init_method=f"tcp://{master_addr}:{master_port}",
                            world_size=world_size, rank=rank,
                            timeout=datetime.timedelta(seconds=timeout))
    return backend


def shutdown(clean: bool = True) -> None:
    """Leave the process group; after a clean end, only once every rank has arrived.

    The barrier keeps a rank from tearing down its connections while a peer is still in the
    last collective (CI once saw a rank abort around here, "terminate called without an
    active exception"; the cause is not pinned down). After an error the barrier is skipped:
    a peer may never arrive.
    """
    if not (dist.is_available() and dist.is_initialized()):
        return
    if clean:
        dist.barrier()
    dist.destroy_process_group()


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free right now on `host` (for tests and single-node launches)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class GradientReducer:
    """Averages the gradients of `workload.model` over all ranks; returns the agreed stop.

    A parameter without a gradient gets zeros first, so every rank flattens the same layout.
    """

    def __init__(self, world_size: int):
        self.world_size = world_size

    def __call__(self, workload: Any, stop_vote: bool) -> bool:
        params = [p for p in workload.model.parameters() if p.requires_grad]
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
        for p in params:
            by_dtype.setdefault(p.grad.dtype, []).append(p.grad)
        stop = False
        vote_added = False
        for dtype, grads in by_dtype.items():
            flat = torch.cat([g.reshape(-1) for g in grads])
            carry_vote = not vote_added and dtype.is_floating_point
            if carry_vote:
                vote = torch.tensor([1.0 if stop_vote else 0.0], dtype=dtype, device=flat.device)
                flat = torch.cat([flat, vote])
            dist.all_reduce(flat, op=dist.ReduceOp.SUM)
            if carry_vote:
                stop, flat, vote_added = bool(flat[-1].item() > 0), flat[:-1], True
            flat /= self.world_size
            offset = 0
            for g in grads:
                n = g.numel()
                g.copy_(flat[offset:offset + n].view_as(g))
                offset += n
        if not vote_added:  # no float gradients at all: vote on its own
            stop = agree_any(stop_vote, params[0].device if params else torch.device("cpu"))
        return stop


def agree_any(flag: bool, device: torch.device) -> bool:
    """True on every rank when any rank passed True."""
    t = torch.tensor([1 if flag else 0], dtype=torch.int64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def broadcast_int(value: int, device: torch.device, src: int = 0) -> int:
    """Rank `src`'s value on every rank (e.g. the checkpoint iteration to resume from)."""
    t = torch.tensor([int(value)], dtype=torch.int64, device=device)
    dist.broadcast(t, src=src)
    return int(t.item())


def broadcast_model(model: torch.nn.Module, src: int = 0) -> None:
    """Give every rank rank `src`'s parameters and buffers (same start, as DDP does)."""
    with torch.no_grad():
        for t in list(model.parameters()) + list(model.buffers()):
            dist.broadcast(t.data, src=src)
