"""Jobs finished before a scheduler restart still count in its metrics: real processes run a
few jobs to the end, the scheduler is SIGKILLed and started again, and its Prometheus
exposition must equal the totals read straight from the SQLite journal (the oracle: not the
scheduler's own view), for the finished count, the JCT histogram and the queueing one."""
from __future__ import annotations

import signal
import sqlite3
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.live_system import LiveCluster, log_records, wait_for
from traces import write_trace
from traces.generate import generate

JOBS = 4


def _scrape(run_dir, after: int) -> dict[tuple[str, tuple], float]:
    """{(sample name, labels): value} from the newest scheduler's --metrics server (the
    `metrics_serving` log record after the first `after` of them)."""
    served = wait_for(lambda: len(log_records(run_dir, "metrics_serving")) > after
                      and log_records(run_dir, "metrics_serving")[-1], 60,
                      "the restarted scheduler's metrics server")
    url = f"http://{served['host']}:{served['port']}/metrics"
    with urllib.request.urlopen(url, timeout=10) as reply:
        text = reply.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _journal_totals(path) -> dict[str, float]:
    db = sqlite3.connect(path)
    try:
        finished, jct = db.execute(
            "SELECT COUNT(*), COALESCE(SUM(finish_trace - submit_trace), 0) FROM jobs "
            "WHERE phase = 'finished'").fetchone()
        started, queued = db.execute(
            "SELECT COUNT(*), COALESCE(SUM(first_start_trace - submit_trace), 0) FROM jobs "
            "WHERE phase = 'finished' AND first_start_trace IS NOT NULL").fetchone()
    finally:
        db.close()
    return {"finished": finished, "jct_sum": jct, "started": started, "queue_sum": queued}


def test_metrics_after_a_restart_equal_the_journals_totals(tmp_path):
    records = generate(JOBS, 7, backlog=True, max_gpus=1, median_duration=400,
                       min_duration=200, max_duration=800)
    write_trace(tmp_path / "trace.csv", records)
    cluster = LiveCluster(tmp_path / "run", spec="n2g8", nodes=1, gpus_per_node=8,
                          policy="srsf", time_scale=200.0,
                          scheduler_args=["--metrics", "127.0.0.1:0"])
    try:
        cluster.start()
        cluster.feed(tmp_path / "trace.csv")
        cluster.wait_finished(JOBS, timeout=120)
        cluster.kill("scheduler", signal.SIGKILL)
        cluster.start_scheduler()
        # scraped once the new scheduler has replayed its journal (it logs that it did)
        wait_for(lambda: log_records(cluster.run_dir, "recovered"), 60, "the recovery")
        got = _scrape(cluster.run_dir, after=1)
    finally:
        cluster.stop_all()
    want = _journal_totals(cluster.run_dir / "journal.db")
    assert want["finished"] == JOBS and want["started"] == JOBS
    assert got[("interlace_jobs", (("state", "finished"),))] == want["finished"]
    assert got[("interlace_job_completion_seconds_count", ())] == want["finished"]
    assert got[("interlace_job_completion_seconds_sum", ())] == pytest.approx(want["jct_sum"])
    assert got[("interlace_job_queueing_delay_seconds_count", ())] == want["started"]
    assert got[("interlace_job_queueing_delay_seconds_sum", ())] \
        == pytest.approx(want["queue_sum"])
