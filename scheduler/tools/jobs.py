"""`interlace-submit`, `interlace-status`, `interlace-cancel`: jobs by hand on a live scheduler.

    interlace-submit --endpoints E --gpus 2 --model resnet18 --iterations 500
    interlace-submit --endpoints E --gpus 1 --iterations 300 -- python train.py --lr 0.1
    interlace-status --endpoints E [JOB]
    interlace-cancel --endpoints E JOB

They talk to the `scheduler` service through the broker as the feeder does, and reuse its
client (traces.feeder: endpoints, retries while the scheduler registers, refusal handling).
A command job runs the user's program in the directory `interlace-submit` ran in (or, with
`--own-workdir`, in RUN/jobs/job-<id> on its node), with the INTERLACE_* environment of
node_agent/user_command.py; its stage profile starts as the `--model` it resembles until the
program reports its own (trainer/api.py). Its output is in RUN/trainers (`interlace-logs`).

Exit status: 0 done; 1 the scheduler refused or could not be reached (or, for status and
cancel, the job is unknown or already over); 2 bad arguments.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import threading
import uuid
from typing import Any, Callable, Sequence

from specs.gpu_types import parse_types
from specs.limits import (MAX_GPU_MEM_GB, MAX_GPUS, MAX_ID, MAX_ITERATIONS, MAX_RESTARTS,
                          MAX_RETRIES, MAX_SECONDS, MAX_WAIT_S)
from specs.options import OneLineParser, number
from traces.feeder import SERVICE, Feeder, FeedError, load_endpoints
from traces.models import MODELS
from traces.record import JobRecord
from traces.validate import validate

SUBMISSION_KEY = re.compile(r"[A-Za-z0-9_.:\-]{1,128}")

# the option behind each field of the job record, to name it when the record is refused
OPTION_OF = {"num_gpu": "--gpus", "iterations": "--iterations",
             "iteration_time": "--iteration-time", "duration": "--iterations x --iteration-time",
             "gpu_mem_gb": "--gpu-mem", "gpu_types": "--gpu-type", "tenant": "--tenant",
             "priority_class": "--class", "max_restarts": "--max-restarts"}


JOB_ID = number(0, MAX_ID, integer=True)  # the message schema's bound on a job id


def gpu_types(text: str) -> tuple[str, ...]:
    """An argparse type: GPU types joined by `|`, as a trace's gpu_type cell states them."""
    types, problem = parse_types(text)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return types


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--endpoints", default=os.environ.get("INTERLACE_ENDPOINTS"),
                   metavar="FILE", help="the broker's endpoints file (default "
                                        "$INTERLACE_ENDPOINTS)")
    p.add_argument("--timeout", type=number(0, MAX_WAIT_S, above=True, unit="s"), default=2.0,
                   metavar="S", help="seconds per try of a request (default 2, at most "
                                     f"{MAX_WAIT_S:g})")
    p.add_argument("--retries", type=number(0, MAX_RETRIES, integer=True), default=3,
                   metavar="N", help=f"resends of an unanswered request (default 3, at most "
                                     f"{MAX_RETRIES})")
    p.add_argument("--client-key", default=os.environ.get("INTERLACE_CLIENT_KEY") or None,
                   metavar="FILE", help="CURVE secret certificate for a keyed broker "
                                        "(default $INTERLACE_CLIENT_KEY)")


def make_record(args: argparse.Namespace, job_id: int, command: Sequence[str],
                workdir: str) -> JobRecord:
    """The job as the scheduler takes it: the model's typical profile (a 1-GPU job does no
    all-reduce, so no net time), or the user's iteration time over it."""
    profile = MODELS[args.model]
    stages = list(profile.stage_times)
    if args.gpus == 1:
        stages[-1] = 0.0
    tt = args.iteration_time if args.iteration_time is not None else profile.iteration_time
    if args.iteration_time is not None and sum(stages) > 0:
        stages = [s * tt / sum(stages) for s in stages]
    return JobRecord(job_id=job_id, num_gpu=args.gpus, submit_time=0.0,
                     iterations=args.iterations, model_name=args.model,
                     batch_size=profile.batch_size, duration=args.iterations * tt, interval=0.0,
                     iteration_time=tt, stage_times=tuple(stages), priority=args.priority,
                     command=tuple(command), workdir=workdir if command else "",
                     gpu_mem_gb=float(args.gpu_mem), gpu_types=tuple(args.gpu_type),
                     tenant=args.tenant, priority_class=args.priority_class,
                     max_restarts=None if args.max_restarts is None else int(args.max_restarts),
                     own_workdir=bool(command) and args.own_workdir,
                     progress_file=args.progress_file if command else "")


def _connect(prog: str, args: argparse.Namespace) -> tuple[Any, Any]:
    """(requester, feeder) on the broker; FeedError when the endpoints cannot be read."""
    import structlog

    from broker.client import Requester
    from broker.curve import attach_client_key

    from broker.keys import KeyFileError

    if not args.endpoints:
        raise FeedError("no endpoints file: give --endpoints or set $INTERLACE_ENDPOINTS")
    endpoints = load_endpoints(args.endpoints, 0.0, threading.Event())
    try:
        endpoints = attach_client_key(endpoints, args.client_key)
    except (KeyFileError, ValueError) as err:
        raise FeedError(f"--client-key: {err}") from None
    requester = Requester(endpoints, prog, timeout=args.timeout, retries=args.retries)
    return requester, Feeder(requester, structlog.get_logger(prog), patience=5.0,
                             where=args.endpoints)


def _request(requester: Any, type_: str, **fields: Any) -> dict[str, Any]:
    """One request's reply body; FeedError with the scheduler's reason when refused."""
    from broker.client import RequestFailed, RequestTimeout

    try:
        reply = requester.request(SERVICE, type_, **fields)
    except RequestTimeout:
        raise FeedError("the scheduler did not answer") from None
    except RequestFailed as err:
        raise FeedError(f"{err.code}: {err.reason}") from None
    return reply.get("body") or {}


def _run(prog: str, argv: Sequence[str] | None, parser: argparse.ArgumentParser,
         body: Callable[[argparse.Namespace, Any, Any], int],
         check: Callable[[argparse.Namespace], int | None] | None = None) -> int:
    """Parse, `check` the arguments before connecting (its exit status ends it), run."""
    args = parser.parse_args(argv)
    if check is not None and (rc := check(args)) is not None:
        return rc
    requester = None
    try:
        requester, feeder = _connect(prog, args)
        return body(args, requester, feeder)
    except FeedError as err:
        print(f"{prog}: {err}", file=sys.stderr)
        return 1
    finally:
        if requester is not None:
            requester.close()


# -- interlace-submit ------------------------------------------------------------------------
def _submit_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="interlace-submit", description=(
        "Submit one job to a live Interlace scheduler: a packaged workload (--model), or your "
        "own program after `--`, run with the INTERLACE_* environment."),
        usage="%(prog)s [options] [-- COMMAND [ARG ...]]")
    p.add_argument("--gpus", type=number(1, MAX_GPUS, integer=True), required=True,
                   help="GPUs the job needs")
    p.add_argument("--iterations", type=number(1, MAX_ITERATIONS, integer=True), required=True,
                   help="iterations to train")
    p.add_argument("--model", default="resnet18", choices=sorted(MODELS),
                   help="the packaged workload; for a command, the model it resembles "
                        "(its first stage profile; default resnet18)")
    p.add_argument("--iteration-time", type=number(0, MAX_SECONDS, above=True, unit="s"),
                   default=None, metavar="S",
                   help="expected seconds per iteration alone (default: the model's)")
    p.add_argument("--priority", type=number(0, 1, integer=True), default=0,
                   help="0 guaranteed (default), 1 opportunistic")
    p.add_argument("--gpu-mem", type=number(0, MAX_GPU_MEM_GB, unit="GB"), default=0.0,
                   metavar="GB", help="GPU memory the job needs on each of its GPUs; jobs "
                                      "share a GPU only where theirs fit (default 0: not "
                                      "stated); the scheduler refuses more than a GPU holds")
    p.add_argument("--gpu-type", type=gpu_types, default=(), metavar="T[|T...]",
                   help="GPU types the job may run on, all its GPUs of one of them (default: "
                        "any); the scheduler refuses a job no pool of its spec can hold")
    p.add_argument("--tenant", default="", metavar="NAME",
                   help="the tenant the job runs for (the scheduler's tenants file; default: "
                        "the file's default, or the tenant your key maps to)")
    p.add_argument("--class", dest="priority_class", default="", metavar="NAME",
                   help="its priority class (default: the tenants file's default_class)")
    p.add_argument("--max-restarts", type=number(0, MAX_RESTARTS, integer=True), default=None,
                   metavar="N", help="relaunch it at most N times after failures of its "
                                     "program in a row without progress, then it is failed "
                                     "(default: the scheduler's --max-failures, 3 failures)")
    p.add_argument("--job-id", type=JOB_ID, default=None,
                   help="the job's id (default: the scheduler gives it one)")
    p.add_argument("--key", type=_submission_key, default=None,
                   help="this submission's name, up to 128 letters, digits and _.:-: the "
                        "same command with the same key again is answered with the job it "
                        "made, never a second one (default: a fresh key, printed when no "
                        "answer came)")
    p.add_argument("--own-workdir", action="store_true",
                   help="run the command in a fresh directory of its own, RUN/jobs/job-<id> "
                        "on its node, kept across its relaunches (default: this directory); "
                        "name your files by absolute paths then")
    p.add_argument("--progress-file", default="", metavar="PATH",
                   help="the file the command writes its iterations done to (a number a "
                        "line, the last one counting), in its working directory or absolute; "
                        "the agent reads it as the job's progress (default: the file named by "
                        "INTERLACE_PROGRESS_FILE)")
    _common(p)
    return p


def _relative_paths(command: Sequence[str]) -> list[str]:
    """The command's arguments that name a file here by a relative path: with
    --own-workdir the job runs elsewhere, where they name nothing."""
    return [a for a in command if a and not a.startswith("-") and not os.path.isabs(a)
            and os.path.exists(a)]


def where_it_runs(record: JobRecord, job_id: int, endpoints: str) -> list[str]:
    """What `interlace-submit` says after the id: the job's working directory (a command's)
    and its output files. RUN is the endpoints file's directory, the run directory by
    default; the files are on the job's node(s)."""
    run = os.path.dirname(os.path.abspath(endpoints))
    lines = []
    if record.command:
        workdir = os.path.join(run, "jobs", f"job-{job_id}") if record.own_workdir \
            else record.workdir
        lines.append(f"  runs in {workdir}" + (" (its own)" if record.own_workdir else ""))
    name = f"{job_id}.stderr" if record.num_gpu == 1 else f"{job_id}.r<rank>.stderr"
    if record.num_gpu > 1 and not record.command:  # an emulated job is one process
        name = f"{job_id}.stderr (torch: {name})"
    lines.append(f"  output in {os.path.join(run, 'trainers', name)} on its node; "
                 f"`interlace-logs {job_id}` shows it")
    return lines


def _submission_key(text: str) -> str:
    if not SUBMISSION_KEY.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{text[:40]!r} is not a key: 1 to 128 letters, digits and _.:-")
    return text


def submit_main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, command = argv[:at], argv[at + 1:]
        if not command:
            print("interlace-submit: nothing after `--`: give the command to run",
                  file=sys.stderr)
            return 2
    parser = _submit_parser()

    def check(args: argparse.Namespace) -> int | None:
        for option, given in (("--own-workdir", args.own_workdir),
                              ("--progress-file", args.progress_file)):
            if given and not command:
                print(f"interlace-submit: {option}: only for a command (after `--`)",
                      file=sys.stderr)
                return 2
        relative = _relative_paths(command) if args.own_workdir else []
        if relative:
            print(f"interlace-submit: --own-workdir: {relative[0]} is relative to this "
                  f"directory, not the job's: give its absolute path", file=sys.stderr)
            return 2
        return None

    def body(args: argparse.Namespace, requester: Any, feeder: Any) -> int:
        record = make_record(args, args.job_id or 0, command, os.getcwd())
        problems = validate([record])
        if problems:  # the scheduler's own check, before anything is sent
            where = OPTION_OF.get(problems[0].field or "", problems[0].field)
            print(f"interlace-submit: {where}: {problems[0].message}", file=sys.stderr)
            return 2
        key = args.key or uuid.uuid4().hex
        try:
            if args.job_id is None:  # the scheduler gives the id: nothing to guess, or probe
                outcome, job_id = feeder.submit_new(record, key=key)
            else:
                outcome, job_id = feeder.submit(record, key=key), args.job_id
        except FeedError as err:  # no answer: it may have been taken all the same
            print(f"interlace-submit: {err}\ninterlace-submit: the scheduler may have taken "
                  f"it: the same command with --key {key} answers with the job it made, or "
                  "submits it; never a second one", file=sys.stderr)
            return 1
        if outcome == "accepted":
            print(f"submitted job {job_id}")
            print("\n".join(where_it_runs(record, job_id, args.endpoints)))
            return 0
        if outcome == "duplicate":
            print(f"interlace-submit: job id {job_id} is taken", file=sys.stderr)
        else:
            print(f"interlace-submit: refused: {outcome}", file=sys.stderr)
        return 1

    return _run("interlace-submit", argv, parser, body, check)


# -- interlace-status ------------------------------------------------------------------------
def _when(seconds: Any) -> str:
    if seconds is None:
        return "unknown"
    return "now" if seconds < 0.5 else f"in {seconds:.0f} s"


def format_job(job: dict[str, Any], output: bool = False) -> str:
    """One line per job: id, state, GPUs, progress (`?` where a command reported none), and
    position / expected start if queued; a job whose program failed says how, and a failed
    one (or any, with `output`) is followed by the last lines of its output."""
    done = "?" if job.get("progress_known") is False else f"{job['iterations_done']:.0f}"
    line = (f"{job['job_id']:>6}  {job['state']:<9} {job['num_gpu']:>2} GPU  "
            f"{done}/{job['iterations']:.0f} it")
    if job["state"] == "running":
        line += f"  on {','.join(job['nodes'])}"
    moves = [f"{n} {what}" for what, n in (("preempted", job.get("preemptions")),
                                            ("regrouped in place", job.get("regroups")),
                                            ("restarted to regroup", job.get("regroup_stops")))
             if n]
    if moves:
        line += f"  ({', '.join(moves)})"
    if "position" in job:
        line += f"  position {job['position']}, expected start {_when(job['expected_start'])}"
    if "reason" in job:  # docs/waiting.md
        line += f"  [{job['reason']}: {job['why']}]"
    failure = job.get("last_failure")
    if not failure:
        return line
    count = failure.get("failures", 1)
    if job["state"] in ("failed", "pending"):
        line += (f"  [{'failed' if job['state'] == 'failed' else 'last run failed'}: "
                 f"{failure.get('exit')}; {count} failure{'' if count == 1 else 's'} in a row]")
    if output or job["state"] == "failed":
        line += "".join(f"\n    | {text}" for text in failure.get("output") or ())
    return line


def _status_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="interlace-status", description=(
        "Jobs on a live Interlace scheduler: state, and for queued jobs their position, "
        "expected start (a projection: see scheduler/live/queue_view.py) and why they wait "
        "(docs/waiting.md)."))
    p.add_argument("job", nargs="?", type=JOB_ID, metavar="JOB", help="only this job")
    p.add_argument("--json", action="store_true", help="print the reply as JSON")
    _common(p)
    return p


def status_main(argv: Sequence[str] | None = None) -> int:
    def body(args: argparse.Namespace, requester: Any, feeder: Any) -> int:
        reply = _request(requester, "status.query", what="all")
        jobs = reply.get("jobs") or []
        if args.job is not None:
            jobs = [j for j in jobs if j.get("job_id") == args.job]
            if not jobs:
                print(f"interlace-status: no job {args.job} on this scheduler",
                      file=sys.stderr)
                return 1
        if args.json:
            print(json.dumps(jobs[0] if args.job is not None else reply, indent=1))
            return 0
        if args.job is None:
            counts = reply.get("counts") or {}
            print(", ".join(f"{k} {v}" for k, v in counts.items()))
        for job in jobs:
            print(format_job(job, output=args.job is not None))
        return 0

    return _run("interlace-status", argv, _status_parser(), body)


# -- interlace-cancel ------------------------------------------------------------------------
def _cancel_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="interlace-cancel", description=(
        "Cancel a job on a live Interlace scheduler: a queued job leaves the queue, a "
        "running one is stopped on its nodes."))
    p.add_argument("job", type=JOB_ID, metavar="JOB")
    _common(p)
    return p


def cancel_main(argv: Sequence[str] | None = None) -> int:
    def body(args: argparse.Namespace, requester: Any, feeder: Any) -> int:
        reply = _request(requester, "job.cancel", job_id=args.job)
        if not reply.get("cancelled"):
            print(f"interlace-cancel: job {args.job} not cancelled: {reply.get('reason')}",
                  file=sys.stderr)
            return 1
        print(f"cancelled job {args.job} (was {reply.get('was')})")
        return 0

    return _run("interlace-cancel", argv, _cancel_parser(), body)
