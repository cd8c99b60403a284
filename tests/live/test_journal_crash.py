"""The journal survives SIGKILL of the scheduler at any moment of a stream of submissions.

A real broker and a real scheduler process; a submitter thread sends `job.submit` requests
back to back, retrying each job until it is acknowledged. The scheduler is SIGKILLed at 20
points drawn from a seed (after a random number of further acknowledgements plus a random
few milliseconds, so kills land inside commits and replies alike) and restarted at once.

Then: every acknowledged job is in the journal and in the restarted scheduler's status, no
job was journaled (submitted) twice, nothing is in the journal that was never sent, and
SQLite's integrity check passes. No agents: nothing needs to run.
"""
from __future__ import annotations

import os
import random
import sqlite3
import threading
import time

from broker.client import RequestFailed, Requester, RequestTimeout
from broker.endpoints import Endpoints
from scheduler.live.journal import Journal
from tests.live_system import LiveCluster
from traces.generate import generate
from traces.record import record_to_map

SEED = int(os.environ.get("JOURNAL_CRASH_SEED", "20240611"))
KILLS = 20
MAX_JOBS = 2000


class Submitter(threading.Thread):
    """Submits jobs in id order; a job counts as acknowledged on `accepted` or `duplicate`
    (a retry after a lost reply, answered by a restarted scheduler from its journal)."""

    def __init__(self, endpoints: Endpoints, records):
        super().__init__(name="submitter", daemon=True)
        self.endpoints, self.records = endpoints, records
        self.acked: list[int] = []
        self.sent: set[int] = set()
        self.replies: dict[str, int] = {"accepted": 0, "duplicate": 0}
        self.error: BaseException | None = None
        self.halt = threading.Event()
        self.progress = threading.Condition()

    def run(self) -> None:
        requester = Requester(self.endpoints, "crash-test", timeout=1.0, retries=0)
        try:
            for record in self.records:
                if self.halt.is_set():
                    return
                self._submit(requester, record)
        except BaseException as err:  # surfaced by the test
            self.error = err
        finally:
            requester.close()

    def _submit(self, requester: Requester, record) -> None:
        deadline = time.monotonic() + 30.0
        while not self.halt.is_set():
            if time.monotonic() > deadline:
                raise AssertionError(f"job {record.job_id} not acknowledged within 30 s")
            self.sent.add(record.job_id)
            try:
                reply = requester.request("scheduler", "job.submit", job=record_to_map(record))
            except RequestTimeout:
                continue  # the scheduler died with our request: send it again
            except RequestFailed as err:
                assert err.code == "no_service", err  # only "no scheduler right now" is normal
                self.halt.wait(0.02)  # pacing while the new scheduler registers
                continue
            body = reply["body"]
            outcome = "accepted" if body.get("accepted") else body.get("reason")
            assert outcome in self.replies, body
            with self.progress:
                self.replies[outcome] += 1
                self.acked.append(record.job_id)
                self.progress.notify_all()
            return

    def wait_acked(self, n: int, timeout: float) -> None:
        with self.progress:
            if not self.progress.wait_for(lambda: len(self.acked) >= n or self.error, timeout):
                raise AssertionError(f"{n} acknowledgements not reached in {timeout} s "
                                     f"(have {len(self.acked)})")
        if self.error:
            raise self.error


def test_sigkilled_scheduler_loses_and_duplicates_no_acknowledged_job(tmp_path):
    rng = random.Random(SEED)
    records = generate(MAX_JOBS, SEED, max_gpus=4)
    live = LiveCluster(tmp_path / "run", spec="n3g4", nodes=0, gpus_per_node=4)
    live.run_dir.mkdir(parents=True)
    started = time.monotonic()
    try:
        live.start_broker()
        live.start_scheduler()
        submitter = Submitter(Endpoints.load(live.endpoints_file), records)
        submitter.start()
        kill_times = []
        for _ in range(KILLS):
            submitter.wait_acked(len(submitter.acked) + rng.randint(1, 6), timeout=30)
            time.sleep(rng.uniform(0.0, 0.03))  # the kill point itself: random, not a wait
            kill_times.append(time.monotonic())
            live.kill("scheduler")
            live.start_scheduler()
        submitter.wait_acked(len(submitter.acked) + 3, timeout=30)  # the last one works too
        submitter.halt.set()
        submitter.join(10)
        assert submitter.error is None, submitter.error
        acked = list(submitter.acked)

        # the restarted scheduler's status lists every acknowledged job, once
        status = live.status()
        assert status is not None
        listed = [j["job_id"] for j in status["jobs"]]
        assert len(listed) == len(set(listed)), "a job listed twice"
        assert set(acked) <= set(listed)
        live.kill("scheduler")  # SIGKILL once more: the journal must not need a clean close
    finally:
        live.stop_all()

    with Journal(live.run_dir / "journal.db") as journal:
        assert journal.integrity_check() == "ok"
        ids = [e.record.job_id for e in journal.unfinished() + journal.finished()]
        submitted = [j for _, kind, j, _, _ in journal.events() if kind == "submitted"]
        for job_id in acked:
            assert journal.get(job_id).record == records[job_id]
    assert len(acked) == len(set(acked)), "a job acknowledged twice"
    assert set(acked) <= set(ids), f"acknowledged jobs lost: {sorted(set(acked) - set(ids))}"
    assert sorted(submitted) == sorted(ids), "each job journaled (submitted) exactly once"
    assert set(ids) <= submitter.sent, "a job in the journal that was never sent"
    # WAL checkpoint left nothing half-applied: a fresh connection sees the same rows
    with sqlite3.connect(live.run_dir / "journal.db") as db:
        assert db.execute("SELECT COUNT(*) FROM jobs").fetchone()[0] == len(ids)
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    # the kills really landed among the submissions (not all before or after them)
    assert submitter.replies["accepted"] >= KILLS
    print(f"seed={SEED} kills={KILLS} acked={len(acked)} journaled={len(ids)} "
          f"duplicate-replies={submitter.replies['duplicate']} "
          f"wall={time.monotonic() - started:.1f}s")
