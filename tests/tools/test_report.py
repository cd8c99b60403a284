"""interlace-report on hand-written scheduler logs: the expected numbers are worked out here
from the synthetic events (not by the code under test), corrupt lines are skipped, and a
missing or empty run is one clear line with exit status 1."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from scheduler.tools import report

T0 = 1_700_000_000.0  # wall epoch of the scheduler's start in the synthetic run


def _ts(wall: float) -> str:
    from datetime import datetime, timezone

    return datetime.fromtimestamp(wall, tz=timezone.utc).isoformat().replace("+00:00", "Z")


def _line(event: str, wall: float, **fields) -> str:
    return json.dumps({"component": "scheduler", **fields, "event": event, "level": "info",
                       "ts": _ts(wall)})


def _started(job_id, now, node, gpus, submit, first):
    return ("job_started", dict(job_id=job_id, node=node, nodes=[node], gpus={node: gpus},
                                group=[job_id], slot=0, now=now, submit=submit, first_start=first))


# (event, trace-seconds fields); wall time = T0 + index (one second apart). 8 GPUs in all.
# job 0: submit 0, start 10, end 110            JCT 110, queueing 10
# job 1: submit 50, start 60, stopped 150, restarted 160 on other GPUs, end 250
#                                               JCT 200, queueing 10, 1 preemption
# job 2: submit 100, start 130, end 400         JCT 300, queueing 30
# job 3: submit 380, never started              not counted
EVENTS = [
    ("scheduler_start", dict(policy="muri-s", preset="default", nodes=2, gpus=8,
                             time_scale=100.0)),
    ("agent_registered", dict(node="n0", gpus=[0, 1, 2, 3])),
    ("job_submitted", dict(job_id=0, num_gpu=4, iterations=10, model="resnet18", submit=0.0)),
    _started(0, 10.0, "n0", [0, 1, 2, 3], 0.0, 10.0),
    ("job_submitted", dict(job_id=1, num_gpu=4, iterations=10, model="gpt2", submit=50.0)),
    _started(1, 60.0, "n0", [0, 1, 2, 3], 50.0, 60.0),  # interleaved on job 0's GPUs
    ("round", dict(now=60.0, groups=[[0, 1]], launches=[1], stops=[])),
    ("job_submitted", dict(job_id=2, num_gpu=2, iterations=10, model="bert", submit=100.0)),
    ("job_finished", dict(job_id=0, node="n0", submit=0.0, start=10.0, end=110.0, jct=110.0,
                          preemptions=0, model="resnet18", num_gpu=4)),
    _started(2, 130.0, "n1", [0, 1], 100.0, 130.0),
    ("job_stopped", dict(job_id=1, reason="preempted", iterations=5, now=150.0, nodes=["n0"])),
    _started(1, 160.0, "n1", [2, 3], 50.0, 60.0),
    ("job_finished", dict(job_id=1, node="n1", submit=50.0, start=60.0, end=250.0, jct=200.0,
                          preemptions=1, model="gpt2", num_gpu=4)),
    ("job_submitted", dict(job_id=3, num_gpu=1, iterations=10, model="bert", submit=380.0)),
    ("job_finished", dict(job_id=2, node="n1", submit=100.0, start=130.0, end=400.0, jct=300.0,
                          preemptions=0, model="bert", num_gpu=2)),
    ("scheduler_exit", dict(rounds=9)),
]
LAST_FINISH_INDEX = 14  # wall offset (s) of the last job_finished above

JCTS = [110.0, 200.0, 300.0]
# busy GPUs over trace time: 4 (10-110: jobs 0 and 1 share n0's four), 4 (110-130),
# 6 (130-150), 2 (150-160), 4 (160-250), 2 (250-400)
BUSY = 4 * 100 + 4 * 20 + 6 * 20 + 2 * 10 + 4 * 90 + 2 * 150
EXPECTED = {
    "policy": "muri-s",
    "jobs": 3,
    "avg_jct": sum(JCTS) / 3,
    "p50_jct": 200.0,           # sorted[int(0.5 * 3)]
    "p99_jct": 300.0,           # sorted[int(0.99 * 3)]
    "makespan": 400.0,
    "avg_queueing": (10 + 10 + 30) / 3,
    "gpu_utilisation": BUSY / ((400.0 - 0.0) * 8),
    "preemptions": 1,
    "wall_s": float(LAST_FINISH_INDEX),
}


def write_run(run_dir: Path, extra_lines: dict[int, str] | None = None) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    lines = []
    for i, (event, fields) in enumerate(EVENTS):
        if extra_lines and i in extra_lines:
            lines.append(extra_lines[i])
        lines.append(_line(event, T0 + i, **fields))
    (run_dir / "scheduler.log").write_text("\n".join(lines) + "\n")
    return run_dir


def _json(capsys, *args) -> tuple[dict, str]:
    """The one JSON object printed, and what went to stderr."""
    assert report.main([*args, "--json"]) == 0
    captured = capsys.readouterr()
    out = captured.out.strip().splitlines()
    assert len(out) == 1
    return json.loads(out[0]), captured.err


def test_metrics_match_the_hand_computed_values(tmp_path, capsys):
    got, err = _json(capsys, str(write_run(tmp_path / "run")))
    assert err == ""
    for key, value in EXPECTED.items():
        assert got[key] == pytest.approx(value), key
    assert got["unfinished"] == 1 and got["source"] == "live" and got["time_scale"] == 100.0
    # the interlace-sim contract: these keys, in seconds
    assert {"policy", "jobs", "avg_jct", "p50_jct", "p99_jct", "makespan", "wall_s"} <= set(got)


def test_corrupt_lines_are_skipped_with_a_count(tmp_path, capsys):
    junk = {2: "not json at all", 5: '{"event": "job_started", "job_id": 1, "no', 9: "[1, 2]",
            12: '{"no_event_field": true}'}
    run = write_run(tmp_path / "run", junk)
    with open(run / "scheduler.log", "a") as fh:
        fh.write('\n{"event": "job_finished", "job_id": 9')  # a writer killed mid-line
    got, err = _json(capsys, str(run))
    for key, value in EXPECTED.items():
        assert got[key] == pytest.approx(value), key
    assert "skipped 5 unreadable lines" in err


def test_table_and_plot(tmp_path, capsys):
    run = write_run(tmp_path / "run")
    png = tmp_path / "cdf.png"
    assert report.main([str(run), "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    header, row = out.splitlines()[:2]
    assert header.split()[:2] == ["policy", "jobs"] and row.split()[:2] == ["muri-s", "3"]
    assert f"{EXPECTED['avg_jct'] / 3600:.2f}" in row  # hours, as interlace-sim prints
    assert "1 jobs had not finished" in out
    assert png.stat().st_size > 1000 and png.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("make, message", [
    (lambda d: d / "missing", "no such run directory"),
    (lambda d: d, "no scheduler.log"),
    (lambda d: (d / "scheduler.log").write_text("garbage\n") and d, "no finished jobs"),
    (lambda d: (d / "scheduler.log").write_text(
        _line("job_submitted", T0, job_id=1, submit=0.0) + "\n") and d, "no finished jobs"),
])
def test_unusable_run_dir_is_one_line_and_exit_1(tmp_path, capsys, make, message):
    run = make(tmp_path)
    assert report.main([str(run)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("interlace-report: ") and message in err[0]


def test_a_scheduler_restart_ends_what_ran_before_it(tmp_path, capsys):
    # job 0 runs on 4 of 8 GPUs from 0; the scheduler restarts at trace 100 (its journal
    # requeues the job without a job_stopped line); the job runs again from 200 to 300.
    first, again = (_started(0, 0.0, "n0", [0, 1, 2, 3], 0.0, 0.0),
                    _started(0, 200.0, "n1", [0, 1, 2, 3], 0.0, 0.0))
    lines = [
        _line("scheduler_start", T0, policy="srsf", gpus=8, clock=0.0),
        _line("job_submitted", T0 + 1, job_id=0, num_gpu=4, submit=0.0),
        _line(first[0], T0 + 2, **first[1]),
        _line("scheduler_start", T0 + 10, policy="srsf", gpus=8, clock=100.0),
        _line(again[0], T0 + 12, **again[1]),
        _line("job_finished", T0 + 13, job_id=0, submit=0.0, start=0.0, end=300.0,
              preemptions=1, num_gpu=4),
    ]
    (tmp_path / "scheduler.log").write_text("\n".join(lines) + "\n")
    got, _ = _json(capsys, str(tmp_path))
    assert got["policy"] == "srsf" and got["wall_s"] == pytest.approx(13.0)
    assert got["gpu_utilisation"] == pytest.approx((4 * 100 + 4 * 100) / (300 * 8))


def test_a_finish_the_log_missed_comes_from_the_journal(tmp_path):
    """The journal commits a finish before the log line: a kill between them leaves the log
    one behind. Job 3 here finished per the journal only."""
    from scheduler.live.journal import Journal
    from tests.helpers import job

    run = write_run(tmp_path / "run")
    with Journal(run / "journal.db") as journal:
        journal.submit(job(3, submit=380.0), 380.0)
        journal.mark_started(3, 0.0, 390.0, node="n0")
        journal.mark_finished(3, 500.0, 10.0, node="n0")
    live = report.load_run(run)
    three = next(o for o in live.outcomes if o.job_id == 3)
    assert (three.start, three.end) == (390.0, 500.0)
    assert live.unfinished == []


def _trainer_log(run: Path, job_id: int, *starts: float) -> None:
    (run / f"trainer-{job_id}.log").write_text("".join(
        json.dumps({"event": "trainer_start", "ts": _ts(wall), "level": "info"}) + "\n"
        for wall in starts))


def test_restart_overhead_charges_each_start_from_the_last_decision_before_it(tmp_path):
    # Job 0: decided at +1.0, its trainer starts at +1.5 (0.5 s); decided again at +4.0, but
    # a round at +4.2 decided otherwise before that trainer began, and it starts at +4.5 from
    # the second decision (0.3 s). Job 1: one start 0.2 s after its decision. A pairing by
    # count would charge job 0's second start from +4.0 and lose job 1 nothing: 0.5, 0.5, 0.2.
    lines = [
        _line("scheduler_start", T0, policy="muri-s", gpus=8, time_scale=100.0),
        _line("job_submitted", T0, job_id=0, num_gpu=1, submit=0.0),
        _line("job_submitted", T0, job_id=1, num_gpu=1, submit=0.0),
        _line("round", T0 + 1.0, now=0.0, launches=[0], stops=[]),
        _line("round", T0 + 2.0, now=100.0, launches=[1], stops=[]),
        _line("round", T0 + 4.0, now=300.0, launches=[0], stops=[0]),
        _line("round", T0 + 4.2, now=320.0, launches=[0], stops=[0]),
        _line("job_finished", T0 + 9.0, job_id=0, submit=0.0, start=0.0, end=800.0,
              preemptions=0, num_gpu=1),
    ]
    (tmp_path / "scheduler.log").write_text("\n".join(lines) + "\n")
    _trainer_log(tmp_path, 0, T0 + 1.5, T0 + 4.5)
    _trainer_log(tmp_path, 1, T0 + 2.2)
    live = report.load_run(tmp_path)
    assert live.restart_overhead_s == pytest.approx((0.5 + 0.3 + 0.2) / 3 * 100.0)


def test_a_regroup_is_no_preemption_and_is_shown_apart(tmp_path, capsys):
    # without a finish line to give the scheduler's count, the stops are counted: a stop to
    # regroup or move a job the plan keeps running is not one (as in the simulator)
    started = _started(0, 0.0, "n0", [0], 0.0, 0.0)
    lines = [_line("scheduler_start", T0, policy="muri-s", gpus=8),
             _line("job_submitted", T0, job_id=0, num_gpu=1, submit=0.0),
             _line("job_submitted", T0, job_id=1, num_gpu=1, submit=0.0),
             _line(started[0], T0 + 1, **started[1])]
    for i, reason in enumerate(("regrouped", "moved", "preempted", "agent lost")):
        lines.append(_line("job_stopped", T0 + 2 + i, job_id=0, reason=reason, now=10.0 * i))
        lines.append(_line(started[0], T0 + 2 + i, **{**started[1], "now": 10.0 * i + 1}))
    lines.append(_line("job_finished", T0 + 9, job_id=1, submit=0.0, start=0.0, end=50.0))
    lines.append(_line("job_regrouped", T0 + 8, job_id=1, group=[1, 0], slot=0))
    (tmp_path / "scheduler.log").write_text("\n".join(lines) + "\n")
    live = report.load_run(tmp_path)
    outcomes = {o.job_id: o for o in live.outcomes}
    assert outcomes[0].preemptions == 2 and outcomes[0].starts == 5
    # and the user sees the regroups apart: one in place, two by a stop and a relaunch
    assert (live.regroups, live.regroup_stops) == (1, 2)
    assert report.main([str(tmp_path)]) == 0
    assert "regroups: 1 in place, 2 by a stop and a relaunch" in capsys.readouterr().out
    assert report.main([str(tmp_path), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["regroups"], shown["regroup_stops"]) == (1, 2)


def test_an_unreadable_journal_is_a_warning_naming_it(tmp_path, capsys):
    """Job 3 is unfinished in the log; the journal that could say more is not SQLite."""
    run = write_run(tmp_path / "run")
    (run / "journal.db").write_text("not a database\n" * 100)
    got, err = _json(capsys, str(run))
    assert got["unfinished"] == 1  # the log stands
    assert err.splitlines() == [f"interlace-report: warning: {run / 'journal.db'}: cannot read "
                                f"the journal (file is not a database); finishes are taken "
                                f"from scheduler.log only"]


def test_a_bug_while_reading_the_journal_is_not_hidden(tmp_path, monkeypatch):
    from scheduler.live.journal import Journal
    from tests.helpers import job

    run = write_run(tmp_path / "run")
    with Journal(run / "journal.db") as journal:
        journal.submit(job(3, submit=380.0), 380.0)

    def broken(self):
        raise TypeError("a bug in the journal reader")
    monkeypatch.setattr(Journal, "finished", broken)
    with pytest.raises(TypeError, match="a bug in the journal reader"):
        report.load_run(run)


def test_the_groups_the_rounds_ran_are_counted(tmp_path, capsys):
    """The synthetic log's one group ([0, 1] at 60 s), counted once however often a round
    lists it; a round's malformed groups are passed over."""
    run = write_run(tmp_path / "run", {
        7: _line("round", T0 + 6.5, now=100.0, groups=[[1, 0], [2]], launches=[], stops=[]),
        8: _line("round", T0 + 7.5, now=101.0, groups=[["x", 1], 5], launches=[], stops=[])})
    got, _ = _json(capsys, str(run))
    assert (got["groups"], got["jobs_grouped"]) == (1, 2)
    assert report.main([str(run)]) == 0
    assert "interleaved: 1 group of two or more jobs formed, 2 of 4 jobs ran in one" \
        in capsys.readouterr().out


def test_a_cancel_or_failure_the_log_missed_is_apart_from_the_figures(tmp_path):
    """Job 3 ended per the journal only: cancelled after 4 of its 10 iterations. It did not
    complete, so its time is in no JCT figure (before, the journal's end made it count as
    finished); it is listed apart with what it did."""
    from scheduler.live.journal import Journal
    from tests.helpers import job

    run = write_run(tmp_path / "run")
    with Journal(run / "journal.db") as journal:
        journal.submit(job(3, submit=380.0, iterations=10), 380.0)
        journal.mark_started(3, 0.0, 390.0, node="n0")
        journal.mark_cancelled(3, 500.0, 4.0)
    live = report.load_run(run)
    assert 3 not in [o.job_id for o in live.outcomes] and live.unfinished == []
    assert live.ended_early == [report.EndedEarly(3, "cancelled", 4.0, 10)]
    assert live.result().summary.jobs == 3  # jobs 0, 1 and 2, as before


def test_cancelled_and_failed_jobs_are_shown_apart_and_failures_are_no_preemptions(
        tmp_path, capsys):
    started = _started(0, 0.0, "n0", [0], 0.0, 0.0)
    lines = [_line("scheduler_start", T0, policy="fifo", gpus=8),
             _line("job_submitted", T0, job_id=0, num_gpu=1, iterations=100, submit=0.0),
             _line("job_submitted", T0, job_id=1, num_gpu=1, iterations=50, submit=0.0),
             _line("job_submitted", T0, job_id=2, num_gpu=1, iterations=80, submit=0.0),
             _line(started[0], T0 + 1, **started[1])]
    for i in range(2):  # job 0 fails twice (each stop a failure), then runs to its end
        lines.append(_line("job_run_failed", T0 + 2 + i, job_id=0, now=10.0 * i))
        lines.append(_line("job_stopped", T0 + 2 + i, job_id=0, reason="failed on n0: x",
                           now=10.0 * i, failure=i + 1))
        lines.append(_line(started[0], T0 + 2 + i, **{**started[1], "now": 10.0 * i + 5}))
    lines += [_line("job_failed", T0 + 5, job_id=1, now=30.0, iterations=0.0, failures=3,
                    exit="exit status 2: main.py: error: unrecognized arguments"),
              _line("job_cancelled", T0 + 6, job_id=2, now=40.0, iterations=30.0),
              _line("job_finished", T0 + 9, job_id=0, submit=0.0, start=0.0, end=50.0)]
    (tmp_path / "scheduler.log").write_text("\n".join(lines) + "\n")
    live = report.load_run(tmp_path)
    assert [(o.job_id, o.preemptions) for o in live.outcomes] == [(0, 0)]
    assert live.ended_early == [report.EndedEarly(1, "failed", 0.0, 50, "exit status 2: main.py: "
                                                  "error: unrecognized arguments"),
                                report.EndedEarly(2, "cancelled", 30.0, 80)]
    assert live.failures == 3 and live.result().summary.jobs == 1
    assert report.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "cancelled: 1 job, not in the JCT figures: 2 (30/80 it)" in out
    assert "failed: 1 job, not in the JCT figures: 1 (0/50 it)\n  job 1: exit status 2: " \
        "main.py: error: unrecognized arguments\n" in out
    assert "failed runs: 3" in out
