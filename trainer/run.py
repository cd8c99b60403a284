"""Run one job: `python -m trainer.run --job-id N --node NAME ...` (launched by the node agent).

The trainer owns one job's progress. It is a client of the public trainer API
(trainer/api.py's `Job`, built here from the command line instead of INTERLACE_* variables)
and runs the one packaged loop (trainer/loop.py): it resumes, runs the workload's stages,
publishes progress and stage timings, checkpoints periodically and on SIGTERM/SIGINT, and
says how it ended through its exit status, which is the contract with the agent:

* 0 (EXIT_FINISHED): all iterations done, final checkpoint written (done=true);
* 3 (EXIT_STOPPED): stopped on request (or orphaned), checkpoint written, work remains;
* anything else: a crash; the last periodic checkpoint is the best the agent can report.

`--workload emulated` (the default) runs a workload whose stages sleep for their profiled
times (workloads/emulated.py) and never imports torch, so that startup stays fast; any other
workload name (workloads/registry.py) trains a real model through trainer/torch_run.py,
imported only then.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from trainer.api import Job, Setup, process_started
from trainer.ledger import ledger_path
from trainer.loop import train
from trainer.pace import PaceReader
from trainer.stopflag import StopFlag, stop_on_signals
from trainer.stores import TorchStore
from trainer.telemetry import logger
from workloads import registry
from workloads.emulated import EmulatedSpec, EmulatedWorkload

# Test knob, never set in production: wall seconds an emulated trainer takes to write its
# checkpoint after a stop signal, standing in for a model slow to checkpoint.
TEST_SLOW_STOP_ENV = "INTERLACE_TEST_SLOW_STOP_S"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m trainer.run", description=__doc__.split("\n")[0])
    p.add_argument("--job-id", type=int, required=True)
    p.add_argument("--node", required=True, help="node name (recorded in the checkpoint)")
    p.add_argument("--endpoints", default=None,
                   help="broker endpoints file; without it nothing is published")
    p.add_argument("--client-key", default=os.environ.get("INTERLACE_CLIENT_KEY") or None,
                   metavar="FILE", help="CURVE secret certificate for a keyed broker "
                                        "(default $INTERLACE_CLIENT_KEY)")
    p.add_argument("--checkpoint-dir", required=True)
    p.add_argument("--iterations", type=float, required=True, help="total iterations of the job")
    p.add_argument("--iteration-time", type=float, default=None,
                   help="emulated: trace seconds per iteration (the group's iteration time, "
                        "from the scheduler); required for the emulated workload")
    p.add_argument("--stages", type=_floats, default=None,
                   help="emulated: data,gpu,net stage times in trace seconds (reported in "
                        "timing events); required for the emulated workload")
    p.add_argument("--time-scale", type=float, default=1.0, help="trace seconds per wall second")
    p.add_argument("--report-every", type=float, default=0.2,
                   help="wall seconds between progress/timing events and checkpoints")
    p.add_argument("--start-iteration", type=float, default=0.0,
                   help="iterations already done per the scheduler; the checkpoint wins if ahead")
    p.add_argument("--run-dir", default=None, help="write JSON logs to RUN_DIR/trainer-<job>.log")
    p.add_argument("--lease-file", default=None,
                   help="the agent's lease (node_agent/lease.py): stop once it has run out")
    p.add_argument("--pace-file", default=None,
                   help="emulated: a file the agent replaces with a new iteration time when the "
                        "job is regrouped on its GPUs (trainer/pace.py); read between chunks")
    p.add_argument("--gpu-mem", type=float, default=0.0, metavar="GB",
                   help="GPU memory the job declared (GB per GPU): reported as it is by the "
                        "emulated trainer, until a torch trainer on CUDA measures its own")
    p.add_argument("--workload", default="emulated", choices=registry.NAMES)
    t = p.add_argument_group("real (torch) workloads")
    t.add_argument("--workload-config", default=None,
                   help="JSON object of workload settings, e.g. '{\"input_size\": 32}'")
    t.add_argument("--rank", type=int, default=0)
    t.add_argument("--world-size", type=int, default=1)
    t.add_argument("--master-addr", default="127.0.0.1")
    t.add_argument("--master-port", type=int, default=29500)
    t.add_argument("--dist-timeout", type=float, default=120.0,
                   help="seconds a collective may wait for the other ranks")
    t.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    t.add_argument("--gate", default=None, help="stage gate endpoint; without it no gating")
    t.add_argument("--checkpoint-every", type=int, default=50,
                   help="iterations between periodic checkpoints (0: only on stop and finish)")
    t.add_argument("--batch-size", type=int, default=None, help="per rank; default: workload's")
    t.add_argument("--data-dir", default=None,
                   help="dataset directory (default $INTERLACE_DATA or ~/.cache/interlace/data)")
    t.add_argument("--io-bandwidth", type=float, default=None,
                   help="bytes/s the io stage may read (stands in for remote storage)")
    t.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if not args.report_every > 0:
        p.error("--report-every must be > 0")
    if args.workload == "emulated" and (args.iteration_time is None or args.stages is None):
        p.error("the emulated workload needs --iteration-time and --stages")
    if not 0 <= args.rank < args.world_size:
        p.error(f"--rank {args.rank} must be in [0, --world-size {args.world_size})")
    if args.checkpoint_every < 0:
        p.error("--checkpoint-every must be >= 0")
    return args


def _floats(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in text.split(",") if x.strip() != "")
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a comma-separated list of numbers: {text!r}") from None


def run(args: argparse.Namespace, stop: StopFlag, parent: int) -> int:
    """The trainer's main loop; returns the exit status (see the module docstring).

    `stop` is set by SIGTERM/SIGINT; `parent` is the pid whose disappearance means orphaned.
    The job's ledger end record is written when the `with job:` block ends: with the exit
    status's outcome, or as crashed when an exception ends it.
    """
    log = logger(args)
    if args.workload != "emulated":
        log = log.bind(workload=args.workload, rank=args.rank)
    with job_for(args, stop, parent, log) as job:
        if job.finished():  # a relaunch of a finished job trains nothing
            rc = job.exit_finished()
            log.info("trainer_finished", iterations=job.position, already=True)
            return rc
        if args.workload != "emulated":
            from trainer import torch_run  # torch only for real workloads

            return torch_run.run(args, job, log)
        return _run_emulated(args, job, log)


def job_for(args: argparse.Namespace, stop: StopFlag, parent: int, log: Any) -> Job:
    """The Job of `python -m trainer.run ARGS`: its progress record in --checkpoint-dir, its
    ledger RUN_DIR/ledger/<node>.jsonl (none without --run-dir), the ranks of one launch
    sharing its rendezvous (address:port); a torch job keeps its training state and
    measures its restart overhead, an emulated one keeps no state beyond its progress."""
    torch = args.workload != "emulated"
    setup = Setup(
        job_id=args.job_id, managed=True, rank=args.rank, world_size=args.world_size,
        iterations=float(args.iterations), start_iteration=args.start_iteration,
        node=args.node, time_scale=args.time_scale, checkpoint_dir=Path(args.checkpoint_dir),
        progress_dir=Path(args.checkpoint_dir), gate=args.gate, endpoints=args.endpoints,
        client_key=args.client_key,
        ledger=ledger_path(args.run_dir, args.node) if args.run_dir else None,
        launch=f"{args.master_addr}:{args.master_port}" if args.world_size > 1 else "",
        gpu_mem_gb=max(0.0, args.gpu_mem),
        lease=Path(args.lease_file) if args.lease_file else None)
    return Job(setup=setup, store=TorchStore(args.checkpoint_dir, args.job_id) if torch else None,
               stop=stop, parent=parent, report_every=args.report_every, handle_sigterm=False,
               started=process_started() if torch else None, log=log)


def _run_emulated(args: argparse.Namespace, job: Job, log: Any) -> int:
    spec = EmulatedSpec(total=args.iterations, iteration_time=args.iteration_time,
                        stages=args.stages, time_scale=args.time_scale)
    pace = PaceReader(args.pace_file)  # looked at between sleeps, the first before any progress
    start, _ = job.resume()  # its progress record, or the scheduler's count when ahead
    job.profile = spec  # its stage times are its profile: reported, not measured

    def between(position: float) -> bool:
        latest = pace.changed()
        if latest is not None and latest != workload.spec.iteration_time:
            workload.repace(latest)  # regrouped in place: from where it is, at the new pace
            job.profile = workload.spec
            log.info("trainer_repaced", iterations=workload.run.start, iteration_time=latest)
        job.at(position)
        return job.should_stop()

    workload = EmulatedWorkload(spec, start, between)
    job.autosave(lambda: None, seconds=args.report_every)  # its progress is all it keeps
    log.info("trainer_start", start=start, total=spec.total, from_checkpoint=start > 0,
             wall_per_iteration=spec.wall_per_iteration, pid=os.getpid())
    return train(job, workload, spec.total, log, position=workload.position,
                 before_stop=_slow_stop_for_tests)


def _slow_stop_for_tests() -> None:
    """The TEST_SLOW_STOP_ENV knob: hold the stop checkpoint that long (0 or unset: none)."""
    try:
        delay = float(os.environ.get(TEST_SLOW_STOP_ENV) or 0.0)
    except ValueError:
        delay = 0.0
    if delay > 0:
        time.sleep(delay)  # the simulated checkpoint write itself, not a synchronisation


ORPHANED = -1  # a parent pid no process has: the trainer is orphaned from its start


def launcher() -> int:
    """The pid whose disappearance means orphaned: our parent, unless it is already gone.

    A launcher (the agent) that dies before this first look leaves us adopted by init, and
    a parent that never changes again would hide the orphaning for good: the trainer would
    train on, unowned, while its job is relaunched elsewhere. So init as the parent means
    orphaned, unless init is itself a node agent (an agent as a container's entrypoint).
    A subreaper other than init (systemd --user, tini -s) still hides it: not detected.
    """
    parent = os.getppid()
    if parent != 1:
        return parent
    try:
        with open("/proc/1/cmdline", "rb") as fh:
            if b"node_agent.agent" in fh.read():
                return parent
    except OSError:
        pass
    return ORPHANED


def main(argv: Sequence[str] | None = None) -> int:
    # handlers first: a stop that arrives while we start still ends in a checkpoint
    stop = stop_on_signals()
    parent = launcher()
    args = parse_args(argv)
    try:
        return run(args, stop, parent)
    except ValueError as err:  # a bad workload spec: say so and fail like a crash would
        print(f"trainer: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
