"""The stage loop without torch: gate turns in stage order, stage work inside its turn, timing."""
from __future__ import annotations

import contextlib

import pytest

from trainer.gate_client import NullGate
from trainer.stages import STAGES, StageLoop, TimingWindow


class RecordingGate:
    """A fake gate that records every turn it grants (enter and leave)."""

    def __init__(self, log: list):
        self.log = log

    @contextlib.contextmanager
    def turn(self, stage: str):
        self.log.append(("enter", stage))
        yield
        self.log.append(("leave", stage))


class FakeWorkload:
    """Records which stage method ran, between the gate's enter and leave records."""

    device = None

    def __init__(self, log: list):
        self.log = log

    def load(self, step):
        self.log.append(("work", "load"))
        return step

    def prepare(self, raw):
        self.log.append(("work", "prepare"))
        return raw * 10

    def compute(self, batch):
        self.log.append(("work", "compute"))
        return float(batch)

    def apply(self):
        self.log.append(("work", "apply"))


class FakeClock:
    """Advances by a fixed step each reading: stage times become exact numbers."""

    def __init__(self, step: float):
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def test_gate_is_asked_for_each_stage_in_order_and_work_runs_inside_the_turn():
    log: list = []
    votes = []

    def reduce(workload, vote):
        log.append(("work", "reduce"))
        votes.append(vote)
        return vote

    loop = StageLoop(FakeWorkload(log), RecordingGate(log), reduce, clock=FakeClock(1.0))
    first = loop.run(3)
    second = loop.run(4, stop_vote=True)
    one_iteration = [("enter", "io"), ("work", "load"), ("leave", "io"),
                     ("enter", "cpu"), ("work", "prepare"), ("leave", "cpu"),
                     ("enter", "gpu"), ("work", "compute"), ("leave", "gpu"),
                     ("enter", "net"), ("work", "reduce"), ("work", "apply"), ("leave", "net")]
    assert log == one_iteration * 2
    assert [e[1] for e in log if e[0] == "enter"] == list(STAGES) * 2
    assert first.loss == 30.0 and second.loss == 40.0
    assert (first.stop, second.stop) == (False, True) and votes == [False, True]


def test_stage_times_exclude_the_wait_for_the_turn_and_iteration_time_includes_it():
    clock = FakeClock(0.5)

    class SlowGate:  # every turn costs one clock reading before the stage starts
        def turn(self, stage):
            clock()
            return contextlib.nullcontext()

    result = StageLoop(FakeWorkload([]), SlowGate(), clock=clock).run(0)
    assert result.stages == {s: 0.5 for s in STAGES}
    # begin, then per stage: gate wait, t0, t1 -> 1 + 4*3 readings, the end is the 14th
    assert result.iteration_time == pytest.approx(13 * 0.5)


def test_timing_window_means_and_reset():
    w = TimingWindow()
    assert w.summary()["iterations"] == 0
    w.add({"io": 1.0, "cpu": 2.0, "gpu": 3.0, "net": 4.0}, 10.0)
    w.add({"io": 3.0, "cpu": 0.0, "gpu": 5.0, "net": 0.0}, 12.0)
    assert w.summary() == {"stages": {"io": 2.0, "cpu": 1.0, "gpu": 4.0, "net": 2.0},
                           "iteration_time": 11.0, "iterations": 2}
    w.reset()
    assert w.summary() == {"stages": dict.fromkeys(STAGES, 0.0), "iteration_time": 0.0,
                           "iterations": 0}


def test_null_gate_grants_at_once():
    with NullGate().turn("gpu") as granted:
        assert granted is None
