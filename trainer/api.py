"""The client API for a training loop run as an Interlace job: the one trainer contract.

Why: every trainer takes turns at its group's stage gate, reports stage times to the planner,
checkpoints, and stops when asked, and the agent, the scheduler and the ledger verdict rely on
the order of those acts. They are written here once; the packaged trainers (trainer/run.py,
emulated and torch, through trainer/loop.py) are clients of this API as a user's script is:

    from trainer import api
    job = api.job()                              # reads the INTERLACE_* environment
    start, state = job.resume()                  # (0, None) on a first start
    for step in range(start, job.iterations):
        with job.stage("io"):  x, y = next(batches)
        with job.stage("gpu"): loss = train_step(model, x, y)
        job.step()                               # one iteration done (timing, progress)
        if job.should_stop():                    # preempted: save and leave
            sys.exit(job.stop(step + 1, {"model": model.state_dict(), ...}))
    sys.exit(job.finish(job.iterations, {...}))

`job.loader(dataloader)` wraps an iterable so that each `next()` is the "io" stage. Outside
Interlace (no INTERLACE_JOB_ID) the same script runs as a plain script: no gate, no telemetry,
checkpoints under ./checkpoints (a run that resumes from one says so, on stderr). A script
that never uses this API still runs (its job is unprofiled and takes no turns; a gate counts
a member from its first turn, so none waits for it) and is stopped by SIGTERM, resuming from
scratch or its own checkpoints.

The contract, in order: `resume()` picks the resume point (the newest saved state; for a job
that keeps no state, its progress record or the scheduler's count, whichever is ahead) and
writes the ledger's start record. Stages are gated and timed; `step()` ends an iteration, and
reports (and, with `autosave`, checkpoints) fall due there, never while a stop is pending or
once the end is reached. `save()` appends the ledger's checkpoint record, then makes the state
durable, then the progress record (so the record never names a state that is not on disk).
`stop()` and `finish()` save, report, close, and return the exit status (trainer/exits.py);
the ledger's end record follows, at the end of a `with job:` block when there is one (where
an exception ends it as crashed), else at once.

Stage names are trainer.stages.STAGES (io, cpu, gpu, net). Only rank 0 reports, saves and
writes the progress record; every rank should call `should_stop()` and agree (e.g. in the
all-reduce).
"""
from __future__ import annotations

import contextlib
import math
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

from trainer import checkpoint
from trainer.exits import EXIT_FINISHED, EXIT_STOPPED
from trainer.gate_client import connect
from trainer.lease import LeaseWatch
from trainer.ledger import Ledger
from trainer.reporting import FIRST_REPORT_AFTER, Profile, Reporter  # noqa: F401  (public)
from trainer.stages import STAGES
from trainer.stopflag import StopFlag
from trainer.stores import KEEP as KEEP_CHECKPOINTS  # noqa: F401  (public)
from trainer.stores import FileStore, Store

REPORT_EVERY_S = 1.0  # wall seconds between stage-time reports to the planner


@dataclass(frozen=True)
class Setup:
    """Who a job's process is and where its contract's outputs go.

    `checkpoint_dir` is where a user's states go; `progress_dir` the directory of the
    progress record the agent and scheduler read (None: none is written); `ledger` the
    node's ledger file (None: no ledger); `launch` what all ranks of one launch share.
    """

    job_id: int = 0
    managed: bool = False
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    iterations: float = 0
    start_iteration: float = 0.0
    node: str = ""
    time_scale: float = 1.0
    checkpoint_dir: Path = Path("checkpoints")
    progress_dir: Path | None = None
    gate: str | None = None
    endpoints: str | None = None
    client_key: str | None = None
    ledger: Path | None = None
    launch: str = ""
    gpu_mem_gb: float = 0.0  # GPU memory the job declared (GB per GPU; 0: none)
    lease: Path | None = None  # the agent's lease file (trainer/lease.py; None: no fencing)

    @classmethod
    def from_environ(cls, env: Mapping[str, str]) -> "Setup":
        """The INTERLACE_* variables (node_agent/user_command.py), and INTERLACE_LEDGER, the
        node's ledger file (optional; unset, the job writes no ledger records)."""
        managed = "INTERLACE_JOB_ID" in env
        world = int(env.get("INTERLACE_WORLD_SIZE", "1"))
        ckdir = Path(env.get("INTERLACE_CHECKPOINT_DIR") or "checkpoints")
        launch = (f"{env.get('INTERLACE_MASTER_ADDR', '')}:{env.get('INTERLACE_MASTER_PORT', '')}"
                  if world > 1 else "")
        return cls(job_id=int(env.get("INTERLACE_JOB_ID", "0")), managed=managed,
                   rank=int(env.get("INTERLACE_RANK", "0")), world_size=world,
                   local_rank=int(env.get("INTERLACE_LOCAL_RANK", "0")),
                   iterations=int(float(env.get("INTERLACE_ITERATIONS", "0"))),
                   start_iteration=float(env.get("INTERLACE_START_ITERATION", "0")),
                   node=env.get("INTERLACE_NODE", ""),
                   time_scale=float(env.get("INTERLACE_TIME_SCALE", "1")),
                   checkpoint_dir=ckdir, progress_dir=ckdir.parent if managed else None,
                   gate=env.get("INTERLACE_GATE") or None,
                   endpoints=(env.get("INTERLACE_ENDPOINTS") or None) if managed else None,
                   client_key=env.get("INTERLACE_CLIENT_KEY") or None,
                   ledger=Path(env["INTERLACE_LEDGER"]) if env.get("INTERLACE_LEDGER") else None,
                   launch=launch, gpu_mem_gb=float(env.get("INTERLACE_GPU_MEM_GB") or 0.0),
                   lease=Path(env["INTERLACE_LEASE_FILE"])
                   if managed and env.get("INTERLACE_LEASE_FILE") else None)


class Autosave:
    """When periodic checkpoints fall due: every `every` iterations, or every `seconds` wall
    seconds (the first at once); `state()` gives what to save."""

    def __init__(self, state: Callable[[], Any], every: int = 0, seconds: float = 0.0):
        if (every > 0) == (seconds > 0):
            raise ValueError("autosave needs one of every (iterations) or seconds, > 0")
        self.state, self.every, self.seconds = state, int(every), float(seconds)
        self._next, self._last = -math.inf, None

    def due(self, iteration: float, now: float) -> bool:
        if self.seconds:
            return now >= self._next
        return (float(iteration).is_integer() and int(iteration) % self.every == 0
                and iteration != self._last)

    def saved(self, iteration: float, now: float) -> None:
        self._last, self._next = iteration, now + self.seconds


class Job:
    """One process of an Interlace job: the contract's acts, in their order (module docstring).

    Built from the environment by default. A packaged trainer passes `setup` (its command
    line), `store` (where its state goes; None: it keeps none), `stop` (a StopFlag its own
    early signal handlers set, with handle_sigterm=False), `parent` (the pid whose loss
    means orphaned), `started` (its process's start, time.monotonic: the first iteration's
    end minus it is the launch's restart overhead, reported with the stage times) and `log`.
    """

    def __init__(self, environ: Mapping[str, str] | None = None,
                 report_every: float = REPORT_EVERY_S, handle_sigterm: bool = True, *,
                 setup: Setup | None = None, store: Store | None = None,
                 stop: StopFlag | None = None, parent: int | None = None,
                 started: float | None = None, log: Any = None):
        if setup is None:
            setup = Setup.from_environ(os.environ if environ is None else environ)
            store = FileStore(setup.checkpoint_dir) if store is None else store
        self.setup, self.store = setup, store
        self.managed, self.id, self.node = setup.managed, setup.job_id, setup.node
        self.rank, self.world_size, self.local_rank = setup.rank, setup.world_size, setup.local_rank
        self.iterations, self.start_iteration = setup.iterations, setup.start_iteration
        self.checkpoint_dir, self.time_scale = setup.checkpoint_dir, setup.time_scale
        self.report_every = float(report_every)
        self.clock: Callable[[], float] = time.monotonic  # a CUDA trainer's waits for its device
        self.position = float(setup.start_iteration)  # where the job stands (reports say it)
        self._ledger = Ledger(setup.ledger, setup.job_id, setup.node, rank=setup.rank,
                              world_size=setup.world_size, launch=setup.launch)  # first: its
        # start time precedes all of the job's work (no file: it records nothing)
        self._stop = stop if stop is not None else StopFlag()  # no lock in a handler
        self._parent = os.getppid() if parent is None else parent
        self._started = started
        self._times: dict[str, float] = {}
        self._iteration_began = self.clock()
        self._boundary = self.position  # where the last step() or resume() left the job
        self._counted_first = False
        self._autosave: Autosave | None = None
        self._outcome: str | None = None  # "stopped" or "finished", once decided
        self._within = False  # inside `with job:`: the ledger's end waits for its end
        self.gate = connect(setup.gate, setup.job_id)
        self._lease = LeaseWatch(setup.lease if setup.managed else None)
        self._log = log
        self._reporter = Reporter(self._telemetry(log), setup.time_scale, self.report_every,
                                  self.clock())
        if setup.gpu_mem_gb > 0:  # what it declared, until something measures it
            self._reporter.gpu_memory = lambda: setup.gpu_mem_gb
        if handle_sigterm and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, lambda *_: self._stop.set())

    def _telemetry(self, log: Any) -> Any:
        if not (self.managed and self.rank == 0 and self.setup.endpoints):
            return None
        from trainer.telemetry import Telemetry

        if log is None:
            import structlog
            log = structlog.get_logger("trainer.api").bind(job=self.id)
        return Telemetry(self.setup.endpoints, self.id, log, client_key=self.setup.client_key)

    # -- the loop's side ---------------------------------------------------------------------
    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Hold stage `name` at the group's gate for the body, and time it."""
        if name not in STAGES:
            raise ValueError(f"stage must be one of {STAGES}, got {name!r}")
        with self.gate.turn(name):
            began = self.clock()
            try:
                yield
            finally:
                self._times[name] = self._times.get(name, 0.0) + self.clock() - began

    turn = stage  # the Gate interface (trainer.stages): a StageLoop takes its turns here

    def loader(self, batches: Iterable[Any]) -> Iterator[Any]:
        """`batches` with each fetch as the io stage (wrap a DataLoader with it)."""
        it = iter(batches)
        while True:
            with self.stage("io"):
                try:
                    item = next(it)
                except StopIteration:
                    return
            yield item

    def step(self, iteration: float | None = None) -> None:
        """One iteration ended; `iteration`: where the job now stands (default: one past
        where it stood). Its stage times join the window (the first after a start is
        start-up, not the pace, and is left out; its end measures the restart overhead when
        `started` was given); reports and autosaves that are due happen now."""
        now = self.clock()
        if self._counted_first:
            self._reporter.window.add(self._times, now - self._iteration_began)
        elif self._started is not None:
            self._reporter.restart_overhead = now - self._started
        self._counted_first = True
        self._times, self._iteration_began = {}, now
        self._boundary = self._boundary + 1 if iteration is None else float(iteration)
        self.position = self._boundary
        self._duties(now)

    def at(self, iteration: float) -> None:
        """The job stands at `iteration` inside a long iteration (a workload whose progress is
        a function of time says so while it waits): due reports and autosaves happen now."""
        self.position = float(iteration)
        self._duties(self.clock())

    def should_stop(self) -> bool:
        """True once the scheduler asked this job to stop (SIGTERM), the agent is gone, or
        its lease ran out (fenced: the scheduler may run the job elsewhere by now)."""
        return self._stop.is_set() or self.orphaned or self.fenced

    @property
    def fenced(self) -> bool:
        """The agent's lease ran out: the scheduler has not heard it for so long that it may
        have run this job elsewhere (node_agent/lease.py). Said once in the log."""
        if self._lease.fenced:
            return True
        if not self._lease.expired():
            return False
        log = self._log
        if log is None:
            import structlog
            log = structlog.get_logger("trainer.api").bind(job=self.id)
        log.warning("trainer_fenced", job=self.id, lease=str(self._lease.path),
                    position=self.position)
        return True

    @property
    def orphaned(self) -> bool:
        """The process that launched this one is gone (a managed job then stops)."""
        return self.managed and os.getppid() != self._parent

    @property
    def restart_overhead(self) -> float | None:
        """Wall seconds from the process's start to its first iteration's end (None before,
        or when `started` was not given)."""
        return self._reporter.restart_overhead

    @property
    def profile(self) -> Profile | None:
        """Stage times to report instead of measured ones (an emulated workload's are its
        profile by construction), or None: measure them."""
        return self._reporter.profile

    @profile.setter
    def profile(self, value: Profile | None) -> None:
        self._reporter.profile = value

    @property
    def gpu_memory(self) -> Callable[[], float | None]:
        """What each report says of the GPU memory the job holds (GB per GPU; None:
        nothing): the declared figure, or what a trainer that measures sets here."""
        return self._reporter.gpu_memory

    @gpu_memory.setter
    def gpu_memory(self, value: Callable[[], float | None]) -> None:
        self._reporter.gpu_memory = value

    def timing(self) -> dict[str, Any]:
        """Mean stage and iteration times (wall seconds) measured since the last report."""
        return self._reporter.window.summary()

    def autosave(self, state: Callable[[], Any], every: int = 0, seconds: float = 0.0) -> None:
        """Checkpoint `state()` every `every` iterations or every `seconds` wall seconds (the
        first at once), from step() and at(); stop() and finish() save the last one."""
        self._autosave = Autosave(state, every, seconds)

    def _duties(self, now: float) -> None:
        """The due autosave, then the due report; none while stopping or past the end."""
        if self.should_stop() or (self.iterations and self.position >= self.iterations):
            return
        auto = self._autosave
        if auto is not None and self.rank == 0 and auto.due(self.position, now):
            self.save(self.position, auto.state())
            auto.saved(self.position, now)
        if self._reporter.due(now):
            self._reporter.publish(self.position)
            self._reporter.schedule(now)

    # -- checkpoints ---------------------------------------------------------------------------
    def resume(self, agree: Callable[[int], int] | None = None) -> tuple[float, Any]:
        """(iteration, state) to go on from, or (0, None); the ledger's start record.

        With a store: its newest state. `agree`, in a multi-rank job, gives every rank rank
        0's choice (e.g. a broadcast; only rank 0 looks), and every rank loads that state.
        Without a store: the progress record or the scheduler's count, whichever is ahead.
        """
        state = None
        if self.store is None:
            record = self._record()
            start = self.start_iteration
            if record is not None and record.iterations > start:
                start = self._believed(record.iterations)
        else:
            found = self.store.latest() if agree is None or self.rank == 0 else None
            start = found if found is not None else 0
            if agree is not None:
                start = agree(start)
            state = self.store.load(start) if start > 0 else None
            if start > 0 and not self.managed and self.rank == 0:  # a plain run: say so
                print(f"resumed from {self.checkpoint_dir} at iteration {start:g}",
                      file=sys.stderr, flush=True)
        self._begin(start)
        return start, state

    def _believed(self, claimed: float) -> float:
        """Where to go on from when the progress record is ahead of the scheduler's count:
        the record where `_doubt` finds nothing wrong with it, else the scheduler's count,
        said on stderr. An edited record (4990 of 5000 at 706 done, or Infinity) skips no
        iteration."""
        why = self._doubt(claimed)
        if why is None:
            return claimed
        print(f"trainer: job {self.id}: checkpoint_refused: its progress record says "
              f"{claimed!r} iterations: {why}; resuming from {self.start_iteration:g}",
              file=sys.stderr, flush=True)
        return self.start_iteration

    def _doubt(self, claimed: float) -> str | None:
        """Why a progress record's count is not where this job stands, or None: it must be
        finite and within the total, and, where there is a ledger, some trainer of this job
        must have checkpointed there (its ledger record is appended before the progress
        record is written)."""
        if not 0 <= claimed <= self.iterations:
            return f"not a count within the total of {self.iterations:g}"
        if self.setup.ledger is not None:
            from trainer.ledger import read_ledgers

            records, _ = read_ledgers(self.setup.ledger.parent.parent)
            if not any(r.get("kind") == "checkpoint" and r.get("job") == self.id
                       and r.get("iteration") == claimed for r in records):
                return "no trainer of this job checkpointed there (the ledgers)"
        return None

    def finished(self) -> bool:
        """Whether the progress record says this job is done: a relaunch has nothing to do."""
        record = self._record()
        return record is not None and record.done and record.iterations >= self.iterations \
            and self._believed(record.iterations) == record.iterations

    def exit_finished(self) -> int:
        """End a job that `finished()`: the ledger's start and end at its recorded iterations,
        nothing saved or reported; returns EXIT_FINISHED."""
        record = self._record()
        self._begin(record.iterations if record else self.iterations)
        self._outcome = "finished"
        return self._end_now(EXIT_FINISHED)

    def save(self, iteration: float | None = None, state: Any = None) -> None:
        """Rank 0: the ledger's checkpoint record, then `state` (torch objects welcome) made
        durable as the checkpoint of `iteration` (default: where the job stands), then the
        progress record the scheduler resumes from."""
        self._save(self.position if iteration is None else iteration, state, done=False)

    def stop(self, iteration: float | None = None, state: Any = None) -> int:
        """Preempted: checkpoint and report; returns the exit status for sys.exit."""
        self._save(self._stand(iteration), state, done=False)
        self._reporter.publish(self.position)
        self._outcome = "stopped"
        return self._end_now(EXIT_STOPPED)

    def finish(self, iteration: float | None = None, state: Any = None) -> int:
        """All done: the final checkpoint and report; returns the exit status for sys.exit."""
        self._save(self._stand(iteration), state, done=True)
        self._reporter.publish(self.position)
        self._outcome = "finished"
        return self._end_now(EXIT_FINISHED)

    def close(self) -> None:
        self.gate.close()
        self._reporter.close()

    def __enter__(self) -> "Job":
        self._within = True
        return self

    def __exit__(self, kind: Any, err: BaseException | None, tb: Any) -> None:
        self._within = False
        self.close()
        if err is not None and not (isinstance(err, SystemExit) and self._outcome):
            self._end("crashed", error=repr(err)[:200])
        else:
            self._end(self._outcome or "crashed")

    # -- inside ------------------------------------------------------------------------------
    def _begin(self, start: float) -> None:
        self.start_iteration = self.position = self._boundary = float(start)
        self._ledger.start(start, self.iterations)
        self._reporter.schedule(self.clock())

    def _stand(self, iteration: float | None) -> float:
        if iteration is not None:
            self.position = float(iteration)
        return self.position

    def _save(self, iteration: float, state: Any, done: bool) -> None:
        if self.rank != 0:
            return
        self._ledger.checkpoint(iteration)  # before it is durable (trainer/ledger.py)
        if state is not None and self.store is not None:
            self.store.save(int(iteration), state)
        if self.setup.progress_dir is not None:  # the record the agent and scheduler read
            checkpoint.write(self.setup.progress_dir, checkpoint.Checkpoint(
                job_id=self.id, iterations=float(iteration), total=float(self.iterations),
                node=self.node, done=done))

    def _record(self) -> checkpoint.Checkpoint | None:
        if self.setup.progress_dir is None:
            return None
        return checkpoint.read(self.setup.progress_dir, self.id)

    def _end_now(self, status: int) -> int:
        self.close()
        if not self._within:
            self._end(self._outcome or "crashed")
        return status

    def _end(self, how: str, **extra: Any) -> None:
        self._ledger.end(how, **extra)


def job(**kwargs: Any) -> Job:
    """This process's job (see `Job`)."""
    return Job(**kwargs)


def process_started() -> float:
    """The time.monotonic() value at which this process started (Linux /proc; else now):
    pass it as `Job(started=...)` to have the launch's restart overhead measured."""
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
