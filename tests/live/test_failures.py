"""A job's own failures on the live scheduler's real parts (core, SQLite journal, ledger, request
handlers; no sockets, a clock the test moves): a trainer that exits with an error backs off,
doubling, its stop no preemption; after the stated failures in a row without progress it is
`failed`, journaled with how it ended and its output's last lines, never planned again, and
a restart replays it (and a backoff under way). Out of GPU memory is no failure; progress
starts the count again; a job's own max_restarts replaces the bound."""
from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from scheduler.core.state import NodeSlice, Status
from scheduler.live import recovery
from scheduler.live.handlers import Handlers
from scheduler.live.journal import Journal
from scheduler.live.ledger import Placed
from scheduler.live.lifecycle import FAILED, QUEUED
from scheduler.live.options import Options
from scheduler.live.state import LiveState
from tests.helpers import Log, job, spec
from tests.live.test_live_handlers import register, say
from traces.record import record_to_map

BACKOFF, CAP = 10.0, 25.0  # wall seconds, at time scale 2: 20 and 50 trace seconds
SCALE = 2.0
CRASH = ("exit status 1: ModuleNotFoundError: No module named 'torch'\n"
         "run 1\nTraceback (most recent call last):\n  File \"train.py\", line 1, in <module>\n"
         "    import torch\nModuleNotFoundError: No module named 'torch'")


class Clock:
    """Wall seconds the test moves."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def live_state(run_dir: Path, clock: Clock, max_failures: int = 3) -> LiveState:
    return LiveState(Options(spec=spec(nodes=1, gpus=4), policy="fifo", run_dir=run_dir,
                             time_scale=SCALE, failure_backoff=BACKOFF, failure_backoff_cap=CAP,
                             max_failures=max_failures), Log(), clock)


@pytest.fixture
def live(tmp_path):
    clock = Clock()
    state = live_state(tmp_path, clock)
    yield state, Handlers(state), clock
    state.journal.close()


def run_it(state: LiveState, job_id: int = 1) -> None:
    """A round places the job on n0 (at the state's clock) and its launch is answered."""
    plan = state.core.round(state.now())
    assert job_id in [j for g in plan.groups for j in g.jobs], plan
    where = Placed((job_id,), 0.3, (NodeSlice(0, (0, 1, 2, 3)),))
    assert state.jobs.launch(job_id, where, 0.0)
    assert state.jobs.launched(job_id, where, {0: ("a", 1)}, {0: [0, 1, 2, 3]}, 0.0)


def crash(h: Handlers, iterations: float = 0.0, detail: str = CRASH, **extra) -> dict:
    return say(h, "job.finished", job_id=1, node="n0", iterations=iterations, ok=False,
               detail=detail, **extra)


def line(h: Handlers, job_id: int = 1) -> dict:
    return next(j for j in say(h, "status.query")["jobs"] if j["job_id"] == job_id)


def test_a_crash_backs_off_doubling_then_the_job_fails_for_good(live):
    state, h, clock = live
    say(h, "job.submit", job=record_to_map(job(1, num_gpu=4, iterations=1000)))
    register(h)
    holds = []
    for n in (1, 2):
        run_it(state)
        at = state.now()
        assert crash(h) == {"finished": False, "requeued": True}
        core_job = state.core.jobs[1]
        assert state.jobs.phase(1) is QUEUED and core_job.status is Status.PENDING
        assert core_job.preemptions == 0 and state.journal.get(1).preemptions == 0
        until = state.core.held_until(1)
        assert until == at + min(BACKOFF * 2 ** (n - 1), CAP) * SCALE  # 20, then 40
        holds.append(until)
        assert 1 not in [j for g in state.core.round(until - 1).groups for j in g.jobs]
        state.publish_view()
        shown = line(h)
        assert (shown["state"], shown["reason"]) == ("pending", "backoff")
        assert shown["preemptions"] == 0
        failure = shown["last_failure"]
        assert failure["exit"] == "exit status 1: ModuleNotFoundError: No module named 'torch'"
        assert failure["output"][-1] == "ModuleNotFoundError: No module named 'torch'"
        assert (failure["failures"], failure["not_before"]) == (n, until)
        clock.t += (until - state.now()) / SCALE  # the hold ends: the next round runs it
    run_it(state)
    crash(h)
    assert state.jobs.phase(1) is FAILED and state.core.jobs[1].status is Status.DONE
    assert all(1 not in g.jobs for g in state.core.round(state.now() + 1e6).groups)
    shown = line(h)
    assert shown["state"] == "failed" and shown["last_failure"]["not_before"] is None
    assert shown["last_failure"]["failures"] == 3 and shown["preemptions"] == 0
    assert "Traceback (most recent call last):" in shown["last_failure"]["output"]
    assert say(h, "status.query")["counts"]["failed"] == 1
    entry = state.journal.get(1)
    assert (entry.phase, entry.state, entry.preemptions) == ("failed", "finished", 0)
    kinds = [(kind, (detail or {}).get("failure", {}).get("count"))
             for _, kind, _, _, detail in state.journal.events(1)]
    assert kinds == [("submitted", None), ("started", None), ("stopped", 1),
                     ("started", None), ("stopped", 2), ("started", None), ("failed", 3)]
    said = state.log.of("job_failed")
    assert [r["job_id"] for r in said] == [1] and said[0]["exit"].startswith("exit status 1")
    # a late report of the ended job changes nothing, and it cannot be cancelled
    assert crash(h) == {"finished": True, "already": True}
    assert say(h, "job.cancel", job_id=1) == {"cancelled": False, "job_id": 1,
                                              "reason": "already failed"}


def test_progress_starts_the_count_again_and_out_of_memory_is_no_failure(live):
    state, h, clock = live
    say(h, "job.submit", job=record_to_map(job(1, num_gpu=4, iterations=1000)))
    register(h)
    for iterations in (0.0, 50.0, 120.0):  # each run checkpointed more than the last
        run_it(state)
        crash(h, iterations)
        assert state.jobs.failure(1).count == 1
        assert state.core.held_until(1) == state.now() + BACKOFF * SCALE
        clock.t += BACKOFF
    run_it(state)
    crash(h, 120.0, detail="out of GPU memory (exit status 4)", oom=True)
    assert state.jobs.phase(1) is QUEUED and state.core.jobs[1].alone
    assert state.jobs.failure(1).count == 1  # not counted: it runs alone from now on
    assert state.core.jobs[1].preemptions == 1  # as before: a stop outside a plan


def test_a_jobs_own_max_restarts_replaces_the_bound(live):
    state, h, _ = live
    say(h, "job.submit", job=record_to_map(replace(job(1, num_gpu=4, iterations=1000),
                                                   max_restarts=0)))
    register(h)
    run_it(state)
    crash(h)
    assert state.jobs.phase(1) is FAILED
    assert state.log.of("job_failed")[0]["failures"] == 1


def test_a_restart_replays_a_failed_job_and_a_backoff_under_way(tmp_path):
    clock = Clock()
    state = live_state(tmp_path, clock)
    h = Handlers(state)
    say(h, "job.submit", job=record_to_map(job(1, num_gpu=4, iterations=1000)))
    say(h, "job.submit", job=record_to_map(replace(job(2, num_gpu=4, iterations=1000),
                                                   max_restarts=0)))
    register(h)
    run_it(state)
    crash(h)
    until = state.core.held_until(1)
    run_it(state, 2)
    say(h, "job.finished", job_id=2, node="n0", iterations=0.0, ok=False, detail=CRASH)
    assert state.jobs.phase(2) is FAILED
    state.journal.close()

    again = live_state(tmp_path, clock)
    try:
        recovery.recover(again)
        h2 = Handlers(again)
        say(h2, "status.query")  # the loop's turn: the recovered events into the core
        assert again.jobs.phase(1) is QUEUED and again.core.held_until(1) == until
        assert again.jobs.phase(2) is FAILED and 2 not in again.core.jobs
        assert line(h2, 2)["last_failure"]["failures"] == 1
        assert line(h2, 2)["state"] == "failed"
        assert line(h2, 1)["last_failure"]["not_before"] == until
        register(h2)
        clock.t += (until - again.now()) / SCALE
        run_it(again)
        crash(h2)  # the count goes on from the journal's
        assert again.jobs.failure(1).count == 2
    finally:
        again.journal.close()


# A version-2 journal (before the failed phase): its phase checks as that scheduler wrote them.
_V2_PHASES = "'queued', 'launching', 'running', 'stopping', 'finished', 'cancelled'"


def test_a_version_2_journal_is_migrated_and_takes_a_failed_job(tmp_path):
    from scheduler.live import journal as journal_module

    path = tmp_path / "journal.db"
    schema = journal_module._SCHEMA.replace(journal_module._PHASES, _V2_PHASES)
    with sqlite3.connect(path) as db:
        db.executescript(schema)
        db.execute("INSERT INTO meta VALUES ('schema_version', '2')")
        db.execute("INSERT INTO jobs (job_id, record, state, submit_wall, submit_trace, phase) "
                   "VALUES (1, ?, 'submitted', 0, 3.0, 'queued')",
                   (__import__("json").dumps(record_to_map(job(1))),))
        db.execute("INSERT INTO events (ts, kind, job_id, phase) "
                   "VALUES (3.0, 'submitted', 1, 'queued')")
        with pytest.raises(sqlite3.IntegrityError):  # what the migration is for
            db.execute("UPDATE jobs SET phase='failed' WHERE job_id=1")
    with Journal(path) as journal:
        assert journal.migrated_from == 2
        assert journal.get(1).submit_trace == 3.0
        from scheduler.live.lifecycle import Transition
        assert journal.record(Transition(1, FAILED, "failed", 5.0, 0.0)) is not None
        assert journal.get(1).phase == "failed" and journal.finished()[0].phase == "failed"
        assert [e[1] for e in journal.events()] == ["submitted", "journal_migrated", "failed"]
        seqs = journal._query("SELECT seq FROM events ORDER BY seq")
        assert [s for (s,) in seqs] == [1, 2, 3]  # the sequence went on
    with Journal(path) as again:
        assert again.migrated_from is None
        assert again._query("SELECT value FROM meta WHERE key='schema_version'") == \
            [(str(journal_module.SCHEMA_VERSION),)]


def test_api_jobs_id_gives_all_the_output_kept_and_a_status_list_fits_one_frame(tmp_path):
    """/api/jobs/ID has a failed job's every kept line; a status list of the most jobs it
    shows, every one with the longest failure, still fits one message frame (the newest
    failures with their output, the others with how they ended)."""
    from broker.messages import MAX_MESSAGE_BYTES, encode, make
    from scheduler.live import status
    from scheduler.live.failures import OUTPUT_LINES, Failure
    from scheduler.live.webdata import JournalReader, job_detail

    state = live_state(tmp_path, Clock())
    try:
        for j in range(status.STATUS_JOBS_LIMIT + 5):
            assert state.jobs.accept(job(10**9 + j), 0.0)
            state.failures.restore(10**9 + j, Failure(
                2, 0.0, "exit status 1: " + "e" * 400,
                tuple(f"{i:02} " + "o" * 400 for i in range(OUTPUT_LINES)), float(j), 1e6))
        body = status.status(state)
        assert body["jobs_truncated"]
        shown = [j["last_failure"] for j in body["jobs"]]
        assert len(shown) == status.STATUS_JOBS_LIMIT
        assert sum(1 for f in shown if f["output"]) == status.FAILURES_SHOWN
        size = len(encode(make("reply", "scheduler", "r" * 64, re="q" * 64, ok=True,
                               body=body)))
        assert size < MAX_MESSAGE_BYTES, size
        reader = JournalReader(str(state.opt.journal_path))
        doc = job_detail(state, reader, 10**9)
        reader.close()
        assert len(doc["last_failure"]["output"]) == OUTPUT_LINES
        assert doc["last_failure"]["output"][0].startswith("00 ")
    finally:
        state.journal.close()


def test_interlace_status_prints_a_failure_and_the_options_refuse_bad_bounds(capsys):
    from scheduler.live.cli import parse_args
    from scheduler.tools.jobs import format_job, submit_main

    failed = {"job_id": 7, "state": "failed", "num_gpu": 1, "iterations_done": 0,
              "iterations": 100, "nodes": [], "preemptions": 0,
              "last_failure": {"exit": "exit status 2: main.py: error: unrecognized arguments",
                               "failures": 3, "output": ["usage: main.py [-h]",
                                                         "main.py: error: unrecognized "
                                                         "arguments"]}}
    assert format_job(failed).splitlines() == [
        "     7  failed     1 GPU  0/100 it  [failed: exit status 2: main.py: error: "
        "unrecognized arguments; 3 failures in a row]",
        "    | usage: main.py [-h]", "    | main.py: error: unrecognized arguments"]
    backing = dict(failed, state="pending", reason="backoff", why="its last run failed",
                   last_failure=dict(failed["last_failure"], failures=1))
    assert format_job(backing) == (
        "     7  pending    1 GPU  0/100 it  [backoff: its last run failed]  [last run failed: "
        "exit status 2: main.py: error: unrecognized arguments; 1 failure in a row]")
    assert len(format_job(backing, output=True).splitlines()) == 3
    for argv in (["--max-failures", "0"], ["--failure-backoff", "-1"]):
        with pytest.raises(SystemExit) as done:
            parse_args(["--spec", "n1g4", "--endpoints", "e", "--run-dir", "r", *argv])
        assert done.value.code == 2
        last = capsys.readouterr().err.strip().splitlines()[-1]  # after argparse's usage
        assert last.startswith("python -m scheduler.live: error: argument " + argv[0])
    with pytest.raises(SystemExit) as done:
        submit_main(["--gpus", "1", "--iterations", "5", "--max-restarts", "-1",
                     "--endpoints", "e"])
    assert done.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--max-restarts" in err and "[0, 1000]" in err
