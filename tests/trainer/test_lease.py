"""The agent's lease and a trainer's watch on it (node_agent/lease.py, trainer/lease.py)."""
from __future__ import annotations

from node_agent.lease import Lease
from trainer.lease import LeaseWatch


class Clock:
    def __init__(self, t: float = 1000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_a_trainer_is_fenced_once_its_agents_lease_has_run_out_and_stays_so(tmp_path):
    wall, ticks = Clock(), Clock(0.0)
    lease = Lease(tmp_path / "lease-n0", seconds=5.0, clock=wall)
    lease.renew()
    watch = LeaseWatch(lease.path, every=0.2, clock=wall, ticks=ticks)
    assert not watch.expired()
    wall.t += 4.9
    ticks.t += 1.0
    assert not watch.expired()
    lease.renew()  # the scheduler answered the agent: 5 s more
    wall.t += 4.9
    ticks.t += 1.0
    assert not watch.expired()
    wall.t += 0.2  # 5.1 s since the last renewal
    assert not watch.expired()  # looked 0 s ago: the file is read at most every 0.2 s
    ticks.t += 0.2
    assert watch.expired() and watch.fenced
    lease.renew()  # too late: its job may run elsewhere by now
    ticks.t += 1.0
    assert watch.expired()


def test_no_lease_or_an_unreadable_one_fences_nothing(tmp_path):
    wall = Clock()
    assert not LeaseWatch(None, clock=wall).expired()
    assert not LeaseWatch(tmp_path / "missing", clock=wall).expired()
    bad = tmp_path / "bad"
    bad.write_text("not a time\n")
    assert not LeaseWatch(bad, clock=wall).expired()
    nan = tmp_path / "nan"
    nan.write_text("nan\n")
    assert not LeaseWatch(nan, clock=wall).expired()


def test_the_trainer_api_stops_a_fenced_job(tmp_path):
    from trainer import api

    lease = tmp_path / "lease-n0"
    lease.write_text("1.0\n")  # ran out long ago
    env = {"INTERLACE_JOB_ID": "3", "INTERLACE_CHECKPOINT_DIR": str(tmp_path / "job-3"),
           "INTERLACE_ITERATIONS": "10", "INTERLACE_LEASE_FILE": str(lease)}
    job = api.Job(environ=env, handle_sigterm=False)
    assert job.should_stop() and job.fenced
    lease.write_text("9e12\n")  # far ahead
    fresh = api.Job(environ=env, handle_sigterm=False)
    assert not fresh.should_stop()
    outside = api.Job(environ={k: v for k, v in env.items() if k != "INTERLACE_JOB_ID"},
                      handle_sigterm=False)
    lease.write_text("1.0\n")
    assert not outside.should_stop()  # a standalone run has no agent and no lease
