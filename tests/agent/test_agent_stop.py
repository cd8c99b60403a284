"""A stop the node agent carries out off its service thread: the request is answered at once
(`stopping`), the agent goes on answering other requests while the trainer checkpoints, and
the stop's end comes as a `job.stopped` report (`requested`) through the outbox.

The agent and its trainers are real processes (tests/agent/test_agent.py's harness); the trainers
are made slow to checkpoint by the test knob trainer.run.TEST_SLOW_STOP_ENV.
"""
from __future__ import annotations

import pytest

from trainer import checkpoint
from tests.agent.test_agent import Cluster, gone
from trainer.run import TEST_SLOW_STOP_ENV

# two torch ranks starting (interpreter, torch import, gloo) took over 15 s at load 10 on 2 cores
TORCH_START_S = 90.0
SLOW_STOP_S = 3.0  # each trainer's stop checkpoint takes this long (the agent's stop timeout is 5)


@pytest.fixture
def slow_cluster(tmp_path, monkeypatch):
    monkeypatch.setenv(TEST_SLOW_STOP_ENV, str(SLOW_STOP_S))  # inherited by agent and trainers
    c = Cluster(tmp_path)
    c.sched.wait(lambda: c.sched.of("agent.register"), "the agent to register")
    yield c
    c.close()


def test_the_agent_answers_other_requests_while_a_stop_is_in_progress(slow_cluster):
    c = slow_cluster
    slow = c.launch(41, total=10**6, gpus=(0,))["body"]["pid"]
    other = c.launch(42, total=10**6, gpus=(1,))["body"]["pid"]
    c.wait_running(41)
    c.wait_running(42)

    first = c.to_agent("job.stop", job_id=41)["body"]
    assert first["stopping"] is True and first["was_running"] is True
    # the trainer takes SLOW_STOP_S to checkpoint; meanwhile every request is answered
    status = c.to_agent("status.query")["body"]
    again = c.to_agent("job.stop", job_id=41)["body"]  # idempotent: still stopping
    launched = c.launch(43, total=10**6, gpus=(0,))["body"]
    regrouped = c.to_agent("job.regroup", job_id=42, group=[42, 43], slot=0,
                           iteration_time=10.0)["body"]
    # ...all before the stop ended: its trainer still runs and nothing was reported
    assert not gone(slow) and not c.sched.of("job.stopped", 41)
    assert {r["job_id"] for r in status["running"]} == {41, 42}
    assert again["stopping"] is True and again["was_running"] is True
    assert launched["launched"] is True and regrouped["regrouped"] is True

    report = c.sched.wait(lambda: c.sched.of("job.stopped", 41), "job 41's stop report")[0]
    assert report["requested"] is True and report["finished"] is False
    assert report["exit_code"] == 3 and report["node"] == "n0"
    assert report["iterations"] == checkpoint.iterations(c.run_dir / "checkpoints", 41) > 0
    assert gone(slow)
    # once stopped, a stop answers at once with the checkpoint, as for any job not running
    after = c.to_agent("job.stop", job_id=41)["body"]
    assert after["was_running"] is False and after["iterations"] == report["iterations"]
    beats = c.sched.wait_heartbeats(2)
    assert all({r["job_id"] for r in b["running"]} == {42, 43} for b in beats)
    assert len(c.sched.of("job.stopped", 41)) == 1  # one stop, one report
    assert not gone(other) and not c.sched.of("job.stopped", 42)


def test_a_two_rank_torch_job_is_stopped_off_the_service_thread(slow_cluster):
    """Both ranks of a real torch job on this node get the stop; the report comes once both
    have checkpointed (the knob only slows emulated trainers)."""
    pytest.importorskip("torch", reason="the torch trainers need the train extra")
    c = slow_cluster
    config = {"seq_len": 16, "d_model": 32, "layers": 1, "heads": 2, "ff": 64}
    body = c.to_agent("job.launch", job_id=51, gpus=[0, 1], group=[51], slot=0,
                      start_iteration=0, rank=0, world_size=2,
                      workload={"kind": "torch", "iterations": 10**6, "model": "bert",
                                "config": config})["body"]
    assert body["launched"] is True
    c.wait_running(51, deadline=TORCH_START_S)
    pids = [r["pids"] for r in _agent_records(c, "job_launched") if r["job"] == 51][0]
    assert len(pids) == 2
    assert c.to_agent("job.stop", job_id=51)["body"]["stopping"] is True
    report = c.sched.wait(lambda: c.sched.of("job.stopped", 51), "job 51's stop report",
                          TORCH_START_S)[0]
    assert report["requested"] is True and report["exit_code"] == 3
    assert report["iterations"] == checkpoint.iterations(c.run_dir / "checkpoints", 51) > 0
    assert all(gone(pid) for pid in pids)


def _agent_records(c, event: str) -> list[dict]:
    from tests.live_system import log_records

    return log_records(c.run_dir, event, "agent")
