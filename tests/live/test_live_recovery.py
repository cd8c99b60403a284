"""A restarted scheduler must not start a second copy of a job whose trainer still runs on a
node whose agent has not re-registered yet (found by the trainers' ledger in chaos runs: the
first agent back triggered a round that launched the journal's running jobs on its node, while
their trainers still ran elsewhere, until those were stopped as strays a second later).

Real processes: broker, scheduler, two agents, emulated trainers. The slow agent is paused
(SIGSTOP: its trainers, in sessions of their own, run on) across the scheduler's restart, so
the other agent registers first; the trainers' ledgers then judge whether any job ran twice.
"""
from __future__ import annotations

import os
import signal
import threading
import time

from tests.live_system import LiveCluster, wait_for
from traces import write_trace
from traces.generate import generate

SCALE = 100.0


def _running_on(cluster: LiveCluster, node: str) -> list[int]:
    jobs = (cluster.status() or {}).get("jobs") or []
    return [j["job_id"] for j in jobs if j.get("state") == "running" and node in j["nodes"]]


def _second_copies(cluster: LiveCluster, jobs: set[int], since: float,
                   window: float) -> list[dict]:
    """Ledger starts of `jobs` on another node than n1 after `since`, watched for `window` s."""
    def found() -> list[dict]:
        return [r for r in cluster.ledger_records() if r.get("kind") == "start"
                and r.get("job") in jobs and r.get("node") != "n1" and r.get("t", 0) > since]
    pause = threading.Event()
    deadline = time.monotonic() + window
    while time.monotonic() < deadline and not found():
        pause.wait(0.1)
    return found()


def test_a_restarted_scheduler_waits_for_the_nodes_that_ran_its_jobs(tmp_path):
    records = generate(2, 3, backlog=True, max_gpus=1, median_duration=4000,
                       min_duration=3000, max_duration=6000)
    trace = tmp_path / "trace.csv"
    write_trace(trace, records)
    # a long agent timeout: the paused agent must count as slow, not dead
    cluster = LiveCluster(tmp_path / "run", spec="n2g8", nodes=2, gpus_per_node=8,
                          policy="srsf", time_scale=SCALE,
                          scheduler_args=["--agent-timeout", "30"])
    try:
        # n1 alone at first, so the jobs run there; then n0 joins, empty
        cluster.run_dir.mkdir(parents=True)
        cluster.start_broker()
        cluster.start_scheduler()
        cluster.start_agent(1)
        wait_for(lambda: cluster._online() == 1, 60, "n1 to register")
        cluster.feed(trace)
        on_n1 = wait_for(lambda: len(_running_on(cluster, "n1")) == len(records)
                         and _running_on(cluster, "n1"), 60, "every job running on n1")
        wait_for(lambda: len(cluster.ledger_records()) >= len(records), 30,
                 "the trainers' ledgers")
        cluster.start_agent(0)
        wait_for(lambda: cluster._online() == 2, 60, "n0 to register")
        on_n1 = _running_on(cluster, "n1") or on_n1
        agent = cluster.procs["agent-n1"]
        os.killpg(agent.pid, signal.SIGSTOP)
        try:
            cluster.kill("scheduler", signal.SIGKILL)
            restarted_at = time.time()
            cluster.start_scheduler()
            wait_for(lambda: "n0" in ((cluster.status() or {}).get("agents") or {}), 60,
                     "n0 to register with the restarted scheduler")
            # while n1 is silent, no job of n1's may start anywhere else: watch the trainers'
            # ledgers for a bounded window (an absence can only be observed over a window)
            second = _second_copies(cluster, set(on_n1), restarted_at, window=5.0)
            assert not second, f"started again while still running on n1: {second}"
        finally:
            os.killpg(agent.pid, signal.SIGCONT)
        status = cluster.wait_finished(len(records), timeout=300)
        assert status["counts"]["finished"] == len(records)
        finished = sorted(e["job_id"] for e in cluster.finished_events())
        assert finished == sorted(r.job_id for r in records)
        verdict = cluster.ledger_verdict({r.job_id: float(r.iterations) for r in records})
        assert verdict.ok, (on_n1, verdict.problems)
    finally:
        cluster.stop_all()
