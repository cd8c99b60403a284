"""A paused agent on a real live cluster (broker, scheduler, two agents as processes on
loopback, emulated trainers): its trainers fence themselves before the scheduler runs their
jobs elsewhere, so no job runs twice at once.

The agent of the node running a job is stopped (SIGSTOP) for longer than the scheduler's
`--agent-timeout`: the scheduler declares it dead and relaunches its job on the other node.
The trainers, in sessions of their own, do not stop with their agent: before this, they
trained on, overlapping the relaunch (4 overlapping runs in the issue's try). Now each
trainer reads its agent's lease (renewed whenever the scheduler answers the agent) and,
once it has run out, stops with a checkpoint. The trainers' ledgers are the judge: one run
at a time, no iteration counted twice; and the stale agent's late reports change nothing.
"""
from __future__ import annotations

import os
import signal

from scheduler.tools.jobs import submit_main
from tests.live_system import LiveCluster, log_records, wait_for, write_spec

TIMEOUT = 4.0  # the scheduler's --agent-timeout, wall seconds
ITERATIONS = 250  # 0.1 wall s each: ~25 s alone


def _line(cluster: LiveCluster, job_id: int) -> dict:
    status = cluster.status() or {}
    return next((j for j in status.get("jobs") or [] if j["job_id"] == job_id), {})


def test_a_paused_agents_trainers_stop_before_their_jobs_run_elsewhere(tmp_path):
    cluster = LiveCluster(tmp_path / "run", spec=str(write_spec(tmp_path / "spec.csv", 2, 1)),
                          nodes=2, gpus_per_node=1, policy="fifo", time_scale=10.0,
                          scheduler_args=["--agent-timeout", str(TIMEOUT)])
    try:
        cluster.start()
        ep = str(cluster.endpoints_file)
        assert submit_main(["--endpoints", ep, "--gpus", "1", "--job-id", "1",
                            "--iterations", str(ITERATIONS), "--iteration-time", "1.0"]) == 0
        wait_for(lambda: _line(cluster, 1).get("state") == "running"
                 and _line(cluster, 1).get("iterations_done", 0) > 20, 60, "job 1 to run")
        node = _line(cluster, 1)["nodes"][0]
        agent = cluster.procs[f"agent-{node}"]
        os.kill(agent.pid, signal.SIGSTOP)
        try:
            moved = wait_for(lambda: (line := _line(cluster, 1)).get("state") == "running"
                             and line.get("nodes") and line["nodes"][0] != node, 60,
                             "job 1 to run on the other node")
            assert moved
            # long enough for a trainer that did not fence itself to overlap the relaunch
            wait_for(lambda: _line(cluster, 1).get("iterations_done", 0) > 120, 60,
                     "job 1 to go on elsewhere")
        finally:
            os.kill(agent.pid, signal.SIGCONT)
        wait_for(lambda: _line(cluster, 1).get("state") == "finished", 120, "job 1 to finish")
        verdict = cluster.ledger_verdict({1: float(ITERATIONS)})
        assert verdict.ok and not verdict.overlaps and not verdict.double_counts, verdict
        assert verdict.finishes.get(1) == 1, verdict
        fenced = [r for r in log_records(cluster.run_dir, "trainer_fenced", "trainer")
                  if r.get("job") == 1 or r.get("job_id") == 1]
        assert fenced, "the paused node's trainer never fenced itself"
    finally:
        cluster.stop_all()
