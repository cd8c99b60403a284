"""The trace feeder against a real broker and a fake `scheduler` service on loopback.

The fake scheduler records each `job.submit` with its arrival time and de-duplicates by job
id like the real one, so the tests see order, pacing and exactly-once acknowledgement. The
feeder's pacing is what is under test, so the tests never sleep; they only wait for
conditions with deadlines.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import structlog

from broker.client import HandlerError, Requester
from broker.endpoints import Endpoints
from broker.testing import REPO_ROOT, broker_thread, service_thread
from tests.helpers import job
from traces import write_trace
from traces.feeder import Feeder, FeedError, schedule

T = 20.0  # deadline for anything that should take well under a second (loaded 2-core box)


class FakeScheduler:
    """A `scheduler` handler: accepts each job id once, answers status with all finished."""

    def __init__(self, refuse: frozenset[int] = frozenset()):
        self.lock = threading.Lock()
        self.arrivals: list[tuple[int, float]] = []  # (job_id, monotonic) of first submits
        self.submits = 0
        self.refuse = refuse

    def __call__(self, msg):
        with self.lock:
            if msg.type == "status.query":
                jobs = [{"job_id": j, "state": "finished"} for j, _ in self.arrivals]
                return {"counts": {"pending": 0, "running": 0, "finished": len(jobs)},
                        "jobs": jobs, "jobs_truncated": False}
            assert msg.type == "job.submit"
            self.submits += 1
            job_id = msg["job"]["job_id"]
            if job_id in self.refuse:
                raise HandlerError("bad_job", f"job {job_id} needs more GPUs than exist")
            if any(j == job_id for j, _ in self.arrivals):
                return {"accepted": False, "job_id": job_id, "reason": "duplicate"}
            self.arrivals.append((job_id, time.monotonic()))
            return {"accepted": True, "job_id": job_id}

    @property
    def order(self) -> list[int]:
        return [j for j, _ in self.arrivals]


@pytest.fixture
def plane():
    """A broker and a fake scheduler service, both on threads; yields (endpoints, fake)."""
    fake = FakeScheduler()
    with broker_thread(startup_grace=5.0) as broker:
        with service_thread(broker.endpoints, "scheduler", fake, heartbeat=0.1):
            yield broker.endpoints, fake


def _feeder(endpoints: Endpoints, sender: str = "test-feeder", **kw) -> tuple[Feeder, Requester]:
    requester = Requester(endpoints, sender, timeout=2.0, retries=3)
    return Feeder(requester, structlog.get_logger("test"), **kw), requester


def _records():
    # submit times in trace seconds, deliberately not in file order; two share a time
    return [job(3, submit=300.0), job(0, submit=0.0), job(1, submit=100.0),
            job(2, submit=100.0), job(4, submit=600.0)]


def test_schedule_orders_by_submit_time_and_scales():
    plan = schedule(_records(), time_scale=1000.0)
    assert [r.job_id for _, r in plan] == [0, 1, 2, 3, 4]  # ties keep the trace's order
    assert [off for off, _ in plan] == pytest.approx([0.0, 0.1, 0.1, 0.3, 0.6])
    assert [off for off, _ in schedule(_records(), 1000.0, speedup=True)] == [0.0] * 5


def test_every_job_is_acked_once_in_order_at_its_scaled_time(plane):
    endpoints, fake = plane
    feeder, requester = _feeder(endpoints, time_scale=1000.0)
    try:
        start = time.monotonic()
        result = feeder.feed(_records())
    finally:
        requester.close()
    assert result.accepted == [0, 1, 2, 3, 4] and not result.duplicates and not result.refused
    assert fake.order == [0, 1, 2, 3, 4]
    assert fake.submits == 5  # exactly once each: no resend was needed, none was doubled
    expected = {0: 0.0, 1: 0.1, 2: 0.1, 3: 0.3, 4: 0.6}
    for job_id, at in fake.arrivals:
        offset = at - start
        assert offset >= expected[job_id] - 0.02, (job_id, offset)  # never early
        assert offset <= expected[job_id] + 0.5, (job_id, offset)   # generous: loaded box


def test_a_restarted_feeder_resubmits_and_the_duplicates_count_as_acked(plane):
    endpoints, fake = plane
    # distinct senders: a restarted feeder is a new process, so its request ids are new too
    first, r1 = _feeder(endpoints, "feeder-1", speedup=True)
    second, r2 = _feeder(endpoints, "feeder-2", speedup=True)
    try:
        assert first.feed(_records()[:3]).accepted == [0, 1, 3]
        again = second.feed(_records())
    finally:
        r1.close()
        r2.close()
    assert again.accepted == [2, 4] and again.duplicates == [0, 1, 3]
    assert sorted(again.acked) == [0, 1, 2, 3, 4]
    assert fake.order == [0, 1, 3, 2, 4]  # each job reached the scheduler's queue once


def test_a_refused_job_is_reported_and_the_rest_still_fed():
    fake = FakeScheduler(refuse=frozenset({1}))
    with broker_thread(startup_grace=5.0) as broker:
        with service_thread(broker.endpoints, "scheduler", fake, heartbeat=0.1):
            feeder, requester = _feeder(broker.endpoints, speedup=True)
            try:
                result = feeder.feed(_records())
            finally:
                requester.close()
    assert result.accepted == [0, 2, 3, 4]
    assert list(result.refused) == [1] and "bad_job" in result.refused[1]


def test_wait_finished_returns_once_every_fed_job_is_finished(plane):
    endpoints, fake = plane
    feeder, requester = _feeder(endpoints, speedup=True)
    try:
        result = feeder.feed(_records())
        counts = feeder.wait_finished(result.acked, timeout=T, poll=0.05)
    finally:
        requester.close()
    assert counts["finished"] == 5


def test_no_scheduler_behind_the_broker_is_a_feed_error_after_patience():
    with broker_thread(startup_grace=0.0) as broker:
        feeder, requester = _feeder(broker.endpoints, speedup=True, patience=0.3)
        try:
            with pytest.raises(FeedError, match="could not reach the scheduler for 0.3s .no_service"):
                feeder.feed(_records())
        finally:
            requester.close()


# -- the command line (a real process, as scripts/feed and scripts/demo run it) ------------------

def _run(*args: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p))
    return subprocess.run([sys.executable, "-m", "traces.feeder", *args], cwd=REPO_ROOT,
                          env=env, capture_output=True, text=True, timeout=timeout)


def _dead_endpoints(tmp_path: Path) -> Path:
    """An endpoints file naming loopback ports that nothing listens on."""
    ports = []
    for _ in range(3):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    path = tmp_path / "endpoints.json"
    Endpoints(*(f"tcp://127.0.0.1:{p}" for p in ports)).save(path)
    return path


def _no_traceback(proc: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout


def test_cli_feeds_waits_and_logs(plane, tmp_path):
    endpoints, fake = plane
    trace = tmp_path / "t.csv"
    write_trace(trace, _records())
    ep = tmp_path / "endpoints.json"
    endpoints.save(ep)
    run_dir = tmp_path / "run"
    proc = _run(str(trace), "--endpoints", str(ep), "--time-scale", "2000", "--run-dir",
                str(run_dir), "--wait", "--wait-timeout", str(T), "--poll", "0.05")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "5/5 jobs acknowledged" in proc.stdout and "5/5 jobs finished" in proc.stdout
    assert fake.order == [0, 1, 2, 3, 4]
    log = (run_dir / "feeder.log").read_text()
    assert log.count('"event": "job_fed"') == 5
    _no_traceback(proc)


def test_cli_unreachable_scheduler_is_one_clear_line(tmp_path):
    proc = _run("default", "--endpoints", str(_dead_endpoints(tmp_path)),
                "--timeout", "0.2", "--retries", "1", "--speedup")
    assert proc.returncode == 1
    lines = [line for line in proc.stderr.splitlines() if line.startswith("interlace-feed:")]
    assert len(lines) == 1 and "cannot reach the scheduler" in lines[0], proc.stderr
    _no_traceback(proc)


@pytest.mark.parametrize("args, message", [
    (["nonexistent-trace"], "no packaged trace"),
    (["/nonexistent/trace.csv"], "trace.csv"),
])
def test_cli_bad_trace_or_endpoints_is_one_clear_line(tmp_path, args, message):
    proc = _run(*args, "--endpoints", str(_dead_endpoints(tmp_path)))
    assert proc.returncode == 2 and message in proc.stderr
    _no_traceback(proc)


def test_cli_missing_endpoints_file(tmp_path):
    proc = _run("default", "--endpoints", str(tmp_path / "nope.json"), "--wait-endpoints", "0")
    assert proc.returncode == 1
    assert "endpoints file" in proc.stderr and "no such file" in proc.stderr
    _no_traceback(proc)


class KnowingScheduler(FakeScheduler):
    """A fake that lists each known job with its GPUs and iterations, as the real one's
    status.query does, and the highest id it knows."""

    def __init__(self):
        super().__init__()
        self.jobs: dict[int, dict] = {}

    def __call__(self, msg):
        if msg.type == "job.submit":
            with self.lock:
                self.jobs.setdefault(msg["job"]["job_id"], msg["job"])
        reply = super().__call__(msg)
        if msg.type == "status.query":
            with self.lock:
                for line in reply["jobs"]:
                    known = self.jobs[line["job_id"]]
                    line.update(num_gpu=known["num_gpu"], iterations=known["iterations"])
                reply["max_job_id"] = max(self.jobs, default=0)
        return reply


def test_a_second_trace_whose_ids_are_taken_is_refused_and_fed_with_an_offset(tmp_path):
    first, second = tmp_path / "first.csv", tmp_path / "second.csv"
    write_trace(first, _records())
    # the same ids 0-4 for other jobs: two GPUs each, and other lengths
    write_trace(second, [job(j, num_gpu=2, iterations=50 + j, submit=10.0 * j)
                         for j in range(5)])
    fake = KnowingScheduler()
    with broker_thread(startup_grace=5.0) as broker:
        with service_thread(broker.endpoints, "scheduler", fake, heartbeat=0.1):
            ep = tmp_path / "endpoints.json"
            broker.endpoints.save(ep)
            feed = ("--endpoints", str(ep), "--speedup")
            assert _run(str(first), *feed).returncode == 0
            replay = _run(str(first), *feed)  # the same trace again: a replay, harmless
            refused = _run(str(second), *feed)
            offset = _run(str(second), *feed, "--id-offset", "5")
            offset_again = _run(str(second), *feed, "--id-offset", "5")
    assert replay.returncode == 0 and "5/5 jobs acknowledged (0 new, 5 already known)" \
        in replay.stdout
    assert refused.returncode == 1
    lines = [line for line in refused.stderr.splitlines() if line.startswith("interlace-feed")]
    assert len(lines) == 1, refused.stderr
    assert ("5 of its 5 job ids are the scheduler's already, for other jobs (job 0: num_gpu "
            "1 there, 2 here, iterations 100 there, 50 here); nothing fed") in lines[0]
    assert "--id-offset 5 (its ids from 5" in lines[0]
    assert offset.returncode == 0 and "5/5 jobs acknowledged (5 new, 0 already known)" \
        in offset.stdout
    assert offset_again.returncode == 0  # the renumbered trace replays onto the same ids
    assert fake.order == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    assert [fake.jobs[j]["num_gpu"] for j in range(5, 10)] == [2] * 5
    _no_traceback(refused)


def test_the_id_check_waits_for_a_scheduler_to_register_as_a_submission_would():
    from broker.client import RequestFailed

    class Late:
        """A broker with no scheduler for two requests, then one that knows job 0."""

        retries, timeout = 0, 1.0

        def __init__(self):
            self.asked = 0

        def request(self, service, method, **fields):
            self.asked += 1
            if self.asked <= 2:
                raise RequestFailed("no_service", "no scheduler registered")
            return {"ok": True, "body": {"jobs": [{"job_id": 0, "state": "running",
                                                   "num_gpu": 4, "iterations": 100}],
                                         "max_job_id": 7}}

    now = [0.0]
    feeder = Feeder(Late(), structlog.get_logger("test"), patience=30.0,
                    clock=lambda: now[0], wait=lambda s: now.__setitem__(0, now[0] + s))
    taken, highest = feeder.taken([job(0), job(1)])
    assert feeder.requester.asked == 3
    assert taken == [(0, "num_gpu 4 there, 1 here")] and highest == 7
    impatient = Feeder(Late(), structlog.get_logger("test"), patience=0.4,
                       clock=lambda: now[0], wait=lambda s: now.__setitem__(0, now[0] + s))
    with pytest.raises(FeedError, match="the broker could not reach the scheduler for 0.4s"):
        impatient.taken([job(0)])


def test_every_try_of_a_submission_names_it_by_one_key_and_each_submission_by_its_own():
    from broker.client import RequestFailed

    class Away:
        """No scheduler for two tries of each submission, then one that accepts it."""

        retries, timeout = 0, 1.0

        def __init__(self):
            self.keys: list[str] = []

        def request(self, service, method, **fields):
            self.keys.append(fields["submission"])
            if len(self.keys) % 3:
                raise RequestFailed("no_service", "no scheduler registered")
            return {"ok": True, "body": {"accepted": True, "already": True, "job_id": 9}}

    now = [0.0]
    feeder = Feeder(Away(), structlog.get_logger("test"), patience=30.0,
                    clock=lambda: now[0], wait=lambda s: now.__setitem__(0, now[0] + s))
    assert feeder.submit_new(job(0)) == ("accepted", 9)
    assert feeder.submit(job(1)) == "accepted"
    keys = feeder.requester.keys
    assert len(keys) == 6 and len(set(keys[:3])) == 1 and len(set(keys[3:])) == 1
    assert keys[0] != keys[3]
