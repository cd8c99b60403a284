"""A request timeout is not a death: only heartbeats decide that an agent is gone.

A real broker and scheduler service with a fake agent (tests/live/test_service.py's harness) that
answers a launch only after the scheduler stopped waiting: the launch happened unheard, so
the scheduler stops it as a stray and launches the job again, and the agent stays online.
"""
from __future__ import annotations

import threading

from scheduler.live.journal import Journal
from tests.helpers import job, spec
from tests.live.test_service import DEADLINE, FakeAgent, harness, wait_for  # noqa: F401 (fixture)

SLOW_ANSWER_S = 1.0  # the first launch's answer; the scheduler waits 2 x 0.2 s for it


class SlowFirstLaunch(FakeAgent):
    """Carries out its first launch at once but answers it SLOW_ANSWER_S later (heartbeats,
    from its own thread, go on meanwhile)."""

    def __init__(self, *args, **kwargs):
        self.slowed = threading.Event()
        super().__init__(*args, **kwargs)

    def _handle(self, msg):
        reply = super()._handle(msg)
        if msg.type == "job.launch" and not self.slowed.is_set():
            self.slowed.set()
            threading.Event().wait(SLOW_ANSWER_S)  # the slow answer itself
        return reply


def test_a_launch_that_times_out_leaves_the_agent_online_and_is_stopped_as_a_stray(harness):
    h = harness(spec=spec(nodes=1, gpus=4), agent_request_timeout=0.2, agent_request_retries=1,
                agent_timeout=30.0)
    h.start_scheduler()
    n0 = SlowFirstLaunch(h.endpoints, "n0")
    h.agents.append(n0)  # closed with the harness
    h.wait_online("n0")
    h.submit(job(1, num_gpu=4, iterations=100_000))
    assert n0.next_launch()["job_id"] == 1  # carried out; its answer comes too late
    assert n0.stops.get(timeout=DEADLINE) == 1  # the launch heard of too late: a stray
    relaunch = n0.next_launch()
    assert relaunch["job_id"] == 1
    wait_for(lambda: h.job(1)["state"] == "running")
    assert n0.slowed.is_set() and n0.registrations == 1  # never had to register again
    assert "n0" in h.status()["agents"]
    with Journal(h.run_dir / "journal.db") as log:
        kinds = {event[1] for event in log.events()}  # (ts, kind, job, node, detail)
    assert "agent_registered" in kinds and "agent_dead" not in kinds


class NeverReportsStop(FakeAgent):
    """Answers job.stop `stopping` like the node agent, but its report never comes."""

    def _handle(self, msg):
        if msg.type == "job.stop":
            with self._lock:
                self.stops.put(msg["job_id"])
                return {"stopping": True, "was_running": msg["job_id"] in self.running,
                        "iterations": self.running.get(msg["job_id"], 0.0), "finished": False}
        return super()._handle(msg)


def test_a_round_waiting_for_a_stop_ends_when_the_agent_stops_heartbeating(harness):
    h = harness(spec=spec(nodes=2, gpus=4), agent_timeout=2.0)
    h.start_scheduler()
    n0 = NeverReportsStop(h.endpoints, "n0")
    h.agents.append(n0)
    h.wait_online("n0")
    h.submit(job(1, num_gpu=4, iterations=100_000))
    assert n0.next_launch()["job_id"] == 1
    h.submit(job(2, num_gpu=4, iterations=10))  # shorter: SRSF preempts job 1 for it
    assert n0.stops.get(timeout=DEADLINE) == 1
    # the round waits for job 1's stop to be reported: its GPUs are not free yet
    h.status()
    assert n0.launches.empty() and h.job(2)["state"] == "pending"
    n0.pause()  # no more heartbeats: after agent_timeout, n0 is dead and the wait ends
    wait_for(lambda: "n0" in h.status()["offline"])
    assert h.job(1)["state"] == "pending" and h.job(2)["state"] == "pending"
    n1 = h.agent("n1")
    assert n1.next_launch()["job_id"] == 2  # the round went on: job 2 runs on n1
    assert n0.launches.empty()  # nothing ever launched on GPUs not known to be free
    with Journal(h.run_dir / "journal.db") as log:
        dead = [e for e in log.events() if e[1] == "agent_dead"]
    assert len(dead) == 1 and dead[0][4]["requeued"] == [1]
