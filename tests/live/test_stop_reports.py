"""The end of a stop that no round waits for any more (e.g. sent to a scheduler that has
restarted since it asked): a job that completed is finished, a job that runs again is left
alone (never run twice), a waiting job resumes from the stop's checkpoint.

A real broker and scheduler service with fake agents (tests/live/test_service.py's harness).
"""
from __future__ import annotations

import queue

from scheduler.live.journal import Journal
from tests.helpers import job, spec
from tests.live.test_service import _job_1_running_on_n0, harness, wait_for  # noqa: F401 (fixture)


def _stopped(h, job_id: int, iterations: float, **extra) -> dict:
    return h.request("job.stopped", job_id=job_id, node="n0", iterations=iterations,
                     requested=True, **extra)


def test_an_unawaited_stop_report_settles_a_waiting_job(harness):
    h = harness(spec=spec(nodes=1, gpus=4))
    h.start_scheduler()  # no agent yet: submitted jobs wait
    h.submit(job(1, num_gpu=4, iterations=100))
    h.submit(job(2, num_gpu=4, iterations=100))
    assert _stopped(h, 1, 40.0, finished=False, exit_code=3) == {"settled": True}
    assert _stopped(h, 1, 30.0, finished=False, exit_code=3) == {"settled": True}  # older
    assert h.job(1)["iterations_done"] == 40 and h.job(1)["state"] == "pending"
    assert _stopped(h, 2, 100.0, finished=True, exit_code=0) == {"finished": True}
    assert h.job(2)["state"] == "finished"
    log = Journal(h.run_dir / "journal.db")
    try:
        assert log.get(1).iterations_done == 40 and log.get(1).state == "submitted"
        assert log.get(2).state == "finished"
    finally:
        log.close()
    n0 = h.agent("n0")
    launch = n0.next_launch()  # job 1 resumes from the stop's checkpoint; 2 never runs again
    assert launch["job_id"] == 1 and launch["start_iteration"] == 40
    wait_for(lambda: h.job(1)["state"] == "running")
    assert n0.launches.empty()


def test_an_unawaited_stop_report_leaves_a_job_that_runs_again_alone(harness):
    h = harness(spec=spec(nodes=1, gpus=4))
    n0 = _job_1_running_on_n0(h)
    assert _stopped(h, 1, 10.0, finished=False, exit_code=3) == {"ignored": True}
    assert h.job(1)["state"] == "running" and h.job(1)["preemptions"] == 0
    h.status()  # a later request: a round in between would have acted by now
    assert n0.stops.empty()
    try:
        extra = n0.launches.get(timeout=1.0)
    except queue.Empty:
        extra = None
    assert extra is None, "job 1 launched a second time"
