"""The packaged trainers' loop, a client of trainer/api.py's Job as a user's script is.

Why one loop: the emulated and the torch trainer differ only in their workload (stages that
sleep for their profiled times, or a model that trains), so how an iteration runs (the stage
loop, through the job's gate and timing), when a stop is honoured, when the job is done and
what each of those logs is written here once, over the Job's contract acts.

A single rank honours a stop at the next iteration's start, and a workload that abandons an
iteration on a stop (the emulated one, whose iterations can last seconds) at once; ranks of
one job stop only where they agreed to (the vote rides in the gradient all-reduce), so all
of them stop after the same iteration. The end wins over a stop that comes with it.
"""
from __future__ import annotations

import math
from typing import Any, Callable

from trainer.api import Job
from trainer.stages import Reducer, StageLoop, local_reduce


def train(job: Job, workload: Any, total: float, log: Any, *,
          state: Callable[[], Any] = lambda: None, reduce: Reducer = local_reduce,
          position: Callable[[], float] | None = None,
          before_stop: Callable[[], None] = lambda: None,
          finished: Callable[[], dict] = dict) -> int:
    """Run `workload` from where `job.resume()` left it to `total`; returns the exit status.

    `state()` is what a stop or the finish saves; `position()`, for a workload whose progress
    is a function of time, says where it stands (else each iteration is one); `before_stop`
    runs as a stop begins, before the position is read; `finished()` gives extra fields for
    the trainer_finished log line (read before the final report resets the window).
    """
    loop = StageLoop(workload, job, reduce, clock=job.clock)
    where = position if position is not None else (lambda: job.position)
    alone = job.world_size == 1
    start = step = int(job.position)  # the iteration index a torch workload reads its data by
    first = True
    while where() < total:
        if alone and job.should_stop():
            return _stop(job, log, state, where, before_stop)
        it = loop.run(step, stop_vote=job.should_stop())
        step += 1
        if not math.isfinite(it.loss):
            raise FloatingPointError(f"loss is {it.loss} at iteration {step}")
        job.step(None if position is None else position())
        if first and job.restart_overhead is not None:
            log.info("trainer_first_iteration", restart_overhead_s=job.restart_overhead,
                     iteration=job.position, resumed=start > 0)
        first = False
        if it.stop and where() < total:
            return _stop(job, log, state, where, before_stop)
    fields = finished()
    rc = job.finish(total, state())
    log.info("trainer_finished", iterations=total, **fields)
    return rc


def _stop(job: Job, log: Any, state: Callable[[], Any], where: Callable[[], float],
          before_stop: Callable[[], None]) -> int:
    before_stop()
    snapshot = state()
    at = where()  # after them: for a workload paced by time, the time they took counts
    rc = job.stop(at, snapshot)
    log.info("trainer_stopped", iterations=at, orphaned=job.orphaned)
    return rc
