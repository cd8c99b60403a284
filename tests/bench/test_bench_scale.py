"""bench/bench_scale.py on a tiny cluster, and its check that nothing submitted was lost.

Real processes (broker, scheduler service, client processes) and sockets, as the benchmark
runs them; the journal check is tried on a real journal that lost and doubled ids."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_acknowledged_submission_is_journaled_once_and_counted():
    proc = subprocess.run(
        [sys.executable, "bench/bench_scale.py", "--clients", "2", "--seconds", "2",
         "--agents", "2"],
        cwd=ROOT, capture_output=True, text=True, timeout=180,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    journal = result["journal"]
    assert journal["acknowledged"] > 0 and result["submissions_per_s"] > 0
    assert journal["acknowledged"] == journal["journaled"] - journal["journaled_unacknowledged"]
    assert not result["lost"] and journal["acknowledged_missing"] == 0
    assert result["refused"] == 0 and result["heartbeats_refused"] == 0
    assert 0 < result["scheduler_cpu_share"] <= result["cores"]


def test_the_journal_check_finds_a_lost_and_a_doubled_acknowledgement(tmp_path):
    sys.path.insert(0, str(ROOT / "bench"))
    from bench_scale import CLIENT_RANGE, journal_check
    from scheduler.live.journal import Journal
    from tests.helpers import job

    ids = [CLIENT_RANGE + 1, CLIENT_RANGE + 2, CLIENT_RANGE + 3]
    with Journal(tmp_path / "journal.db") as journal:
        for job_id in ids:
            journal.submit(job(job_id), 0.0)
    check = journal_check(tmp_path / "journal.db", [ids[0], ids[1], ids[1], CLIENT_RANGE + 9])
    assert check["acknowledged_missing"] == 1  # 9 was acknowledged, never journaled
    assert check["acknowledged_twice"] == 1
    assert check["journaled_unacknowledged"] == 1  # 3: in flight when the clients stopped
