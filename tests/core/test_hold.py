"""A job held back until a time (a failed job's backoff): no round plans it before then, the
round wakes when the hold ends, and its stop is no preemption. Applied by the loop from a
`RunFailed` event, as the live scheduler hands it."""
from __future__ import annotations

import pytest

from scheduler.core.engine import Core, SchedulingError
from scheduler.core.state import Status
from scheduler.core.waiting import why_waiting
from scheduler.events import RunFailed
from scheduler.loop import Loop
from scheduler.plugins import make_policy
from scheduler.presets import get_preset
from tests.helpers import job, spec


def core_of(policy: str = "fifo", gpus: int = 1) -> Core:
    preset = get_preset("default")
    return Core(spec(nodes=1, gpus=gpus), make_policy(policy, preset), preset.model)


class _Raises:
    def refused(self, event, error):
        raise error


@pytest.mark.parametrize("policy", ["fifo", "srsf", "muri-s", "tiresias", "antman"])
def test_a_failed_job_waits_out_its_hold_then_runs_and_its_stop_is_no_preemption(policy):
    core = core_of(policy)
    core.submit(job(1, iterations=100), 0.0)
    core.submit(job(2, iterations=100), 0.0)
    core.round(0.0)
    first = next(j.id for j in core.running_jobs())
    other = 3 - first
    Loop(core, _Raises()).apply([RunFailed(first, 5.0, 80.0, not_before=65.0)])
    job_ = core.jobs[first]
    assert (job_.status, job_.preemptions, job_.remaining) == (Status.PENDING, 0, 80.0)
    assert core.held_until(first) == 65.0
    core.advance(10.0)
    plan = core.round(10.0)
    running = [j for g in plan.groups for j in g.jobs]
    assert first not in running and other in running  # the other job takes its GPU
    assert plan.wakeup is not None and plan.wakeup <= 65.0
    why = why_waiting(core)[first]
    assert (why.reason, why.until) == ("backoff", 65.0)
    core.finish(other, 20.0)
    plan = core.round(20.0)
    assert first not in [j for g in plan.groups for j in g.jobs]  # a free GPU: still held
    core.advance(65.0)
    plan = core.round(65.0)
    assert first in [j for g in plan.groups for j in g.jobs]
    assert core.held_until(first) is None and core.jobs[first].preemptions == 0


def test_a_finished_job_drops_its_hold_and_a_bad_hold_is_refused():
    core = core_of()
    core.submit(job(1), 0.0)
    core.hold(1, 30.0)
    core.finish(1, 1.0)
    assert core.held_until(1) is None
    core.hold(1, 50.0)  # ended: nothing to hold
    assert core.held_until(1) is None
    core.submit(job(2), 0.0)
    with pytest.raises(SchedulingError, match="finite"):
        core.hold(2, float("inf"))
    with pytest.raises(SchedulingError, match="unknown job"):
        core.hold(9, 1.0)


def test_a_stop_outside_a_plan_still_counts_as_a_preemption():
    core = core_of()
    core.submit(job(1), 0.0)
    core.round(0.0)
    core.stop(1, 1.0)
    assert core.jobs[1].preemptions == 1
