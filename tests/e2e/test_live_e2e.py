"""The whole live system on loopback: real broker, scheduler, agents, trainers and feeder.

Slow by nature (minutes); each test replays a generated trace time-scaled to finish in about
two minutes and checks what a user would: every job completes exactly once and the report is
produced. The comparison with the simulator here is a pacing check of the emulated trainers
(they run at the pace the scheduler planned and the simulator is charged the overhead this
same run measured, so agreement holds by construction): it is no evidence of the model's
fidelity; tests/e2e/test_live_compare.py is (real torch jobs, a model told only what was measured
before the run). Exactly-once is
checked from the scheduler's records and, independently, from the trainers' own ledgers
(trainer/ledger.py): no two launches of a job overlapped, checkpoints tile each job's
iterations, nothing was counted twice.
"""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from scheduler.presets import get_preset
from scheduler.sim.simulator import simulate
from specs import load_spec, spec_path
from tests.live_system import ROOT, LiveCluster, log_records, wait_for
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
    ledger = live.ledger_verdict({r.job_id: float(r.iterations) for r in records})
    assert ledger.ok, ledger.problems
    assert ledger.finishes == {r.job_id: 1 for r in records}
    return ledger


def test_end_to_end_paces_emulated_trainers_as_the_simulator(cluster, tmp_path):
    records, trace = _trace(tmp_path)
    feeder = cluster.feed(trace)
    status = cluster.wait_finished(N_JOBS, timeout=400)
    assert feeder.wait(timeout=60) == 0
    assert status["counts"]["finished"] == N_JOBS
    _assert_each_job_finished_once(cluster, records)
    out = subprocess.run([sys.executable, "-m", "scheduler.tools.report", str(cluster.run_dir),
                          "--json"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["jobs"] == N_JOBS
    # Pacing check, circular by design: the simulator with the restart overhead this live run
    # measured (decision to progress, in trace seconds at this time scale) in place of the
    # per-model table, against trainers that replay the planned pace.
    overhead = report["restart_overhead_s"]
    assert overhead is not None and overhead > 0
    preset = get_preset("default", overhead_table={}, overhead_default=overhead)
    sim = simulate(records, load_spec(spec_path("n3g4")), "muri-s", preset)
    assert report["avg_jct"] == pytest.approx(sim.summary.avg_jct, rel=0.15), (
        report, sim.summary)


def _victims(live, node: str, t_kill: float) -> set[int]:
    """Jobs whose trainer on `node` was running when its agent died and then stopped without
    finishing (orphaned trainers stop themselves), per the ledger; empty while any trainer
    there has not ended yet."""
    began, ended = set(), {}
    for rec in live.ledger_records():
        if rec["node"] != node:
            continue
        key = (rec["job"], rec["pid"], rec["incarnation"])
        began.add(key)
        if rec["kind"] == "end":
            ended[key] = rec
    if began - set(ended):
        return set()
    return {key[0] for key, rec in ended.items() if rec["t"] > t_kill
            and rec["how"] != "finished"}


def _ran_elsewhere_after(live, jobs: set[int], node: str, t: float) -> bool:
    later = {rec["job"] for rec in live.ledger_records()
             if rec["kind"] == "start" and rec["node"] != node and rec["t_begin"] > t}
    return jobs <= later


def test_a_killed_agent_has_its_jobs_requeued(cluster, tmp_path):
    records, trace = _trace(tmp_path)
    cluster.feed(trace)
    # once something runs on n1, kill its agent outright (its orphaned trainers stop)
    wait_for(lambda: any("n1" in (j.get("nodes") or []) and j.get("state") == "running"
                         for j in (cluster.status() or {}).get("jobs", [])), 120,
             "a job running on n1")
    t_kill = time.time()
    cluster.kill("agent-n1", signal.SIGKILL)
    victims = wait_for(lambda: _victims(cluster, "n1", t_kill), 30,
                       "the ledger to show n1's trainers stopped after the kill")
    wait_for(lambda: "n1" in ((cluster.status() or {}).get("offline") or []), 60,
             "n1 declared dead")
    # n1 stays down until every victim runs again elsewhere: the requeue, seen by trainers
    wait_for(lambda: _ran_elsewhere_after(cluster, victims, "n1", t_kill), 240,
             f"jobs {sorted(victims)} to run again on another node")
    cluster.start_agent(1)
    cluster.wait_finished(N_JOBS, timeout=400)
    ledger = _assert_each_job_finished_once(cluster, records)
    assert all(ledger.runs[j] >= 2 for j in victims), (victims, ledger.runs)
    # and the scheduler's own records say why: requeued because n1's agent was lost
    requeued = {rec["job_id"] for rec in log_records(cluster.run_dir, "job_stopped")
                if "n1" in str(rec.get("reason"))}
    dead = [rec for rec in log_records(cluster.run_dir, "agent_dead") if rec["node"] == "n1"]
    assert victims <= requeued, (victims, requeued)
    assert dead and victims <= set(dead[0]["requeued"]), dead


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
