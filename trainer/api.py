"""The client API for a user's own training loop run as an Interlace job.

Why: the packaged trainers take turns at their group's stage gate, report stage times to the
planner, checkpoint, and stop when asked; a user's script gets the same with a few lines:

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
checkpoints under ./checkpoints. A script that never uses this API still runs (its job is
unprofiled and takes no turns; the gate drops it from the rotation after its stall timeout)
and is stopped by SIGTERM, resuming from scratch or its own checkpoints.

Stage names are trainer.stages.STAGES (io, cpu, gpu, net). Only rank 0 reports and writes the
progress record; every rank should call `should_stop()` and agree (e.g. in the all-reduce).
"""
from __future__ import annotations

import contextlib
import os
import pickle
import signal
import threading
import time
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from trainer import checkpoint
from trainer.exits import EXIT_FINISHED, EXIT_STOPPED
from trainer.stages import STAGES, TimingWindow
from trainer.stopflag import StopFlag

REPORT_EVERY_S = 1.0  # wall seconds between stage-time reports to the planner
FIRST_REPORT_AFTER = 20  # iterations after which a launch reports at once (short launches count)
KEEP_CHECKPOINTS = 2  # the newest user checkpoints kept; older ones are removed


class Job:
    """One process of an Interlace job, as its environment describes it."""

    def __init__(self, environ: Mapping[str, str] | None = None,
                 report_every: float = REPORT_EVERY_S, handle_sigterm: bool = True):
        env = os.environ if environ is None else environ
        self.managed = "INTERLACE_JOB_ID" in env
        self.id = int(env.get("INTERLACE_JOB_ID", "0"))
        self.rank = int(env.get("INTERLACE_RANK", "0"))
        self.world_size = int(env.get("INTERLACE_WORLD_SIZE", "1"))
        self.local_rank = int(env.get("INTERLACE_LOCAL_RANK", "0"))
        self.iterations = int(float(env.get("INTERLACE_ITERATIONS", "0")))
        self.start_iteration = float(env.get("INTERLACE_START_ITERATION", "0"))
        self.checkpoint_dir = Path(env.get("INTERLACE_CHECKPOINT_DIR") or "checkpoints")
        self.node = env.get("INTERLACE_NODE", "")
        self.time_scale = float(env.get("INTERLACE_TIME_SCALE", "1"))
        self.report_every = float(report_every)
        self._stop = StopFlag()  # set by SIGTERM: no lock in a handler (trainer/stopflag.py)
        self._parent = os.getppid()
        self._times: dict[str, float] = {}
        self._window = TimingWindow()
        self._iteration_began = time.monotonic()
        self._next_report = time.monotonic() + self.report_every
        self._done = 0
        self._counted_first = False
        self._reported = False
        writer = self.rank == 0
        from trainer.torch_run import make_gate  # one gate factory for every trainer

        self.gate = make_gate(env.get("INTERLACE_GATE") or None, self.id)
        self._telemetry = None
        if self.managed and writer and env.get("INTERLACE_ENDPOINTS"):
            import structlog

            from trainer.telemetry import Telemetry
            self._telemetry = Telemetry(env["INTERLACE_ENDPOINTS"], self.id,
                                        structlog.get_logger("trainer.api").bind(job=self.id),
                                        client_key=env.get("INTERLACE_CLIENT_KEY") or None)
        if handle_sigterm and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, lambda *_: self._stop.set())

    # -- the loop's side ---------------------------------------------------------------------
    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Hold stage `name` at the group's gate for the body, and time it."""
        if name not in STAGES:
            raise ValueError(f"stage must be one of {STAGES}, got {name!r}")
        with self.gate.turn(name):
            began = time.monotonic()
            try:
                yield
            finally:
                self._times[name] = self._times.get(name, 0.0) + time.monotonic() - began

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

    def step(self) -> None:
        """One iteration ended: its stage times join the window, reported now and then (the
        first one after a start is start-up, not the pace, and is left out; the first report
        comes after FIRST_REPORT_AFTER iterations, so that a short launch is measured too)."""
        now = time.monotonic()
        self._done += 1
        if self._counted_first:
            self._window.add(self._times, now - self._iteration_began)
        self._counted_first = True
        self._times, self._iteration_began = {}, now
        if now >= self._next_report or (
                not self._reported and self._window.iterations >= FIRST_REPORT_AFTER):
            self._report()
            self._next_report = now + self.report_every

    def should_stop(self) -> bool:
        """True once the scheduler asked this job to stop (SIGTERM) or the agent is gone."""
        return self._stop.is_set() or (self.managed and os.getppid() != self._parent)

    # -- checkpoints ---------------------------------------------------------------------------
    def save(self, iteration: int, state: Any = None) -> None:
        """Rank 0: write `state` (torch objects welcome) as the checkpoint of `iteration`,
        then the progress record the scheduler resumes from (in that order, so the record
        never names a state that is not on disk)."""
        if self.rank != 0:
            return
        self.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        if state is not None:
            final = self.checkpoint_dir / f"ckpt-{int(iteration)}.pt"
            tmp = final.with_suffix(f".{os.getpid()}.tmp")
            with open(tmp, "wb") as fh:
                _dump(state, fh)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, final)
            checkpoint.fsync_dir(self.checkpoint_dir)
            for old in self._saved()[:-KEEP_CHECKPOINTS]:
                old[1].unlink(missing_ok=True)
        self._progress(iteration, done=False)

    def resume(self) -> tuple[int, Any]:
        """(iteration, state) of the newest checkpoint, or (0, None)."""
        saved = self._saved()
        if not saved:
            return 0, None
        iteration, path = saved[-1]
        self.start_iteration = float(iteration)  # progress reports count from here
        with open(path, "rb") as fh:
            return iteration, _load(fh)

    def stop(self, iteration: int, state: Any = None) -> int:
        """Preempted: checkpoint and report; returns the exit status for sys.exit."""
        self.save(iteration, state)
        self._report()
        self.close()
        return EXIT_STOPPED

    def finish(self, iteration: int, state: Any = None) -> int:
        """All done: the final checkpoint and report; returns the exit status for sys.exit."""
        self.save(iteration, state)
        self._progress(iteration, done=True)
        self._report()
        self.close()
        return EXIT_FINISHED

    def close(self) -> None:
        self.gate.close()
        if self._telemetry is not None:
            self._telemetry.close()
            self._telemetry = None

    # -- inside ------------------------------------------------------------------------------
    def _saved(self) -> list[tuple[int, Path]]:
        found = []
        for path in self.checkpoint_dir.glob("ckpt-*.pt"):
            step = path.stem.split("-", 1)[1]
            if step.isdigit():
                found.append((int(step), path))
        return sorted(found)

    def _progress(self, iteration: int, done: bool) -> None:
        if self.managed and self.rank == 0:  # the record the agent and scheduler read
            checkpoint.write(self.checkpoint_dir.parent, checkpoint.Checkpoint(
                job_id=self.id, iterations=float(iteration), total=float(self.iterations),
                node=self.node, done=done))

    def _report(self) -> None:
        """Progress and mean stage times in trace seconds (the planner's unit)."""
        if self._telemetry is None or self._window.iterations == 0:
            return
        summary, scale = self._window.summary(), self.time_scale
        done = self.start_iteration + self._done
        self._telemetry.publish(done, {k: v * scale for k, v in summary["stages"].items()},
                                summary["iteration_time"] * scale)
        self._window.reset()
        self._reported = True


def job(**kwargs: Any) -> Job:
    """This process's job (see `Job`)."""
    return Job(**kwargs)


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
