"""The stage loop: one iteration = io, cpu, gpu, net, each behind the gate and timed.

Why this shape: interleaving (DESIGN §1, §4) needs two things from a trainer. Before using a
resource it must ask the node's stage gate for its turn, so that group members take the
resources in cyclic order; and it must measure how long each stage takes, so the scheduler
can keep the job's profile current. The loop knows nothing of models (a `Workload` does the
work) or of sockets (a `Gate` grants turns, a reducer all-reduces). Stage times are taken
while the turn is held and exclude the wait for it; the iteration time includes the waits,
since that is what the job experiences.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, Protocol

from trainer.gate_client import NullGate

STAGES = ("io", "cpu", "gpu", "net")


class Gate(Protocol):
    """Grants a stage's turn: `with gate.turn("gpu"): ...` holds the resource for the block.

    The live implementation is `trainer.gate_client.GateClient(endpoint, job_id)`.
    """

    def turn(self, stage: str) -> ContextManager[Any]: ...


class TimingWindow:
    """Accumulates stage times and iteration times; `summary()` gives the means."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._sums = dict.fromkeys(STAGES, 0.0)
        self._iteration_sum = 0.0
        self.iterations = 0

    def add(self, stages: dict[str, float], iteration_time: float) -> None:
        for name in STAGES:
            self._sums[name] += stages.get(name, 0.0)
        self._iteration_sum += iteration_time
        self.iterations += 1

    def summary(self) -> dict[str, Any]:
        n = max(1, self.iterations)
        return {"stages": {name: self._sums[name] / n for name in STAGES},
                "iteration_time": self._iteration_sum / n, "iterations": self.iterations}


@dataclass(frozen=True)
class Iteration:
    """What one iteration did: its loss, stage times, wall time, and whether all ranks stop."""

    step: int
    loss: float
    stages: dict[str, float]
    iteration_time: float
    stop: bool


Reducer = Callable[[Any, bool], bool]  # (workload, stop vote) -> agreed stop, grads averaged


def local_reduce(workload: Any, stop_vote: bool) -> bool:
    """A single-rank job: nothing to average, its own vote decides."""
    return stop_vote


def make_clock(device: Any) -> Callable[[], float]:
    """time.monotonic, after waiting for the device's queued work when the device is CUDA."""
    if getattr(device, "type", None) == "cuda":
        import torch

        def cuda_clock() -> float:
            torch.cuda.synchronize(device)
            return time.monotonic()

        return cuda_clock
    return time.monotonic


class StageLoop:
    """Runs iterations of `workload`: io=load, cpu=prepare, gpu=compute, net=reduce+apply."""

    def __init__(self, workload: Any, gate: Gate | None = None, reduce: Reducer = local_reduce,
                 clock: Callable[[], float] | None = None):
        self.workload = workload
        self.gate = gate if gate is not None else NullGate()
        self.reduce = reduce
        self.clock = clock if clock is not None else make_clock(workload.device)

    def run(self, step: int, stop_vote: bool = False) -> Iteration:
        w, times = self.workload, {}
        begin = self.clock()
        raw = self._stage("io", times, w.load, step)
        batch = self._stage("cpu", times, w.prepare, raw)
        loss = self._stage("gpu", times, w.compute, batch)
        stop = self._stage("net", times, self._net, stop_vote)
        return Iteration(step, loss, times, self.clock() - begin, stop)

    def _net(self, stop_vote: bool) -> bool:
        stop = self.reduce(self.workload, stop_vote)
        self.workload.apply()
        return stop

    def _stage(self, name: str, times: dict[str, float], fn: Callable[[Any], Any],
               arg: Any) -> Any:
        with self.gate.turn(name):
            t0 = self.clock()
            out = fn(arg)
            times[name] = self.clock() - t0
        return out
