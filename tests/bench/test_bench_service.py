"""bench/bench_service.py on a tiny cluster: it reports the whole round next to planning.

Real processes (broker, scheduler service) and sockets, as the benchmark runs them. The
whole-round figure needs the service's `round_done` line, logged once the round's stops,
regroups and launches are answered; without it the benchmark cannot tell a round's end.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_whole_round_latency_is_reported_and_covers_every_agent_reply():
    proc = subprocess.run(
        [sys.executable, "bench/bench_service.py", "--agents", "4", "--jobs", "20",
         "--arrivals", "6", "--round-timeout", "30", "--target-ms", "100000"],
        cwd=ROOT, capture_output=True, text=True, timeout=180,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["arrivals"] == 6
    planning, whole = result["planning"], result["whole_round"]
    # the whole round contains its planning, and reaches the agents' replies
    assert whole["median_ms"] >= planning["median_ms"]
    assert whole["p99_ms"] >= whole["median_ms"] > 0
    assert result["rounds_with_agent_work"] >= 1
    # every launch, stop and regroup planned was answered by at least one agent, in its round
    assert result["agent_replies"] >= result["launches"] + result["stops"] + result["regroups"]
    assert result["replies_outside_rounds"] == 0
    assert result["other_rounds_in_window"] == 0
    assert result["agents_declared_dead"] == 0


def test_real_agents_answer_the_rounds_and_keep_their_own_heartbeat_record():
    """--real-agents: the node agent's own code in agent_host.py processes (two agents a
    process here); their replies make the whole round and their heartbeat records come
    back."""
    proc = subprocess.run(
        [sys.executable, "bench/bench_service.py", "--agents", "4", "--jobs", "20",
         "--arrivals", "4", "--round-timeout", "60", "--target-ms", "100000",
         "--real-agents", "--per-host", "2", "--heartbeat", "0.2"],
        cwd=ROOT, capture_output=True, text=True, timeout=240,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["case"].startswith("scheduler service, 4 real agents")
    assert result["agent_replies"] >= result["launches"] + result["stops"] + result["regroups"]
    assert result["rounds_with_agent_work"] >= 1 and result["replies_outside_rounds"] == 0
    assert result["heartbeats_sent"] >= 4  # at least one from each agent after registering
    assert result["false_deaths"] == [] and result["agents_declared_dead"] == 0


def test_a_death_is_false_when_the_agent_s_own_record_shows_a_heartbeat_within_the_timeout():
    sys.path.insert(0, str(ROOT / "bench"))
    from bench_service import false_deaths

    def dead(node, at):
        from datetime import datetime, timezone
        return {"event": "agent_dead", "node": node,
                "ts": datetime.fromtimestamp(at, timezone.utc).isoformat()}

    beats = {"n0": [(100.0, True), (105.0, False)], "n1": [(100.0, True)]}
    # n0 sent at 105, declared at 112 (timeout 10): alive by its record; n1's last was 100
    assert false_deaths([dead("n0", 112.0), dead("n1", 112.0),
                         {"event": "round"}], beats, 10.0) == ["n0 at 112.0"]
    assert false_deaths([dead("n2", 50.0)], beats, 10.0) == []  # no record: not judged alive
