"""`interlace-slurm run | agent | submit`: the command line of the Slurm launcher.

    interlace-slurm submit --nodes 4 --gpus-per-node 8 --time 24:00:00 --run-dir DIR [-- RUN...]
    interlace-slurm run [--trace T] [--time-scale X] [--policy P] [--run-dir DIR] ...
    interlace-slurm agent --node n0 ...      (what each agent step runs; not for people)
"""
from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Sequence

from specs.limits import (MAX_CPUS, MAX_GPUS_PER_NODE, MAX_MEM, MAX_NODES, MAX_TIME_SCALE,
                          MAX_WAIT_S)
from specs.options import OneLineParser, number

PROG = "interlace-slurm"
TIME_SCALE = number(1 / MAX_TIME_SCALE, MAX_TIME_SCALE)
GPUS = number(1, MAX_GPUS_PER_NODE, integer=True)
MAX_WARN_S = 65535  # sbatch --signal's own bound on the warning time


def _run_parser(sub) -> None:
    p = sub.add_parser("run", help="inside an allocation: start Interlace on it")
    p.add_argument("--run-dir", help="on the shared file system (default "
                   "$SLURM_SUBMIT_DIR/interlace-$SLURM_JOB_ID: the same across requeues)")
    p.add_argument("--trace", help="feed this trace (CSV or packaged name) and end when every "
                   "job has finished; without it, jobs come from interlace-submit")
    p.add_argument("--time-scale", type=TIME_SCALE, default=1.0,
                   help="trace seconds per wall second (1: real time)")
    p.add_argument("--policy", default="muri-s")
    p.add_argument("--gpus-per-node", type=GPUS, help="GPUs per node when Slurm does not manage "
                   "them (logical ids 0..N-1); default: what Slurm granted")
    p.add_argument("--host", help="the broker's interface (default: this node's address)")
    p.add_argument("--no-requeue", dest="requeue", action="store_false",
                   help="on the time-limit warning, stop without requeueing the job")
    p.add_argument("--warn-signal", default="USR1",
                   help="the signal sbatch --signal=B:SIG@S sends before the limit (USR1)")
    p.add_argument("--stop-timeout", type=number(0, MAX_WAIT_S, unit="s"), default=20.0,
                   help="seconds the agents get to checkpoint their trainers and exit (20: "
                   "the whole stop must end within Slurm's KillWait, 30 s by default)")
    p.add_argument("--scheduler-arg", action="append", default=[], metavar="ARG",
                   help="passed on to the scheduler (repeat; e.g. --scheduler-arg=--round=2)")
    p.add_argument("--agent-arg", action="append", default=[], metavar="ARG",
                   help="passed on to every node agent (repeat)")
    p.add_argument("--log-level", default="info")


def _agent_parser(sub) -> None:
    p = sub.add_parser("agent", help="(run by each agent step) exec this node's agent")
    p.add_argument("--node", required=True)
    p.add_argument("--run-dir", required=True)
    p.add_argument("--gpus-per-node", type=GPUS, required=True)
    p.add_argument("--cpus", type=number(1, MAX_CPUS, integer=True), required=True)
    p.add_argument("--mem", type=number(1, MAX_MEM, integer=True), required=True)
    p.add_argument("--time-scale", type=TIME_SCALE, required=True)
    p.add_argument("agent_args", nargs="*", help="after --: passed on to the node agent")


def _submit_parser(sub) -> None:
    p = sub.add_parser("submit", help="outside an allocation: sbatch the launcher")
    p.add_argument("--nodes", type=number(1, MAX_NODES, integer=True), required=True)
    gpus = p.add_mutually_exclusive_group()
    gpus.add_argument("--gpus-per-node", type=GPUS, help="GPUs per node, asked of Slurm")
    gpus.add_argument("--emulate-gpus", type=GPUS, metavar="N",
                      help="ask Slurm for no GPUs; agents offer logical GPUs 0..N-1 "
                      "(emulated trainers, tests)")
    p.add_argument("--time", help="sbatch --time (e.g. 24:00:00)")
    p.add_argument("--partition")
    p.add_argument("--account")
    p.add_argument("--job-name", default="interlace")
    p.add_argument("--run-dir", help="on the shared file system; sbatch's output goes there too")
    p.add_argument("--no-requeue", dest="requeue", action="store_false")
    p.add_argument("--shared", dest="exclusive", action="store_false",
                   help="do not ask for whole nodes (--exclusive is the default)")
    p.add_argument("--warn", type=number(0, MAX_WARN_S, integer=True), default=120, metavar="S",
                   help="seconds before the time limit to checkpoint and requeue (120)")
    p.add_argument("--sbatch-arg", action="append", default=[], metavar="ARG",
                   help="any other sbatch option (repeat; e.g. --sbatch-arg=--qos=long)")
    p.add_argument("run_args", nargs="*", help="after --: options of `interlace-slurm run`")


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = OneLineParser(prog=PROG, description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    _run_parser(sub)
    _agent_parser(sub)
    _submit_parser(sub)
    return parser.parse_args(argv)


def _run(args: argparse.Namespace) -> int:
    from broker.logs import configure_logging
    from scheduler.tools.slurm.allocation import AllocationError, from_env, gpu_count
    from scheduler.tools.slurm.launcher import CANCELLED, TIME_LIMIT, Settings, Stop, run

    try:
        alloc = from_env(os.environ, gpus=args.gpus_per_node)
    except AllocationError as err:
        print(f"{PROG}: {err}", file=sys.stderr)
        return 2
    try:
        warn = signal.Signals[f"SIG{args.warn_signal.upper().removeprefix('SIG')}"]
    except KeyError:
        print(f"{PROG}: unknown signal {args.warn_signal!r}", file=sys.stderr)
        return 2
    run_dir = Path(args.run_dir or Path(os.environ.get("SLURM_SUBMIT_DIR", "."))
                   / f"interlace-{alloc.job_id}").resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    log = configure_logging("slurm-launcher", run_dir, level=args.log_level)
    stop = Stop()
    signal.signal(signal.SIGTERM, lambda *_: stop.set(CANCELLED))
    signal.signal(signal.SIGINT, lambda *_: stop.set(CANCELLED))
    signal.signal(warn, lambda *_: stop.set(TIME_LIMIT))
    settings = Settings(run_dir=run_dir, time_scale=args.time_scale, policy=args.policy,
                        trace=args.trace, host=args.host, requeue=args.requeue,
                        stop_timeout=args.stop_timeout,
                        slurm_gpus=args.gpus_per_node is None and bool(gpu_count(os.environ)),
                        scheduler_args=tuple(args.scheduler_arg),
                        agent_args=tuple(args.agent_arg))
    return run(settings, alloc, stop, log)


def _agent(args: argparse.Namespace) -> int:
    """Become this node's agent (exec: the step's signals then reach it directly)."""
    from scheduler.tools.slurm.allocation import gpu_ids
    from scheduler.tools.slurm.steps import node_agent

    argv = node_agent(sys.executable, args.node, gpu_ids(os.environ, args.gpus_per_node),
                      args.cpus, args.mem, Path(args.run_dir), args.time_scale,
                      socket.gethostname(), args.agent_args)
    sys.stdout.flush()
    os.execv(argv[0], argv)
    return 1  # not reached


def _submit(args: argparse.Namespace) -> int:
    from scheduler.tools.slurm.submit import Request, submit

    req = Request(nodes=args.nodes, gpus_per_node=args.gpus_per_node,
                  emulate_gpus=args.emulate_gpus, time=args.time, partition=args.partition,
                  account=args.account, job_name=args.job_name,
                  run_dir=Path(args.run_dir) if args.run_dir else None, requeue=args.requeue,
                  exclusive=args.exclusive, warn_s=args.warn,
                  sbatch_args=tuple(args.sbatch_arg))
    return submit(req, args.run_args)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    return {"run": _run, "agent": _agent, "submit": _submit}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
