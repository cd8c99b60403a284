"""The torch path of `python -m trainer.run`: train a real workload through the stage loop.

Why a separate module: trainer/run.py must start fast for emulated jobs, so torch is imported
only here, and only when a real workload is asked for. The contract with the agent is the
same as the emulated path's (exit 0 finished, 3 stopped with a checkpoint, else a crash; the
JSON checkpoint of trainer/checkpoint says how far the job got), plus a torch checkpoint
(trainer/checkpoint/torch_state.py) to resume the training state exactly. In a multi-rank job every
rank votes on stopping inside the gradient all-reduce, so all ranks stop after the same
iteration, and only rank 0 writes checkpoints and publishes telemetry.

The restart overhead (process start to the end of the first iteration after launch, which
includes interpreter start, imports, data preparation, process-group setup and warm-up) is
logged as `trainer_first_iteration` and kept in the torch checkpoint's meta.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import time
from typing import Any

from trainer import checkpoint
from trainer.exits import EXIT_FINISHED, EXIT_STOPPED
from trainer.stopflag import StopFlag
from trainer.telemetry import Telemetry, logger

OVERHEAD_HISTORY = 20  # restart overheads remembered in the checkpoint meta


def process_started() -> float:
    """The time.monotonic() value at which this process started (Linux /proc; else now)."""
    try:
        with open("/proc/self/stat", encoding="ascii") as fh:
            after_name = fh.read().rsplit(")", 1)[1].split()
        start_ticks = int(after_name[19])  # field 22 of stat; fields after ")" start at 3
        with open("/proc/uptime", encoding="ascii") as fh:
            uptime = float(fh.read().split()[0])
        age = uptime - start_ticks / os.sysconf("SC_CLK_TCK")
        return time.monotonic() - max(0.0, age)
    except (OSError, ValueError, IndexError):
        return time.monotonic()


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


def make_gate(endpoint: str | None, job_id: int) -> Any:
    from trainer.gate_client import NullGate

    if not endpoint:
        return NullGate()
    from trainer.gate_client import GateClient  # the ZeroMQ gate client (node agent side)

    return GateClient(endpoint, job_id)


def run(args: argparse.Namespace, stop: StopFlag, parent: int, book: Any) -> int:
    """Train `args.workload` to `args.iterations`; returns the exit status. `book`: this
    process's ledger (trainer/ledger.py; the caller writes its end record)."""
    started = process_started()
    log = logger(args).bind(workload=args.workload, rank=args.rank)
    import torch

    from trainer import distributed
    from trainer.checkpoint import torch_state as torch_checkpoint
    from trainer.stages import StageLoop, TimingWindow, local_reduce
    from workloads import registry
    from workloads.base import cpu_threads

    torch.set_num_threads(cpu_threads())
    total = int(math.ceil(args.iterations))
    rank, world = args.rank, args.world_size
    writer = rank == 0
    saved = checkpoint.read(args.checkpoint_dir, args.job_id)
    if saved is not None and saved.done and saved.iterations >= total:
        book.start(saved.iterations, args.iterations)
        log.info("trainer_finished", iterations=saved.iterations, already=True)
        return EXIT_FINISHED

    device = pick_device(args.device, rank)
    if world > 1:
        distributed.init(args.master_addr, args.master_port, world, rank,
                         timeout=args.dist_timeout, device=device)
    telemetry = Telemetry(args.endpoints if writer else None, args.job_id, log,
                          client_key=getattr(args, "client_key", None))
    gate = make_gate(args.gate, args.job_id)
    failed = False
    try:
        config = json.loads(args.workload_config) if args.workload_config else {}
        workload = registry.make(args.workload, device=str(device), batch_size=args.batch_size,
                                 seed=args.seed, data_dir=args.data_dir,
                                 io_bandwidth=args.io_bandwidth, rank=rank, world_size=world,
                                 **config)
        start, overheads = _resume(args, workload, device, log, torch_checkpoint, distributed)
        if start < args.start_iteration:
            log.warning("start_iteration_ignored", start_iteration=args.start_iteration,
                        checkpoint=start, reason="training state exists only up to the checkpoint")
        book.start(start, args.iterations)
        log.info("trainer_start", start=start, total=total, device=str(device), world_size=world,
                 from_checkpoint=start > 0, pid=os.getpid())

        def save(step: int, done: bool) -> None:
            if not writer:
                return
            book.checkpoint(step)  # before the checkpoint is durable (trainer/ledger.py)
            torch_checkpoint.save(args.checkpoint_dir, args.job_id, step, workload,
                                  meta={"node": args.node, "restart_overheads": overheads})
            checkpoint.write(args.checkpoint_dir, checkpoint.Checkpoint(
                job_id=args.job_id, iterations=float(step), total=float(args.iterations),
                node=args.node, done=done))

        reduce = distributed.GradientReducer(world) if world > 1 else local_reduce
        loop, window = StageLoop(workload, gate, reduce), TimingWindow()
        step, measured = start, False
        next_report = time.monotonic() + args.report_every
        if world == 1 and start < total and stop.is_set():
            save(step, done=False)
            log.info("trainer_stopped", iterations=step, orphaned=False)
            return EXIT_STOPPED
        while step < total:
            orphaned = os.getppid() != parent
            it = loop.run(step, stop_vote=stop.is_set() or orphaned)
            step += 1
            if not math.isfinite(it.loss):
                raise FloatingPointError(f"loss is {it.loss} at iteration {step}")
            if measured:  # the first iteration after a launch is start-up, not the pace
                window.add(it.stages, it.iteration_time)
            else:
                measured = True
                overheads.append(time.monotonic() - started)
                del overheads[:-OVERHEAD_HISTORY]
                log.info("trainer_first_iteration", restart_overhead_s=overheads[-1],
                         iteration=step, resumed=start > 0)
            if step >= total:
                break
            if it.stop:
                save(step, done=False)
                _publish(telemetry, step, window, args.time_scale,
                         overheads[-1] if overheads else None)
                log.info("trainer_stopped", iterations=step, orphaned=orphaned)
                return EXIT_STOPPED
            if args.checkpoint_every and step % args.checkpoint_every == 0:
                save(step, done=False)
            if time.monotonic() >= next_report:
                _publish(telemetry, step, window, args.time_scale,
                         overheads[-1] if overheads else None)
                next_report = time.monotonic() + args.report_every
        save(step, done=True)
        log.info("trainer_finished", iterations=step, timing=window.summary(),
                 params_digest=params_digest(workload.model))
        _publish(telemetry, step, window, args.time_scale, overheads[-1] if overheads else None)
        return EXIT_FINISHED
    except BaseException:
        failed = True
        raise
    finally:
        telemetry.close()
        close = getattr(gate, "close", None)
        if close is not None:
            close()
        if world > 1:
            distributed.shutdown(clean=not failed)


def _resume(args: argparse.Namespace, workload: Any, device: Any, log: Any, ckpt: Any,
            distributed: Any) -> tuple[int, list[float]]:
    """Restore the newest checkpoint (rank 0 chooses, all ranks load it); (iteration, overheads)."""
    found = ckpt.latest(args.checkpoint_dir, args.job_id) if args.rank == 0 else None
    start = found[0] if found else 0
    if args.world_size > 1:
        start = distributed.broadcast_int(start, device)
    if start == 0:
        if args.world_size > 1:
            distributed.broadcast_model(workload.model)
        return 0, []
    path = ckpt.path_for(args.checkpoint_dir, args.job_id, start)
    state = ckpt.restore(path, workload)
    log.info("trainer_resumed", iteration=start, path=str(path))
    return start, list(state["meta"].get("restart_overheads", []))


def params_digest(model: Any) -> str:
    """A short hash of every parameter: ranks of one job must end with the same one."""
    import hashlib

    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def _publish(telemetry: Any, iterations: int, window: Any, scale: float = 1.0,
             overhead: float | None = None) -> None:
    """Timing in trace seconds (wall x time scale), the unit of the planner's profiles."""
    if window.iterations == 0:
        return
    s = window.summary()
    telemetry.publish(float(iterations), {k: v * scale for k, v in s["stages"].items()},
                      s["iteration_time"] * scale,
                      restart_overhead=None if overhead is None else overhead * scale)
    window.reset()
