"""bench/churn.py on a tiny cluster: it counts what the core's own plan comparison says each
arrival changed, and a backlog that fits the cluster changes nothing running."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_arrivals_onto_a_roomy_cluster_restart_nothing(tmp_path):
    sys.path.insert(0, str(ROOT / "bench"))
    from churn import run

    # 8 nodes x 8 GPUs, 10 jobs of at most 8 GPUs: every job runs alone, arrivals only start
    roomy = run(8, 10, 3, "srsf", "default", tmp_path, 1.0)
    assert roomy["restarts_per_arrival"] == 0 and roomy["started_per_arrival"] == 1
    busy = run(2, 60, 4, "muri-s", "default", tmp_path, 1.0)
    assert busy["restarts_per_arrival"] == busy["stopped_per_arrival"] + \
        busy["regrouped_per_arrival"]


def test_settling_rounds_are_counted_apart_from_arrivals(tmp_path):
    sys.path.insert(0, str(ROOT / "bench"))
    from churn import run

    # a roomy cluster: the first plan runs everything alone and nothing moves after it
    roomy = run(8, 10, 2, "srsf", "default", tmp_path, 1.0, settle=3)
    assert roomy["settling_changes"] == [0, 0, 0]
    assert roomy["restarts_per_arrival"] == 0 and roomy["largest"] == 0
