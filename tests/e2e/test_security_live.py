"""Security cases tried from outside against real processes (a broker, a scheduler and, where
jobs must run, an agent and its trainers, on loopback): concurrent submits from one process,
over-long fields, a truncated journal, retried submissions across a scheduler kill, and
checkpoint records edited on disk. docs/security.md says what each defends."""
from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from broker.client import RequestFailed
from tests.helpers import job
from tests.live_system import ROOT, LiveCluster, _env, wait_for, write_spec
from traces.feeder import job_map


def _control(tmp_path: Path, name: str = "run", **options) -> LiveCluster:
    """A broker and a scheduler, no agents: enough for what only submits."""
    cluster = LiveCluster(tmp_path / name, spec=str(write_spec(tmp_path / "spec.csv", 1, 2)),
                          nodes=1, gpus_per_node=2, policy="fifo", **options)
    cluster.run_dir.mkdir(parents=True, exist_ok=True)
    cluster.start_broker()
    cluster.start_scheduler()
    wait_for(lambda: cluster.status() is not None, 60, "the scheduler to answer")
    return cluster


def _journaled(run_dir: Path) -> list[tuple[int, dict]]:
    """(job id, record) of every job in the journal, read beside the running scheduler."""
    db = sqlite3.connect(f"file:{run_dir / 'journal.db'}?mode=ro", uri=True)
    try:
        return [(j, json.loads(r)) for j, r in
                db.execute("SELECT job_id, record FROM jobs ORDER BY job_id")]
    finally:
        db.close()


# -- message ids: two threads of one process ---------------------------------------------------
THREADS = 24
_CONCURRENT = """
import io, json, sys, threading
from scheduler.tools.jobs import submit_main

ep, n = sys.argv[1], int(sys.argv[2])
outs = {}
local = threading.local()

class PerThread(io.TextIOBase):
    # each thread's prints to its own buffer: print is not one write
    def write(self, text):
        outs.setdefault(threading.get_ident(), []).append(text)
        return len(text)

sys.stdout = sys.stderr = PerThread()
barrier = threading.Barrier(n)
codes = {}

def one():
    barrier.wait()
    codes[threading.get_ident()] = submit_main(["--endpoints", ep, "--gpus", "1",
                                                "--iterations", "100", "--timeout", "5"])

threads = [threading.Thread(target=one) for _ in range(n)]
for t in threads:
    t.start()
for t in threads:
    t.join()
sys.__stdout__.write(json.dumps([[codes[k], "".join(outs.get(k, []))] for k in codes]))
"""


def test_concurrent_submits_from_threads_of_one_process_are_each_journaled_once(tmp_path):
    cluster = _control(tmp_path)
    try:
        done = subprocess.run([sys.executable, "-c", _CONCURRENT, str(cluster.endpoints_file),
                               str(THREADS)], cwd=ROOT, env=_env(), capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        results = json.loads(done.stdout)
        assert len(results) == THREADS
        acked = []
        for code, text in results:
            assert code == 0 and text.startswith("submitted job "), text
            acked.append(int(text.split()[2]))
        journaled = [j for j, _ in _journaled(cluster.run_dir)]
        assert sorted(acked) == sorted(set(acked)), f"an id acknowledged twice: {acked}"
        assert set(acked) <= set(journaled)
        assert len(journaled) == THREADS

        # a second request under a used id (an old client's clash) is refused, not answered
        # with the first one's reply
        first, second = (cluster.requester("clash", timeout=5.0, retries=1) for _ in "12")
        try:
            for requester in (first, second):
                requester._ids = lambda: "clash-1-1"  # the clash, forced
            first.request("scheduler", "job.submit", job=job_map(job(0)), new_id=True)
            with pytest.raises(RequestFailed) as refused:
                second.request("scheduler", "job.submit", job=job_map(job(0, num_gpu=2)),
                               new_id=True)
            assert refused.value.code == "id_reused"
        finally:
            first.close()
            second.close()
        assert len(_journaled(cluster.run_dir)) == THREADS + 1
    finally:
        cluster.stop_all()
