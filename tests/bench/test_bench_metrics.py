"""bench/bench_metrics.py on a tiny cluster: both sides get arrivals, the scraped side was
really scraped (no failed scrape), and the overhead is reported from the two sides."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_scrape_cost_is_measured_against_quiet_rounds_of_the_same_run():
    proc = subprocess.run(
        [sys.executable, "bench/bench_metrics.py", "--agents", "4", "--jobs", "20",
         "--arrivals", "8", "--block", "2", "--round-timeout", "30", "--in-process-rounds", "6"],
        cwd=ROOT, capture_output=True, text=True, timeout=180,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["quiet"]["arrivals"] == result["scraped"]["arrivals"] == 4
    assert result["scrapes"] >= 2 and result["scrape_errors"] == 0
    assert result["scrape_bytes"] > 1000  # a whole exposition, not an error page
    quiet, loud = result["quiet"]["whole_round"], result["scraped"]["whole_round"]
    assert result["whole_round_overhead_median_pct"] == round(
        100.0 * (loud["median_ms"] / quiet["median_ms"] - 1.0), 2)
    assert result["heartbeats_refused"] == 0
    in_process = result["in_process_planning"]
    assert in_process["aa_control"]["scrapes"] == 0  # the control never scrapes
    assert in_process["scraped"]["rounds_each"] == in_process["aa_control"]["rounds_each"] == 3
