"""The whole live system on loopback: real broker, scheduler, agents, trainers and feeder.

Slow by nature (minutes); each test replays a generated trace time-scaled to finish in about
two minutes and checks what a user would: every job completes exactly once, the report is
produced, and the live result agrees with the simulator's on the same trace.
"""
from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

from scheduler.presets import get_preset
from scheduler.simulator import simulate
from specs import load_spec, spec_path
from tests.live import ROOT, LiveCluster, wait_for
from traces import write_trace
from traces.generate import generate

N_JOBS = 40
SCALE = 250.0  # trace seconds per wall second: the trace's ~26,000 s take ~2 minutes


def _trace(tmp_path):
    records = generate(N_JOBS, 5, max_gpus=4, mean_interarrival=400, median_duration=1200,
                       min_duration=300, max_duration=4 * 3600)
    path = tmp_path / "trace.csv"
    write_trace(path, records)
    return records, path


@pytest.fixture
def cluster(tmp_path):
    live = LiveCluster(tmp_path / "run", spec="n3g4", nodes=3, gpus_per_node=4,
                       time_scale=SCALE)
    try:
        yield live.start()
    finally:
        live.stop_all()


def _assert_each_job_finished_once(live, records):
    finished = [e["job_id"] for e in live.finished_events()]
    assert sorted(finished) == sorted(r.job_id for r in records), "every job exactly once"


def test_end_to_end_matches_the_simulator(cluster, tmp_path):
    records, trace = _trace(tmp_path)
    feeder = cluster.feed(trace)
    status = cluster.wait_finished(N_JOBS, timeout=400)
    assert feeder.wait(timeout=60) == 0
    assert status["counts"]["finished"] == N_JOBS
    _assert_each_job_finished_once(cluster, records)
    out = subprocess.run([sys.executable, "-m", "scheduler.report", str(cluster.run_dir),
                          "--json"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["jobs"] == N_JOBS
    # The simulator with the restart overhead this live run measured (decision to progress,
    # in trace seconds at this time scale) in place of the per-model table.
    overhead = report["restart_overhead_s"]
    assert overhead is not None and overhead > 0
    preset = get_preset("default", overhead_table={}, overhead_default=overhead)
    sim = simulate(records, load_spec(spec_path("n3g4")), "muri-s", preset)
    assert report["avg_jct"] == pytest.approx(sim.summary.avg_jct, rel=0.15), (
        report, sim.summary)


def test_a_killed_agent_has_its_jobs_requeued(cluster, tmp_path):
    records, trace = _trace(tmp_path)
    cluster.feed(trace)
    # once something runs on n1, kill its agent and trainers outright
    wait_for(lambda: any("n1" in (j.get("nodes") or []) and j.get("state") == "running"
                         for j in (cluster.status() or {}).get("jobs", [])), 120,
             "a job running on n1")
    cluster.kill("agent-n1", signal.SIGKILL)
    wait_for(lambda: "n1" in ((cluster.status() or {}).get("offline") or []), 60,
             "n1 declared dead")
    cluster.start_agent(1)
    cluster.wait_finished(N_JOBS, timeout=400)
    _assert_each_job_finished_once(cluster, records)


def test_scheduler_and_broker_restarts_lose_and_duplicate_nothing(cluster, tmp_path):
    records, trace = _trace(tmp_path)
    feeder = cluster.feed(trace)
    wait_for(lambda: cluster.finished_count() >= 5, 200, "5 jobs to finish")
    cluster.kill("scheduler", signal.SIGKILL)
    cluster.start_scheduler()
    wait_for(lambda: cluster.finished_count() >= 10, 200, "10 jobs to finish after restart")
    cluster.kill("broker", signal.SIGKILL)
    cluster.start_broker()  # same ports: every component reconnects by itself
    cluster.wait_finished(N_JOBS, timeout=400)
    assert feeder.wait(timeout=120) == 0
    _assert_each_job_finished_once(cluster, records)
