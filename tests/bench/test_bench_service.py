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
