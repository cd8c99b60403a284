"""The torch path of `python -m trainer.run`: train a real workload through the packaged loop.

Why a separate module: trainer/run.py must start fast for emulated jobs, so torch is imported
only here, and only when a real workload is asked for. The contract with the agent is the
emulated path's, since both are clients of trainer/api.py's Job and run trainer/loop.py: exit
0 finished, 3 stopped with a checkpoint, else a crash; the JSON progress record of
trainer/checkpoint says how far the job got, and the training state (the Job's store,
trainer/checkpoint/torch_state.py) lets a relaunch go on exactly. What is torch's own is
here: the device, the process group of a multi-rank job (ranks agree on where to resume by a
broadcast and vote on stopping inside the gradient all-reduce, so all ranks stop after the
same iteration; only rank 0 writes checkpoints and publishes telemetry), and the state.

The restart overhead (process start to the end of the first iteration after launch, which
includes interpreter start, imports, data preparation, process-group setup and warm-up) is
measured by the Job, logged as `trainer_first_iteration`, reported with the stage times and
kept, with the earlier launches', in the training state's meta.
"""
from __future__ import annotations

import argparse
import json
import math
import os
from typing import Any

from trainer.api import Job
from trainer.exits import EXIT_OOM

OVERHEAD_HISTORY = 20  # restart overheads remembered in the checkpoint meta


def pick_device(spec: str, rank: int) -> Any:
    """auto/cpu/cuda -> a torch.device; CUDA ranks use LOCAL_RANK (else rank) modulo the GPUs."""
    import torch

    if spec == "auto":
        spec = "cuda" if torch.cuda.is_available() else "cpu"
    if spec == "cuda":
        if not torch.cuda.is_available():
            raise ValueError("--device cuda but CUDA is not available")
        local = int(os.environ.get("LOCAL_RANK", rank))
        return torch.device("cuda", local % torch.cuda.device_count())
    return torch.device(spec)


def run(args: argparse.Namespace, job: Job, log: Any) -> int:
    """Train `args.workload` to `args.iterations` as `job`; returns the exit status."""
    import torch

    from trainer import distributed
    from trainer.checkpoint import torch_state
    from trainer.loop import train
    from trainer.stages import local_reduce, make_clock
    from workloads import registry
    from workloads.base import cpu_threads

    torch.set_num_threads(cpu_threads())
    rank, world = args.rank, args.world_size
    device = pick_device(args.device, rank)
    if world > 1:
        distributed.init(args.master_addr, args.master_port, world, rank,
                         timeout=args.dist_timeout, device=device)
    failed = False
    if device.type == "cuda":  # the peak the allocator held: what a co-located job must leave
        job.gpu_memory = lambda: torch.cuda.max_memory_reserved(device) / 2**30
    try:
        job.clock = make_clock(device)
        config = json.loads(args.workload_config) if args.workload_config else {}
        workload = registry.make(args.workload, device=str(device), batch_size=args.batch_size,
                                 seed=args.seed, data_dir=args.data_dir,
                                 io_bandwidth=args.io_bandwidth, rank=rank, world_size=world,
                                 **config)
        agree = (lambda it: distributed.broadcast_int(it, device)) if world > 1 else None
        start, saved = job.resume(agree)  # rank 0 chooses, every rank loads it
        history: list[float] = []
        if saved is not None:
            torch_state.apply(saved, workload)
            history = list(saved["meta"].get("restart_overheads", []))
            log.info("trainer_resumed", iteration=start,
                     path=str(torch_state.path_for(args.checkpoint_dir, args.job_id, start)))
        elif world > 1:
            distributed.broadcast_model(workload.model)
        if start < args.start_iteration:
            log.warning("start_iteration_ignored", start_iteration=args.start_iteration,
                        checkpoint=start, reason="training state exists only up to the checkpoint")
        log.info("trainer_start", start=start, total=math.ceil(args.iterations),
                 device=str(device), world_size=world, from_checkpoint=start > 0, pid=os.getpid())

        def state() -> dict:
            measured = job.restart_overhead  # this launch's, once its first iteration ended
            overheads = history + ([] if measured is None else [measured])
            return torch_state.snapshot(workload, meta={
                "node": args.node, "restart_overheads": overheads[-OVERHEAD_HISTORY:]})

        if args.checkpoint_every:
            job.autosave(state, every=args.checkpoint_every)
        reduce = distributed.GradientReducer(world) if world > 1 else local_reduce
        return train(job, workload, math.ceil(args.iterations), log, state=state, reduce=reduce,
                     finished=lambda: {"timing": job.timing(),
                                       "params_digest": params_digest(workload.model)})
    except torch.cuda.OutOfMemoryError as err:  # a distinct exit: the job then runs alone
        failed = True
        log.error("trainer_out_of_gpu_memory", error=str(err)[:300])
        return EXIT_OOM
    except BaseException:
        failed = True
        raise
    finally:
        if world > 1:
            distributed.shutdown(clean=not failed)


def params_digest(model: Any) -> str:
    """A short hash of every parameter: ranks of one job must end with the same one."""
    import hashlib

    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]
