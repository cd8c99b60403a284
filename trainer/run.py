"""Run one job: `python -m trainer.run --job-id N --node NAME ...` (launched by the node agent).

The trainer owns one job's progress. It resumes from its checkpoint, advances the workload,
publishes progress and stage timings as telemetry, checkpoints every report interval and on
SIGTERM/SIGINT, and says how it ended through its exit status, which is the contract with the
agent:

* 0 (EXIT_FINISHED): all iterations done, final checkpoint written (done=true);
* 3 (EXIT_STOPPED): stopped on request (or orphaned), checkpoint written, work remains;
* anything else: a crash; the last periodic checkpoint is the best the agent can report.

`--workload emulated` (the default) holds each stage for its profiled time and never imports
torch, so that startup stays fast; any other workload name (workloads/registry.py) trains a
real model through trainer/torch_run.py, imported only then.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from typing import Sequence

from trainer import checkpoint
from trainer.exits import EXIT_FINISHED, EXIT_STOPPED, EXIT_USAGE  # noqa: F401  (the contract)
from trainer.ledger import Ledger, how_from_exit
from trainer.pace import PaceReader
from trainer.stopflag import StopFlag, stop_on_signals
from trainer.telemetry import Telemetry, logger
from workloads import registry
from workloads.emulated import EmulatedRun, EmulatedSpec

CHUNK_WALL_S = 0.02  # how often the loop looks at signals and its parent
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
    p.add_argument("--pace-file", default=None,
                   help="emulated: a file the agent replaces with a new iteration time when the "
                        "job is regrouped on its GPUs (trainer/pace.py); read between chunks")
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
    Both workloads keep this process's ledger (trainer/ledger.py); its end record is written
    here, for either, once the exit status (or the exception) is known.
    """
    book = Ledger.for_trainer(args)
    try:
        if args.workload != "emulated":
            from trainer import torch_run  # torch only for real workloads

            rc = torch_run.run(args, stop, parent, book)
        else:
            rc = _run_emulated(args, stop, parent, book)
    except BaseException as err:
        book.end("crashed", error=repr(err)[:200])
        raise
    book.end(how_from_exit(rc))
    return rc


def _run_emulated(args: argparse.Namespace, stop: StopFlag, parent: int,
                  book: Ledger) -> int:
    log = logger(args)

    spec = EmulatedSpec(total=args.iterations, iteration_time=args.iteration_time,
                        stages=args.stages, time_scale=args.time_scale)
    pace = PaceReader(args.pace_file)  # looked at every chunk, the first before any progress
    saved = checkpoint.read(args.checkpoint_dir, args.job_id)
    start = max(saved.iterations if saved else 0.0, args.start_iteration)
    emu = EmulatedRun(spec, start=start, t0=time.monotonic())
    book.start(start, spec.total)
    telemetry = Telemetry(args.endpoints, args.job_id, log, client_key=args.client_key)
    log.info("trainer_start", start=emu.start, total=spec.total, from_checkpoint=bool(saved),
             wall_per_iteration=spec.wall_per_iteration, pid=os.getpid())

    def save(done: bool) -> float:
        its = emu.spec.total if done else emu.iterations(time.monotonic())
        book.checkpoint(its)  # before the checkpoint is durable (trainer/ledger.py)
        checkpoint.write(args.checkpoint_dir, checkpoint.Checkpoint(
            job_id=args.job_id, iterations=its, total=emu.spec.total, node=args.node, done=done))
        telemetry.report(its, emu.spec)
        return its

    try:
        save(done=False)
        next_report = time.monotonic() + args.report_every
        while True:
            now = time.monotonic()
            latest = pace.changed()
            if latest is not None and latest != emu.spec.iteration_time:
                # regrouped in place: from where it is, at the new group's pace
                emu = EmulatedRun(dataclasses.replace(emu.spec, iteration_time=latest),
                                  start=emu.iterations(now), t0=now)
                log.info("trainer_repaced", iterations=emu.start, iteration_time=latest)
            if emu.finished(now):
                its = save(done=True)
                log.info("trainer_finished", iterations=its)
                return EXIT_FINISHED
            if stop.is_set() or os.getppid() != parent:
                _slow_stop_for_tests()
                its = save(done=False)
                log.info("trainer_stopped", iterations=its, orphaned=not stop.is_set())
                return EXIT_STOPPED
            if now >= next_report:
                save(done=False)
                next_report = max(next_report + args.report_every, now)
            stop.wait(max(0.0, min(CHUNK_WALL_S, emu.wall_left(now), next_report - now)))
    finally:
        telemetry.close()


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
