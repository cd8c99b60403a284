"""Security cases tried from outside against real processes (a broker, a scheduler and, where
jobs must run, an agent and its trainers, on loopback): concurrent submits from one process,
over-long fields, a truncated journal, retried submissions across a scheduler kill, and
checkpoint records edited on disk. docs/security.md says what each defends."""
from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from broker.client import RequestFailed
from tests.helpers import job
from tests.live_system import ROOT, LiveCluster, _env, log_records, wait_for, write_spec
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


def _stop(cluster: LiveCluster) -> None:
    """Agents first, the broker last: an agent's last reports then find the scheduler, not
    retries into a broker that is gone."""
    for name in sorted(cluster.procs, key=lambda n: ["agent", "scheduler"].index(n.split("-")[0])
                       if n.split("-")[0] in ("agent", "scheduler") else 2):
        cluster.kill(name, signal.SIGTERM)
    cluster.stop_all()


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
        _stop(cluster)


# -- bounded strings ----------------------------------------------------------------------------
def _refused(requester, service: str, type_: str, **fields) -> RequestFailed:
    with pytest.raises(RequestFailed) as refused:
        requester.request(service, type_, **fields)
    return refused.value


def test_over_long_strings_are_refused_naming_the_field_and_nothing_is_journaled(tmp_path):
    cluster = _control(tmp_path)
    try:
        cluster.start_agent(0)
        wait_for(lambda: cluster._online() == 1, 60, "the agent to register")
        requester = cluster.requester("long", timeout=5.0, retries=1)
        base = job_map(job(1))
        command = {**base, "command": ["/bin/true"], "workdir": "/tmp"}
        try:
            cases = [
                ("job.model_name", 256, {**base, "model_name": "m" * 250_000}),
                ("job.tenant", 256, {**base, "tenant": "t" * 1000}),
                ("job.workdir", 4096, {**command, "workdir": "/" + "d" * 5000}),
                ("job.command[1]", 16384, {**command, "command": ["/bin/echo", "a" * 20_000]}),
                ("a key of job", 256, {**base, "k" * 300: 1}),
            ]
            for field, limit, record in cases:
                err = _refused(requester, "scheduler", "job.submit", job=record)
                assert err.code == "bad_request", (field, err)
                assert err.reason.startswith(f"{field} is ") and \
                    err.reason.endswith(f"characters long, at most {limit}"), err.reason
                assert "\n" not in err.reason and len(err.reason) < 200
            err = _refused(requester, "scheduler", "agent.register", node="n" * 300,
                           gpus=[0], cpus=1, mem=1.0)
            assert (err.code, err.reason) == ("bad_request",
                                              "node is 300 characters long, at most 256")
            err = _refused(requester, "scheduler", "job.finished", job_id=1, node="n0",
                           iterations=1.0, ok=False, detail="x" * 20_000)
            assert err.reason == "detail is 20000 characters long, at most 16384"
            err = _refused(requester, "scheduler", "status.query", what="w" * 1000)
            assert err.reason == "what is 1000 characters long, at most 256"
            # the agent bounds what it is ordered to run by the same rule
            err = _refused(requester, "agent.n0", "job.launch", job_id=7, gpus=[0], group=[7],
                           slot=0, start_iteration=0.0,
                           workload={"kind": "command", "iterations": 10.0,
                                     "argv": ["/bin/echo", "a" * 20_000], "workdir": "/tmp"})
            assert (err.code, err.reason) == (
                "bad_request", "workload.argv[1] is 20000 characters long, at most 16384")
            # a job within every bound is taken
            ok = requester.request("scheduler", "job.submit",
                                   job={**base, "model_name": "m" * 256, "job_id": 2})
            assert ok["body"]["accepted"]
        finally:
            requester.close()
        assert [j for j, _ in _journaled(cluster.run_dir)] == [2]
        # the refusals are logged once each, cut short, never the strings themselves
        logs = sum(p.stat().st_size for p in cluster.run_dir.glob("*.log"))
        assert logs < 100_000, logs
    finally:
        _stop(cluster)


def test_an_envelope_id_or_sender_past_its_bound_is_not_a_message():
    """A service remembers each request's id to answer its retries: an id of 200 KB, 10,000
    times over, would be 2 GB of cache."""
    import msgpack

    from broker.messages import MessageError, decode

    for field, value in (("id", "i" * 257), ("sender", "s" * 129)):
        raw = {"type": "status.query", "v": 1, "id": "ok-1", "sender": "ok", "ts": 1.0,
               field: value}
        with pytest.raises(MessageError) as bad:
            decode(msgpack.packb(raw))
        assert bad.value.code == "bad_value" and f"'{field}' is {len(value)} characters" \
            in bad.value.reason


# -- a journal emptied under a run dir -----------------------------------------------------------
def _restart_scheduler(cluster: LiveCluster) -> tuple[subprocess.Popen, Path, int]:
    """The scheduler started again: its process, its stderr file and where this start's
    output begins in it."""
    stderr = cluster.run_dir / "scheduler.stderr"
    at = stderr.stat().st_size if stderr.exists() else 0
    cluster.start_scheduler()
    return cluster.procs["scheduler"], stderr, at


def test_a_truncated_journal_stops_the_scheduler_unless_it_is_told_to_start_afresh(tmp_path):
    cluster = _control(tmp_path)
    journal = cluster.run_dir / "journal.db"
    try:
        requester = cluster.requester("t", timeout=5.0, retries=1)
        try:
            assert requester.request("scheduler", "job.submit",
                                     job=job_map(job(1, iterations=10**6)))["body"]["accepted"]
        finally:
            requester.close()
        cluster.kill("scheduler", signal.SIGTERM)
        subprocess.run(["truncate", "-s", "0", str(journal)], check=True)
        before = sorted(p.name for p in cluster.run_dir.iterdir())

        proc, stderr, at = _restart_scheduler(cluster)
        wait_for(lambda: proc.poll() is not None or cluster.status() is not None, 60,
                 "the scheduler to exit or answer")
        assert proc.poll() is not None, "the scheduler started on an emptied journal"
        assert proc.wait(timeout=30) == 2
        said = stderr.read_bytes()[at:].decode().splitlines()
        assert len(said) == 1, said
        assert said[0].startswith(f"scheduler: {journal} is empty, but {journal}.id says "
                                  "journal ") and said[0].endswith("--fresh-journal"), said
        assert journal.stat().st_size == 0
        assert sorted(p.name for p in cluster.run_dir.iterdir()) == before

        cluster.scheduler_args = ["--fresh-journal"]
        proc, stderr, at = _restart_scheduler(cluster)
        wait_for(lambda: cluster.status() is not None, 60, "the scheduler to start afresh")
        assert proc.poll() is None
        aside = [p.name for p in cluster.run_dir.glob("journal.db.lost-*")]
        assert len(aside) == 1 and (cluster.run_dir / aside[0]).stat().st_size == 0
        assert [r["moved"] for r in log_records(cluster.run_dir, "journal_set_aside")]
    finally:
        _stop(cluster)


# -- idempotent submission ------------------------------------------------------------------------
def _submissions(run_dir: Path) -> list[tuple[str, str, int]]:
    db = sqlite3.connect(f"file:{run_dir / 'journal.db'}?mode=ro", uri=True)
    try:
        return list(db.execute("SELECT caller, key, job_id FROM submissions ORDER BY job_id"))
    finally:
        db.close()


def _submit(cluster: LiveCluster, record: dict, **fields) -> dict:
    """One submit from a requester of its own (a new message id: a client's retry, not the
    requester's resend, which the reply cache answers)."""
    requester = cluster.requester("retry", timeout=5.0, retries=2)
    try:
        return requester.request("scheduler", "job.submit", job=record, **fields)["body"]
    finally:
        requester.close()


_SUBMIT = ("import sys; from scheduler.tools.jobs import submit_main; "
           "sys.exit(submit_main(sys.argv[1:]))")


def test_a_retried_submission_is_answered_with_the_job_it_made_across_a_scheduler_kill(
        tmp_path):
    cluster = _control(tmp_path)
    long = job_map(job(0, iterations=10**6))
    try:
        first = _submit(cluster, long, new_id=True, submission="K")
        assert first["accepted"] and "already" not in first
        made = first["job_id"]
        again = _submit(cluster, long, new_id=True, submission="K")
        assert again == {"accepted": True, "already": True, "job_id": made}
        with pytest.raises(RequestFailed) as other:  # the key of another job
            _submit(cluster, job_map(job(0, iterations=5)), new_id=True, submission="K")
        assert other.value.code == "bad_request" and \
            f"made job {made}, a different job" in other.value.reason
        old = _submit(cluster, long, new_id=True)  # an old client, no key: a new job, as ever
        assert old["accepted"] and old["job_id"] == made + 1
        assert [j for j, _ in _journaled(cluster.run_dir)] == [made, made + 1]

        cluster.kill("scheduler")  # SIGKILL, then a restart on the same run dir
        cluster.start_scheduler()
        wait_for(lambda: cluster.status() is not None, 60, "the scheduler to restart")
        assert _submit(cluster, long, new_id=True, submission="K") == \
            {"accepted": True, "already": True, "job_id": made}
        assert _submit(cluster, {**long, "job_id": made}, submission="K")["job_id"] == made
        assert [j for j, _ in _journaled(cluster.run_dir)] == [made, made + 1]

        # interlace-submit while the scheduler is away: every try of it one submission
        cluster.kill("scheduler")
        proc = subprocess.Popen([sys.executable, "-c", _SUBMIT, "--endpoints",
                                 str(cluster.endpoints_file), "--gpus", "1", "--iterations",
                                 "1000000", "--timeout", "1", "--retries", "8"], cwd=ROOT,
                                env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        for line in proc.stdout:  # its log: each resend of the unanswered submit
            if "request.retry" in line:
                break
        cluster.start_scheduler()
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert f"submitted job {made + 2}" in out.splitlines()
        assert [j for j, _ in _journaled(cluster.run_dir)] == [made, made + 1, made + 2]
        keys = _submissions(cluster.run_dir)
        assert [(c, k, j) for c, k, j in keys if k == "K"] == [("", "K", made)]
        assert [j for _, _, j in keys] == [made, made + 2]  # interlace-submit's key journaled
    finally:
        _stop(cluster)


# -- checkpoint records edited on disk ------------------------------------------------------------
TOTAL = 5000  # iterations: 0.3 trace s each, 15 s at the test's time scale


def _job_status(cluster: LiveCluster, job_id: int) -> dict:
    return next((j for j in (cluster.status() or {}).get("jobs") or []
                 if j["job_id"] == job_id), {})


def test_an_edited_checkpoint_record_is_refused_and_no_iteration_is_skipped(tmp_path):
    cluster = LiveCluster(tmp_path / "run", spec=str(write_spec(tmp_path / "spec.csv", 1, 2)),
                          nodes=1, gpus_per_node=2, policy="fifo", time_scale=100.0)
    checkpoints = cluster.run_dir / "checkpoints"
    try:
        cluster.start()
        for job_id in (1, 2):
            assert _submit(cluster, job_map(job(job_id, iterations=TOTAL)))["accepted"]
        wait_for(lambda: all(_job_status(cluster, j).get("iterations_done", 0) > 500
                             for j in (1, 2)), 60, "both jobs to train a while")
        cluster.kill("agent-n0", signal.SIGTERM)  # its trainers checkpoint and stop
        wait_for(lambda: all(_job_status(cluster, j).get("state") == "pending"
                             for j in (1, 2)), 60, "both jobs to wait again")
        cluster.kill("scheduler", signal.SIGTERM)
        db = sqlite3.connect(f"file:{cluster.run_dir / 'journal.db'}?mode=ro", uri=True)
        try:  # where each job resumes from, as the scheduler settled it
            done = dict(db.execute("SELECT job_id, iterations_done FROM jobs"))
        finally:
            db.close()
        assert all(0 < d < TOTAL / 2 for d in done.values()), done

        # the records edited while nothing runs: a forward jump, and Infinity
        one = json.loads((checkpoints / "1.json").read_text())
        assert one["iterations"] == done[1]
        (checkpoints / "1.json").write_text(json.dumps({**one, "iterations": TOTAL - 10}))
        two = (checkpoints / "2.json").read_text()
        (checkpoints / "2.json").write_text(
            two.replace(json.dumps(done[2]), "Infinity", 1))
        assert "Infinity" in (checkpoints / "2.json").read_text()

        cluster.start_scheduler()
        wait_for(lambda: cluster.status() is not None, 60, "the scheduler to restart")
        refused = {r["job_id"]: r for r in log_records(cluster.run_dir, "checkpoint_refused")}
        assert refused[1]["claimed"] == repr(float(TOTAL - 10)) and refused[1]["reason"] == \
            "no trainer of the job logged that checkpoint in its ledger"
        assert refused[1]["resumes_from"] == done[1]
        assert refused[2]["claimed"] == "inf" and "not a finite number" in refused[2]["reason"]
        assert refused[2]["resumes_from"] == done[2]

        cluster.start_agent(0)
        status = cluster.wait_finished(2, 120)
        assert status["counts"]["finished"] == 2
        for j in (1, 2):  # each trainer refused the record too, and went on from the count
            said = (cluster.run_dir / "trainers" / f"{j}.stderr").read_text()
            assert f"job {j}: checkpoint_refused" in said
        journaled = dict(_journaled(cluster.run_dir))
        assert set(journaled) == {1, 2}
        db = sqlite3.connect(f"file:{cluster.run_dir / 'journal.db'}?mode=ro", uri=True)
        try:
            assert sorted(db.execute("SELECT job_id, phase, iterations_done FROM jobs")) == \
                [(1, "finished", TOTAL), (2, "finished", TOTAL)]
        finally:
            db.close()
        # the iterations the trainers trained, by their ledgers: [0, 5000] each, tiled once
        verdict = cluster.ledger_verdict({1: TOTAL, 2: TOTAL})
        assert verdict.ok, verdict
    finally:
        _stop(cluster)


# -- a submit whose answer never came -----------------------------------------------------------
def _submit_cli(cluster: LiveCluster, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _SUBMIT, "--endpoints",
                           str(cluster.endpoints_file), "--gpus", "1", "--iterations", "1000",
                           *args], cwd=ROOT, env=_env(), capture_output=True, text=True,
                          timeout=120)


def test_a_submit_that_saw_no_answer_names_its_key_and_the_same_key_never_makes_a_second_job(
        tmp_path):
    """The scheduler paused while interlace-submit waits: it gives up, yet the scheduler takes
    the submit once resumed. What it printed says how to find out without a second job."""
    cluster = _control(tmp_path)
    try:
        scheduler = cluster.procs["scheduler"]
        scheduler.send_signal(signal.SIGSTOP)
        try:
            gave_up = _submit_cli(cluster, "--timeout", "0.5", "--retries", "0")
        finally:
            scheduler.send_signal(signal.SIGCONT)
        assert gave_up.returncode == 1
        hint = gave_up.stderr.strip().splitlines()[-1]
        assert hint.startswith("interlace-submit: the scheduler may have taken it"), hint
        key = hint.split("--key ", 1)[1].split()[0]
        wait_for(lambda: len(_journaled(cluster.run_dir)) == 1, 30,
                 "the resumed scheduler to take the unanswered submit")
        made = _journaled(cluster.run_dir)[0][0]
        again = _submit_cli(cluster, "--key", key)
        assert again.returncode == 0, again.stderr
        assert f"submitted job {made}" in again.stdout.splitlines()
        assert [j for j, _ in _journaled(cluster.run_dir)] == [made]  # never a second job
        bad = _submit_cli(cluster, "--key", "no spaces")
        assert bad.returncode == 2 and "--key" in bad.stderr and "not a key" in bad.stderr
    finally:
        _stop(cluster)
