"""The scheduler's journal: idempotent submits, state that survives reopening, crash safety."""
from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from scheduler.live.journal import Journal, JournalError
from tests.helpers import job
from traces.record import record_from_map, record_to_map

ROOT = Path(__file__).resolve().parents[2]


def test_submit_is_idempotent(tmp_path):
    with Journal(tmp_path / "j.db") as j:
        assert j.submit(job(1), 5.0) is True
        assert j.submit(job(1, iterations=999), 9.0) is False  # same id: the first one stays
        assert j.counts() == {"submitted": 1, "running": 0, "finished": 0}
        entry = j.get(1)
        assert entry.record == job(1) and entry.submit_trace == 5.0
        assert [e[1] for e in j.events()] == ["submitted"]


def test_state_survives_reopen(tmp_path):
    path = tmp_path / "j.db"
    with Journal(path) as j:
        for i in (3, 1, 2):
            j.submit(job(i, stages=(0.1, 0.2, 0.3, 0.4)), float(i))
        j.mark_started(1, 0, 10.0, node="n0")
        j.mark_stopped(1, 40, 20.0, node="n0")
        j.mark_started(1, 40, 25.0, node="n1")
        j.mark_started(2, 0, 26.0)
        assert j.mark_finished(2, 30.0, iterations=100) is True
        assert j.mark_finished(2, 31.0) is False
        j.set_clock(33.0)
    with Journal(path) as j:
        unfinished = j.unfinished()
        assert [e.record.job_id for e in unfinished] == [1, 3]  # arrival order
        record, done, *_ = unfinished[0]
        assert record == job(1, stages=(0.1, 0.2, 0.3, 0.4)) and done == 40
        first = unfinished[0]
        assert first.state == "running" and first.first_start_trace == 10.0
        assert first.preemptions == 1
        assert j.finished_ids() == {2}
        assert j.get(2).finish_trace == 30.0 and j.get(2).first_start_trace == 26.0
        assert j.counts() == {"submitted": 1, "running": 1, "finished": 1}
        assert j.clock() == 33.0
        kinds = [(e[1], e[2]) for e in j.events()]
        assert kinds[-1] == ("finished", 2)
        assert j.events(1)[1][3] == "n0"


def test_a_finished_job_stays_finished(tmp_path):
    with Journal(tmp_path / "j.db") as j:
        j.submit(job(1), 0.0)
        j.mark_finished(1, 5.0)
        j.mark_started(1, 0, 6.0)  # a late launch report must not revive it
        j.mark_stopped(1, 3, 7.0)
        assert j.get(1).state == "finished" and j.get(1).finish_trace == 5.0
        with pytest.raises(JournalError):
            j.mark_started(42, 0, 1.0)


def test_record_map_round_trip():
    record = job(7, num_gpu=2, stages=(0.01, 0.2, 0.03))
    data = record_to_map(record)
    assert data["stage_times"] == [0.01, 0.2, 0.03]
    assert record_from_map(data) == record
    with pytest.raises(TypeError):
        record_from_map({**data, "extra": 1})
    with pytest.raises(TypeError):
        record_from_map("not a map")


def test_wal_and_full_sync(tmp_path):
    path = tmp_path / "j.db"
    with Journal(path) as j:
        j.submit(job(1), 0.0)
        assert j._query("PRAGMA journal_mode")[0][0] == "wal"
        assert j._query("PRAGMA synchronous")[0][0] == 2  # FULL


_CHILD = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[3])
    from scheduler.live.journal import Journal
    from tests.helpers import job
    j = Journal(sys.argv[1])
    base = int(sys.argv[2])
    for i in range(base, base + 100000):
        if j.submit(job(i), float(i)):
            print(i, flush=True)  # acknowledged only once committed
        if i % 3 == 0:
            j.mark_started(i, 0, float(i))
        if i % 5 == 0:
            j.mark_finished(i, float(i) + 1)
""")


def test_every_acknowledged_job_survives_sigkill(tmp_path):
    """Kill a submitting process at random points; nothing acknowledged may be lost."""
    path, script = tmp_path / "j.db", tmp_path / "child.py"
    script.write_text(_CHILD)
    rng = random.Random(1234)
    acked: set[int] = set()
    for run in range(6):
        child = subprocess.Popen([sys.executable, str(script), str(path), str(run * 1_000_000),
                                  str(ROOT)], stdout=subprocess.PIPE, text=True)
        want = rng.randint(1, 60)
        got = 0
        try:
            while got < want:
                line = child.stdout.readline()
                assert line, "child exited before it was killed"
                acked.add(int(line))
                got += 1
        finally:
            os.kill(child.pid, signal.SIGKILL)
            child.wait()
            # lines it printed between our last read and the kill were acknowledged too
            acked.update(int(line) for line in child.stdout.read().split())
            child.stdout.close()
        with Journal(path) as j:
            assert j.integrity_check() == "ok"
            present = {e.record.job_id for e in j.unfinished()} | j.finished_ids()
            assert acked <= present
    raw = sqlite3.connect(path)
    try:
        assert raw.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        raw.close()


def test_a_regroup_stop_is_no_preemption(tmp_path):
    with Journal(tmp_path / "j.db") as j:
        j.submit(job(1), 0.0)
        j.mark_started(1, 0, 1.0, node="n0")
        j.mark_stopped(1, 5, 2.0, node="n0", detail={"reason": "regrouped"}, preempted=False)
        j.mark_started(1, 5, 3.0, node="n0")
        j.mark_stopped(1, 9, 4.0, node="n0", detail={"reason": "preempted"})
        assert j.get(1).preemptions == 1 and j.get(1).iterations_done == 9


@pytest.mark.parametrize("damage", ["truncated", "deleted", "garbage", "swapped"])
def test_a_journal_lost_under_its_marker_is_refused_and_left_as_it_is(tmp_path, damage):
    from scheduler.live.journal import JournalLost, marker_path

    path = tmp_path / "journal.db"
    with Journal(path) as j:
        j.submit(job(1), 0.0)
    made = Path(marker_path(path)).read_text().strip()
    if damage == "truncated":
        os.truncate(path, 0)
    elif damage == "deleted":
        path.unlink()
    elif damage == "garbage":
        path.write_bytes(b"not a journal" * 100)
    else:  # another run's journal copied over this one
        with Journal(tmp_path / "other.db") as other:
            other.submit(job(2), 0.0)
        os.replace(tmp_path / "other.db", path)
    before = path.read_bytes() if path.exists() else None
    with pytest.raises(JournalLost) as lost:
        Journal(path)
    assert str(path) in str(lost.value) and made in str(lost.value)
    assert "\n" not in str(lost.value) and "--fresh-journal" in str(lost.value)
    assert (path.read_bytes() if path.exists() else None) == before


def test_a_journal_from_before_markers_is_named_when_opened(tmp_path):
    from scheduler.live.journal import marker_path

    path = tmp_path / "journal.db"
    with Journal(path) as j:
        j.submit(job(1), 0.0)
        made = j.journal_id
    os.unlink(marker_path(path))  # as a version without markers left it
    db = sqlite3.connect(path)
    db.execute("DELETE FROM meta WHERE key='journal_id'")
    db.commit()
    db.close()
    with Journal(path) as j:
        assert j.get(1) is not None and j.journal_id != made
    assert Path(marker_path(path)).read_text().strip() == j.journal_id


def test_a_version_3_journal_is_migrated_and_keeps_submission_keys(tmp_path):
    from scheduler.live import journal as journal_module

    path = tmp_path / "journal.db"
    with sqlite3.connect(path) as db:  # version 3 as it was: no submissions table
        db.executescript(journal_module._SCHEMA.split("CREATE TABLE IF NOT EXISTS submissions")[0])
        db.execute("INSERT INTO meta VALUES ('schema_version', '3')")
        db.execute("INSERT INTO jobs (job_id, record, state, submit_wall, submit_trace) "
                   "VALUES (1, ?, 'submitted', 0, 3.0)", (json.dumps(record_to_map(job(1))),))
    with Journal(path) as j:
        assert j.migrated_from == 3 and j.get(1).submit_trace == 3.0
        assert j.submit(job(2), 4.0, submission=("", "k")) is True
        assert j.submitted("", "k") == 2 and j.submitted("other", "k") is None
        with pytest.raises(sqlite3.IntegrityError):  # one job per key and caller
            j.submit(job(3), 5.0, submission=("", "k"))
        assert j.get(3) is None  # the failed submit left nothing
    with Journal(path) as again:
        assert again.migrated_from is None and again.submitted("", "k") == 2
