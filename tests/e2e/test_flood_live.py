"""Floods tried from outside against a live cluster (a broker, a scheduler, two agents running
emulated trainers, on loopback): clients pipelining submits, and clients querying status far
past their rate limit. What must hold (docs/security.md, "Floods"): no agent is declared dead
and no job requeued, an operator's status query is answered within OPERATOR_BOUND_S during
the flood and within AFTER_BOUND_S once it ends, every flood request gets an answer (a reply,
or `overloaded` / `rate_limited` saying to slow down), what was acknowledged is journaled once,
and the broker's memory stays bounded."""
from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from tests.e2e.test_security_live import _journaled
from tests.flood import Probe, run_floods
from tests.helpers import job
from tests.live_system import LiveCluster, log_records, wait_for, write_spec
from traces.feeder import job_map

OPERATOR_BOUND_S = 2.0   # an operator's status query, answered during a flood
AFTER_BOUND_S = 1.0      # ...and within this once the flood has stopped
RSS_GROWTH_MB = 60       # what a flood may add to the broker's resident memory


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


@pytest.fixture
def cluster(tmp_path):
    c = LiveCluster(tmp_path / "run", spec=str(write_spec(tmp_path / "spec.csv", 2, 2)),
                    nodes=2, gpus_per_node=2, policy="fifo", time_scale=10.0)
    c.start()
    requester = c.requester("test", timeout=5.0, retries=3)
    try:  # long jobs, one per GPU: each would run again from its start were its agent dead
        for j in range(4):
            body = requester.request("scheduler", "job.submit",
                                     job=job_map(job(j, iterations=100_000))).get("body")
            assert body["accepted"], body
    finally:
        requester.close()
    wait_for(lambda: (c.status() or {}).get("counts", {}).get("running") == 4, 60,
             "the four long jobs to run")
    yield c
    for name in ("agent-n0", "agent-n1", "scheduler"):
        c.kill(name, signal.SIGTERM)
    c.stop_all()


def _flood(cluster: LiveCluster, kind: str, n: int, rate: float = 0.0,
           patience: float = 30.0) -> list[dict]:
    return run_floods(cluster.endpoints_file, kind, n, rate, patience)


def _probe(cluster: LiveCluster) -> Probe:
    probe = Probe(cluster.requester("operator", timeout=10.0, retries=0))
    probe.start()
    return probe


def _no_false_death(cluster: LiveCluster) -> None:
    assert log_records(cluster.run_dir, "agent_dead") == []
    status = cluster.status()
    assert all(a["online"] for a in status["agents"].values()), status["agents"]
    for j in status["jobs"][:4]:  # never stopped, so never preempted or requeued
        assert j["job_id"] < 4 and j["state"] == "running" and not j.get("preemptions"), j


def _each_answered(results: list[dict], allowed: set[str]) -> None:
    for r in results:
        assert r["unanswered"] == 0, r
        assert set(r["answers"]) <= allowed, r["answers"]


def test_pipelined_submits_from_four_clients_starve_no_heartbeat_and_no_operator(cluster):
    probe = _probe(cluster)
    time.sleep(1.0)
    began = time.monotonic()
    results = _flood(cluster, "submit", 5000)
    ended = time.monotonic()
    time.sleep(2.0)
    probe.stop.set()
    probe.join()
    _each_answered(results, {"ok", "overloaded", "rate_limited"})
    acknowledged = [j for r in results for j in r["jobs"]]
    journaled = [j for j, _ in _journaled(cluster.run_dir)]
    assert len(set(acknowledged)) == len(acknowledged)
    assert set(acknowledged) <= set(journaled) and len(journaled) == len(set(journaled))
    _no_false_death(cluster)
    print("flood:", [(r["answers"], r["total_s"]) for r in results],
          "operator worst during", probe.worst(began, ended), "after", probe.worst(ended + 1.0))
    assert probe.worst(began, ended) <= OPERATOR_BOUND_S
    assert probe.worst(ended + 1.0) <= AFTER_BOUND_S


def test_status_queries_far_past_the_rate_limit_leave_no_backlog_and_bounded_memory(cluster):
    # over 1,000 jobs waiting (some of the 2,000 pipelined are answered `overloaded`): each
    # query lists them all, so the scheduler cannot keep up
    queued = _flood(cluster, "submit", 500)
    assert sum(r["answers"].get("ok", 0) for r in queued) >= 1000, queued
    broker = cluster.procs["broker"].pid
    rss_before = _rss_mb(broker)
    probe = _probe(cluster)
    time.sleep(1.0)
    began = time.monotonic()
    # each client leaves 2 s after its last query: what it did not get by then is never read
    results = _flood(cluster, "status", 12_500, rate=1250.0, patience=2.0)
    rss_after = _rss_mb(broker)
    ended = began + max(r["send_s"] for r in results) + 0.5  # +0.5: a flooder's start-up
    time.sleep(2.0)
    probe.stop.set()
    probe.join()
    for r in results:
        assert set(r["answers"]) <= {"ok", "overloaded", "rate_limited"}, r["answers"]
    _no_false_death(cluster)
    print("flood:", [(r["answers"], r["unanswered"]) for r in results], "rss", rss_before,
          rss_after, "operator worst during", probe.worst(began, ended), "after",
          probe.worst(ended + 1.0))
    assert rss_after - rss_before <= RSS_GROWTH_MB
    assert probe.worst(began, ended) <= OPERATOR_BOUND_S
    assert probe.worst(ended + 1.0) <= AFTER_BOUND_S
