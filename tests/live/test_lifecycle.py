"""The job lifecycle (scheduler/live/lifecycle.py) on real parts: a real core, a real SQLite
journal, the real ledger; no sockets. Random sequences of transitions never leave the table
and keep the journal, the core and the ledger in step; the journal replays to the phases the
live machine had; and a restarted scheduler rebuilds its jobs by replaying the journal, a
version-1 journal included."""
from __future__ import annotations

import json
import os
import sqlite3
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from scheduler.core.state import NodeSlice, Status
from scheduler.live import recovery, status
from scheduler.live.journal import SCHEMA_VERSION, Journal, JournalError
from scheduler.live.ledger import Placed
from scheduler.live.failures import Failure
from scheduler.live.lifecycle import (ALLOWED, CANCELLED, ENDED, FAILED, FINISHED, LAUNCHING,
                                      MOVES, QUEUED, RUNNING, STOPPING, Phase, replay)
from scheduler.live.metrics import SchedulerMetrics
from scheduler.live.options import Options
from scheduler.live.state import LiveState
from tests.helpers import Log, job, settle, spec
from trainer import checkpoint
from traces.record import record_to_map

TOTAL = 100  # iterations of every job here
JOBS = (1, 2, 3)


def live_state(run_dir: Path, metrics: bool = False) -> LiveState:
    state = LiveState(Options(spec=spec(nodes=2, gpus=4), policy="fifo", run_dir=run_dir),
                      Log(), time.monotonic)
    if metrics:
        state.metrics = SchedulerMetrics(state)
    return state


def where(job_id: int, node: int = 0, tt: float = 0.3) -> Placed:
    return Placed((job_id,), tt, (NodeSlice(node, (job_id % 4,)),))


def scrape(state: LiveState) -> dict[str, dict[tuple, float]]:
    out: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(generate_latest(state.metrics.registry).decode()):
        for sample in family.samples:
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out


# -- the table ---------------------------------------------------------------------------------
def test_the_table_ends_in_finished_cancelled_or_failed_and_every_phase_is_reachable():
    assert ALLOWED[FINISHED] == ALLOWED[CANCELLED] == ALLOWED[FAILED] == frozenset()
    reached, frontier = set(), {None}
    while frontier:
        frontier = {after for before in frontier for after in ALLOWED[before]} - reached
        reached |= frontier
    assert reached == set(Phase)
    for phase in set(Phase) - ENDED:  # a live job can always be finished, cancelled or failed
        assert {FINISHED, CANCELLED, FAILED} <= ALLOWED[phase]
    # each transition's own sources are a part of the table, and only the table's
    assert all(m.target in ALLOWED[b] for m in MOVES.values() for b in m.sources)


# -- random sequences --------------------------------------------------------------------------
def act(state: LiveState, name: str, job_id: int) -> bool | None:
    """Ask the lifecycle for transition `name` of `job_id`, as the live code does; whether it
    happened (None for `stopping`, which says nothing)."""
    jobs, now = state.jobs, state.now()
    calls = {
        "submit": lambda: jobs.accept(job(job_id, iterations=TOTAL), now),
        "launch": lambda: jobs.launch(job_id, where(job_id), 0.0),
        "launched": lambda: jobs.launched(job_id, where(job_id), {}, {}, 0.0),
        "launch_failed": lambda: jobs.launch_failed(job_id, 0.0, "n0", []),
        "stopping": lambda: jobs.stopping([job_id]),
        "stopped": lambda: jobs.stopped(job_id, where(job_id), 10.0, False, "preempted", True),
        "regrouped": lambda: jobs.regrouped(job_id, where(job_id, tt=0.4)),
        "requeue": lambda: jobs.requeue(job_id, now, "a test"),
        "checkpointed": lambda: jobs.checkpointed(job_id, 20.0, "n0", "a test"),
        "finish": lambda: jobs.finish(job_id, now, float(TOTAL), "n0"),
        "cancel": lambda: jobs.cancel(job_id, now) is not None,
        "fail": lambda: jobs.fail(job_id, now, "n0", Failure(3, 0.0, "exit status 1",
                                                              ("boom",), now, None)),
    }
    return calls[name]()


def phases_of(state: LiveState) -> dict[int, Phase]:
    return {j: state.jobs.phase(j) for j in JOBS if state.jobs.phase(j) is not None}


def assert_stores_in_step(state: LiveState) -> None:
    """The journal, the core and the ledger say what the phases say."""
    phases = phases_of(state)
    settle(state)  # the loop's next turn, and the view it leaves
    state.publish_view()
    ledger, core, journal = state.ledger, state.core, state.journal
    assert set(ledger.launching) == {j for j, p in phases.items() if p is LAUNCHING}
    assert set(ledger.placed) == {j for j, p in phases.items() if p in (RUNNING, STOPPING)}
    assert {j for j in phases if core.jobs[j].status is Status.DONE} == \
        {j for j, p in phases.items() if p in ENDED}
    assert +state.jobs.counts == Counter(phases.values())
    assert replay(journal.transitions()).phases == phases  # the journal replays to them
    assert {j: Phase(journal.get(j).phase) for j in phases} == phases
    assert +Counter(journal.phase_counts()) == Counter(phases.values())


ALL = sorted(MOVES)


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_random_transitions_never_leave_the_table_and_replay_to_the_same_phases(data):
    """Each step asks for a transition of a random job: mostly one its phase allows and that
    does not end it (so that sequences go far), sometimes any its phase allows, sometimes
    any at all (so that refusals are tried from every phase)."""
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None  # fsyncs cost nothing there
    with tempfile.TemporaryDirectory(dir=shm) as tmp:
        state = live_state(Path(tmp))
        try:
            for _ in range(data.draw(st.integers(1, 80), label="steps")):
                job_id = data.draw(st.sampled_from(JOBS), label="job")
                before = state.jobs.phase(job_id)
                legal = [n for n in ALL if before in MOVES[n].sources] or ALL
                onward = [n for n in legal if MOVES[n].target not in ENDED] or legal
                pool = data.draw(st.sampled_from((onward, onward, onward, legal, ALL)))
                name = data.draw(st.sampled_from(pool), label="transition")
                refused = sum(state.jobs.refused.values())
                written = len(state.journal.transitions())
                done = act(state, name, job_id)
                after = state.jobs.phase(job_id)
                move = MOVES[name]
                if done or (done is None and before in move.sources):
                    assert before in move.sources and after is move.target
                    assert after in ALLOWED[before]
                    assert sum(state.jobs.refused.values()) == refused
                    assert len(state.journal.transitions()) == written + 1
                else:  # refused, or a no-op the table allows (a resubmit, a stop again)
                    assert after is before
                    assert len(state.journal.transitions()) == written
                    quiet = (name == "submit" and before is not None) or \
                        (name == "stopping" and before is STOPPING)
                    assert sum(state.jobs.refused.values()) == refused + (not quiet)
                assert_stores_in_step(state)
            counts = status.status(state, jobs=False)["counts"]
            assert counts == state.jobs.status_counts()
            # the queue's places are 1..n over the jobs shown pending, and only theirs
            lines = status.status(state)["jobs"]
            placed = sorted(l["position"] for l in lines if "position" in l)
            assert placed == list(range(1, counts["pending"] + 1))
            assert all(l["state"] == "pending" for l in lines if "position" in l)
            assert sum(counts.values()) == len(phases_of(state))
        finally:
            state.journal.close()


def test_replay_skips_what_the_table_does_not_allow():
    rows = [(1, "queued", None, None), (1, "launching", "n0", {"nodes": ["n0", "n1"]}),
            (1, "finished", "n0", None), (1, "launching", "n2", None),  # a v1 journal's late row
            (2, "running", None, None), (2, "stopping", None, None),  # never submitted
            (3, "queued", None, None), (3, "stopping", None, None), (3, "cancelled", None, None)]
    history = replay(rows)
    assert history.phases == {1: FINISHED, 3: CANCELLED}
    assert history.launched_on == {1: frozenset({"n0", "n1"})}
    assert history.refused == [(1, FINISHED, LAUNCHING), (2, None, RUNNING), (2, None, STOPPING),
                               (3, QUEUED, STOPPING)]


# -- refusals ----------------------------------------------------------------------------------
def test_an_illegal_transition_is_refused_logged_counted_and_changes_nothing(tmp_path):
    state = live_state(tmp_path, metrics=True)
    try:
        assert state.jobs.accept(job(1, iterations=TOTAL), 0.0)
        events = state.journal.events(1)
        assert state.jobs.launched(1, where(1), {}, {}, 0.0) is False  # never launched
        assert state.jobs.stopped(1, where(1), 5.0, False, "preempted", True) is False
        assert state.jobs.phase(1) is QUEUED and 1 not in state.ledger.placed
        assert state.journal.events(1) == events and state.journal.get(1).phase == "queued"
        said = state.log.of("transition_refused")
        assert [r["transition"] for r in said] == ["launched from queued", "stopped from queued"]
        assert status.status(state, jobs=False)["transitions_refused"] == \
            {"launched from queued": 1, "stopped from queued": 1}
        got = scrape(state)["interlace_transitions_refused_total"]
        assert got == {(("transition", "launched from queued"),): 1,
                       (("transition", "stopped from queued"),): 1}
    finally:
        state.journal.close()


def test_a_transition_the_journal_refuses_is_not_applied(tmp_path):
    """The journal checks the table too: where its phase and the live one part, nothing
    changes in memory (the stores stay in step with the durable record)."""
    state = live_state(tmp_path)
    try:
        state.jobs.accept(job(1, iterations=TOTAL), 0.0)
        with sqlite3.connect(state.opt.journal_path) as db:  # someone else ended it
            db.execute("UPDATE jobs SET phase='finished', state='finished' WHERE job_id=1")
        assert state.jobs.launch(1, where(1), 0.0) is False
        assert state.jobs.phase(1) is QUEUED and state.ledger.launching == {}
        assert state.log.of("transition_refused")[0]["why"] == "the journal refused it"
    finally:
        state.journal.close()


# -- submissions reach the core through the loop ------------------------------------------------
def test_an_accepted_submission_reaches_the_core_at_the_loops_next_turn(tmp_path):
    """`accept` journals the job and queues it at once (its phase, its log line); the core
    has it from the loop's next turn, in the order accepted, and a cancel before that turn
    reaches it after the submission; a restart before the turn finds it in the journal."""
    state = live_state(tmp_path)
    try:
        assert state.jobs.accept(job(2, iterations=TOTAL), 1.0)
        assert state.jobs.accept(job(1, iterations=TOTAL), 2.0)
        assert not state.jobs.accept(job(2, iterations=7), 3.0)  # the journal knows the id
        assert state.journal.get(2).phase == "queued" and state.jobs.phase(2) is QUEUED
        assert not state.core.jobs  # only the loop writes the core
        assert [r["job_id"] for r in state.log.of("job_submitted")] == [2, 1]
        again = live_state(tmp_path)  # a restart before the loop's turn
        recovery.recover(again)
        settle(again)
        assert {j.id for j in again.core.queue} == {1, 2}
        again.journal.close()
        assert state.jobs.cancel(1, 4.0) is not None
        settle(state)
        assert [j.id for j in state.core.queue] == [2]  # 1 came, then ended
        assert state.core.jobs[1].status is Status.DONE
        assert state.core.jobs[2].record.iterations == TOTAL
        assert state.rounds.take_reasons() == ["arrival", "cancel"]
        settle(state)  # taken once
        assert [j.id for j in state.core.queue] == [2]
    finally:
        state.journal.close()


# -- recovery ----------------------------------------------------------------------------------
def _a_journal_with_every_phase(run_dir: Path) -> dict[int, float]:
    """Jobs 1..7, one per phase and one more running with a complete checkpoint; returns
    each finished job's JCT."""
    state = live_state(run_dir)
    jobs = state.jobs
    try:
        for j in range(1, 8):
            assert jobs.accept(job(j, iterations=TOTAL, submit=float(j)), float(j))
        jobs.launch(2, where(2, node=0), 0.0)  # 2: launching on n0
        for j, node in ((3, 1), (4, 0), (5, 0), (6, 1), (7, 1)):  # out on their nodes
            assert jobs.launch(j, where(j, node), 0.0)
            assert jobs.launched(j, where(j, node), {}, {}, 0.0)
        jobs.stopping([4])  # 4: a round is stopping it
        jobs.finish(5, 50.0, float(TOTAL), "n0")  # 5: finished
        jobs.cancel(6, 60.0)  # 6: cancelled
        checkpoint.write(state.opt.checkpoints, checkpoint.Checkpoint(3, 40.0, TOTAL, "n1"))
        checkpoint.write(state.opt.checkpoints, checkpoint.Checkpoint(7, TOTAL, TOTAL, "n1"))
        entry = state.journal.get(5)
        return {5: entry.finish_trace - entry.submit_trace}
    finally:
        state.journal.close()


def test_a_restart_rebuilds_every_job_by_replaying_the_journal(tmp_path):
    jct = _a_journal_with_every_phase(tmp_path)
    state = live_state(tmp_path, metrics=True)
    # queued job 1's checkpoint is ahead of its journaled progress (its trainer's last
    # record landed after its stop was journaled): it resumes from there too
    checkpoint.write(state.opt.checkpoints, checkpoint.Checkpoint(1, 25.0, TOTAL, "n0"))
    try:
        recovery.recover(state)
        settle(state)
        jobs = state.jobs
        # ended stays ended; queued stays queued; out (launching, running, stopping) is
        # requeued from its checkpoint, or finished when that holds every iteration
        assert {j: jobs.phase(j) for j in range(1, 8)} == {
            1: QUEUED, 2: QUEUED, 3: QUEUED, 4: QUEUED, 5: FINISHED, 6: CANCELLED, 7: FINISHED}
        assert replay(state.journal.transitions()).phases == \
            {j: jobs.phase(j) for j in range(1, 8)}
        for j in (2, 3, 4):
            _, kind, _, _, detail = state.journal.events(j)[-1]
            assert (kind, detail) == ("stopped", {"reason": "scheduler restart"})
        assert state.core.jobs[3].remaining == TOTAL - 40.0
        assert state.core.jobs[1].remaining == TOTAL - 25.0
        assert sorted(j.id for j in state.core.queue) == [1, 2, 3, 4]
        assert 5 not in state.core.jobs and 6 not in state.core.jobs
        # no round until the nodes of the jobs that were out are heard from
        assert state.rounds.awaiting == {"n0", "n1"}
        # what is derived from the journal is the journal's
        body = status.status(state)
        states = {j["job_id"]: j["state"] for j in body["jobs"]}
        assert states == {1: "pending", 2: "pending", 3: "pending", 4: "pending",
                          5: "finished", 6: "cancelled", 7: "finished"}
        totals = state.journal.phase_counts()  # a cancelled job is not finished
        assert body["counts"] == {"pending": totals[QUEUED], "running": totals[RUNNING],
                                  "finished": totals[FINISHED],
                                  "cancelled": totals[CANCELLED], "failed": totals[FAILED]} \
            == {"pending": 4, "running": 0, "finished": 2, "cancelled": 1, "failed": 0}
        got = scrape(state)
        assert {k[0][1]: v for k, v in got["interlace_jobs"].items()} == body["counts"]
        # the JCTs of the jobs finished before the restart, and of the one finished at it
        assert got["interlace_job_completion_seconds_count"][()] == 2
        finished_7 = state.journal.get(7)
        assert got["interlace_job_completion_seconds_sum"][()] == pytest.approx(
            jct[5] + finished_7.finish_trace - finished_7.submit_trace)
    finally:
        state.journal.close()


def test_recovery_believes_the_transitions_over_the_jobs_table(tmp_path):
    _a_journal_with_every_phase(tmp_path)
    with sqlite3.connect(tmp_path / "journal.db") as db:  # a table edited by hand
        db.execute("UPDATE jobs SET phase='finished', state='finished' WHERE job_id=1")
    state = live_state(tmp_path)
    try:
        recovery.recover(state)
        settle(state)
        assert state.jobs.phase(1) is QUEUED and 1 in state.core.jobs
        said = state.log.of("journal_disagrees")
        assert [(r["job_id"], r["replayed"], r["table"]) for r in said] == \
            [(1, "queued", "finished")]
    finally:
        state.journal.close()


# A version-1 journal, as the scheduler before the lifecycle wrote it.
_V1 = """
CREATE TABLE jobs (job_id INTEGER PRIMARY KEY, record TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('submitted', 'running', 'finished')),
    iterations_done REAL NOT NULL DEFAULT 0, submit_wall REAL NOT NULL,
    submit_trace REAL NOT NULL, first_start_trace REAL, finish_trace REAL,
    preemptions INTEGER NOT NULL DEFAULT 0);
CREATE TABLE events (seq INTEGER PRIMARY KEY AUTOINCREMENT, ts REAL NOT NULL,
    kind TEXT NOT NULL, job_id INTEGER, node TEXT, detail TEXT);
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO meta VALUES ('schema_version', '1');
"""


def _v1_journal(path: Path) -> None:
    """Job 1 waits after a stop; 2 runs on n1; 3 finished (and a late launch report wrote
    a start after it, as version 1 did); 4 was cancelled."""
    jobs = {1: ("submitted", 30.0, None, None), 2: ("running", 10.0, 5.0, None),
            3: ("finished", 100.0, 6.0, 40.0), 4: ("finished", 0.0, None, 41.0)}
    events = [(1.0, "submitted", 1, None, None), (2.0, "submitted", 2, None, None),
              (3.0, "submitted", 3, None, None), (4.0, "submitted", 4, None, None),
              (5.0, "started", 2, "n1", {"nodes": ["n1"]}), (5.5, "started", 1, "n0", None),
              (6.0, "started", 3, "n0", None), (7.0, "stopped", 1, "n0", {"reason": "moved"}),
              (40.0, "finished", 3, "n0", None), (41.0, "cancelled", 4, None, None),
              (42.0, "started", 3, "n0", None), (43.0, "agent_dead", None, "n0", None)]
    db = sqlite3.connect(path)
    try:
        db.executescript(_V1)
        for j, (state, done, start, end) in jobs.items():
            db.execute("INSERT INTO jobs VALUES (?, ?, ?, ?, 0, ?, ?, ?, 0)",
                       (j, json.dumps(record_to_map(job(j, iterations=TOTAL))), state, done,
                        float(j), start, end))
        for ts, kind, j, node, detail in events:
            db.execute("INSERT INTO events (ts, kind, job_id, node, detail) "
                       "VALUES (?, ?, ?, ?, ?)",
                       (ts, kind, j, node, None if detail is None else json.dumps(detail)))
        db.commit()
    finally:
        db.close()


def test_a_version_1_journal_is_migrated_and_replays_to_its_jobs(tmp_path):
    _v1_journal(tmp_path / "journal.db")
    state = live_state(tmp_path)
    try:
        assert state.journal.migrated_from == 1
        assert state.journal.phase_counts() == {QUEUED: 1, LAUNCHING: 1, RUNNING: 0,
                                                STOPPING: 0, FINISHED: 1, CANCELLED: 1,
                                                FAILED: 0}
        recovery.recover(state)
        settle(state)
        assert {j: state.jobs.phase(j) for j in (1, 2, 3, 4)} == \
            {1: QUEUED, 2: QUEUED, 3: FINISHED, 4: CANCELLED}
        assert state.rounds.awaiting == {"n1"}  # where 2 was last launched
        assert state.core.jobs[1].remaining == TOTAL - 30.0
        assert state.log.of("journal_replay_refused")[0]["count"] == 1  # 3's late start
        kinds = [e[1] for e in state.journal.events()]
        assert kinds.count("journal_migrated") == 1 and kinds[-1] == "stopped"
    finally:
        state.journal.close()
    with Journal(tmp_path / "journal.db") as again:  # migrated once: now of this version
        assert again.migrated_from is None
        assert again._query("SELECT value FROM meta WHERE key='schema_version'") == \
            [(str(SCHEMA_VERSION),)]
        assert again.submit(job(5), 50.0, submission=("", "k")) and again.submitted("", "k") == 5


def test_a_journal_of_an_unknown_version_is_refused_in_one_line(tmp_path):
    path = tmp_path / "journal.db"
    Journal(path).close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE meta SET value='9' WHERE key='schema_version'")
    with pytest.raises(JournalError) as info:
        Journal(path)
    message = str(info.value)
    assert "\n" not in message and "schema version 9" in message and str(path) in message
