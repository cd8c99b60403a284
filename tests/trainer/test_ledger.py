"""The trainers' ledger (trainer/ledger.py): the verdict can fail, and real trainers feed it.

Synthetic ledgers with one defect each (an overlap, a gap, a doubled segment, a missing or a
doubled finish, an unbounded kill) must each be flagged and a clean one must pass; then real
emulated trainer processes (stopped, SIGKILLed, relaunched) write ledgers that pass.
"""
from __future__ import annotations

import json
import os
import signal
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from trainer import checkpoint
from tests.trainer.test_trainer import finish, start, trainer_cmd, wait_for
from trainer.ledger import Ledger, judge_run_dir, read_ledgers, verdict
from trainer.exits import EXIT_FINISHED, EXIT_STOPPED

TOTAL = 100.0


class Book:
    """Builds ledger records the way trainers write them, at chosen times."""

    def __init__(self) -> None:
        self.records: list[dict] = []
        self.pids = iter(range(1000, 10**6))

    def run(self, job: int, t0: float, resumed: float, cps: list[float], t_end: float,
            how: str | None, node: str = "n0", total: float = TOTAL, rank: int = 0,
            world: int = 1, launch: str = "", pid: int | None = None) -> int:
        """One process: start at t0, checkpoints evenly spread in (t0, t_end), an end record
        at t_end unless `how` is None (SIGKILLed). Returns its pid."""
        pid = next(self.pids) if pid is None else pid
        base = {"job": job, "node": node, "pid": pid, "incarnation": f"i{pid}", "rank": rank}
        self.records.append({"kind": "start", **base, "world_size": world, "launch": launch,
                             "resumed": resumed, "total": total, "t_begin": t0, "t": t0})
        step = (t_end - t0) / (len(cps) + 1)
        for i, it in enumerate(cps, 1):
            self.records.append({"kind": "checkpoint", **base, "iteration": it,
                                 "t": t0 + i * step})
        if how is not None:
            self.records.append({"kind": "end", **base, "how": how,
                                 "last": cps[-1] if cps else resumed, "t": t_end})
        return pid


def judged(book: Book, totals=None, deaths=None):
    return verdict(book.records, totals or {1: TOTAL}, deaths)


def clean() -> Book:
    """Job 1: stopped at 50, killed after checkpointing 70, finished from 70."""
    b = Book()
    b.run(1, 0.0, 0.0, [0.0, 20.0, 50.0], 1.0, "stopped")
    b.run(1, 2.0, 50.0, [50.0, 70.0], 3.0, None, pid=7)
    b.run(1, 4.0, 70.0, [70.0, 90.0, 100.0], 5.0, "finished", node="n1")
    return b


def test_a_clean_ledger_passes_with_its_totals():
    v = judged(clean(), deaths={7: 3.2})
    assert v.ok, v.problems
    assert v.totals() == {"processes": 3, "jobs": 1, "runs": 3, "max_runs_per_job": 3,
                          "jobs_with_several_runs": 1, "runs_per_job": {3: 1}, "overlaps": 0,
                          "gaps": 0, "double_counts": 0, "finishes": 1, "killed": 1, "unbounded": 0,
                          "problems": 0}


def test_an_overlap_in_time_is_flagged():
    b = Book()
    b.run(1, 0.0, 0.0, [0.0, 50.0], 2.5, "stopped")
    b.run(1, 2.0, 50.0, [50.0, 100.0], 3.0, "finished", node="n1")  # starts before 2.5
    v = judged(b)
    assert v.overlaps == 1 and not v.ok
    assert "runs overlap in time" in "\n".join(v.problems)


def test_a_killed_process_is_bounded_by_its_observed_death_only():
    b = Book()
    b.run(1, 0.0, 0.0, [0.0, 50.0], 1.0, None, pid=7)  # last record at ~0.67
    b.run(1, 2.0, 50.0, [50.0, 100.0], 3.0, "finished")
    assert judged(b, deaths={7: 1.5}).ok
    late = judged(b, deaths={7: 2.5})  # it was still alive when the next run started
    assert late.overlaps == 1 and not late.ok
    blind = judged(b)  # nobody saw it die: no sound upper bound
    assert blind.unbounded == 1 and not blind.ok
    assert "no upper bound" in "\n".join(blind.problems)
    reused = judged(b, deaths={7: -1.0})  # an earlier process with the same pid died
    assert reused.unbounded == 1


def test_a_trainer_its_launcher_reaped_is_bounded_by_the_reap():
    """The agent SIGKILLs a trainer that outlives its stop timeout and records the reap:
    that bounds the run (found in a full-suite e2e run: a trainer hung 10 s on SIGTERM, was
    SIGKILLed and reaped, and the verdict called its run unbounded)."""
    b = Book()
    b.run(1, 0.0, 0.0, [0.0, 50.0], 1.0, None, pid=7)
    b.run(1, 2.0, 50.0, [50.0, 100.0], 3.0, "finished")
    reap = {"kind": "reaped", "job": 1, "node": "n0", "pid": 7}
    assert not judged(b).ok
    b.records.append({**reap, "t": 1.5})
    assert judged(b).ok
    b.records[-1] = {**reap, "t": 2.5}  # reaped after the next run began: they overlapped
    assert judged(b).overlaps == 1
    b.records[-1] = {**reap, "t": -1.0}  # a reap of an earlier process with the same pid
    assert judged(b).unbounded == 1
    assert judged(b, deaths={7: 1.5}).ok  # a later observation still counts


def test_a_gap_is_flagged():
    b = Book()
    b.run(1, 0.0, 0.0, [0.0, 50.0], 1.0, "stopped")
    b.run(1, 2.0, 60.0, [60.0, 100.0], 3.0, "finished")
    v = judged(b)
    assert v.gaps == 1 and v.double_counts == 0 and not v.ok
    assert "gap" in "\n".join(v.problems)


def test_a_first_run_that_does_not_start_at_zero_is_a_gap():
    b = Book()
    b.run(1, 0.0, 10.0, [10.0, 100.0], 1.0, "finished")
    assert judged(b).gaps == 1


def test_a_doubled_segment_is_flagged():
    b = Book()
    b.run(1, 0.0, 0.0, [0.0, 50.0], 1.0, "stopped")
    b.run(1, 2.0, 30.0, [30.0, 100.0], 3.0, "finished")  # 30..50 counted twice
    v = judged(b)
    assert v.double_counts == 1 and v.gaps == 0 and not v.ok


def test_a_segment_doubled_further_back_is_flagged():
    b = Book()
    b.run(1, 0.0, 0.0, [0.0, 40.0], 1.0, "stopped")
    b.run(1, 2.0, 40.0, [40.0, 60.0], 3.0, "stopped")
    b.run(1, 4.0, 60.0, [60.0], 5.0, "stopped")
    b.run(1, 6.0, 60.0, [60.0, 100.0], 7.0, "finished")
    assert judged(b).ok
    starts = [r for r in b.records if r["kind"] == "start"]
    starts[2]["resumed"] = 20.0  # run 3 resumes inside run 1's segment
    v = judged(b)
    assert v.double_counts == 2 and not v.ok  # behind run 2's end, and inside run 1's


def test_a_killed_runs_last_checkpoint_may_not_have_taken_effect_but_no_earlier_one():
    for resumed, ok in ((70.0, True), (50.0, True), (20.0, False), (60.0, False)):
        b = Book()
        b.run(1, 0.0, 0.0, [0.0, 20.0, 50.0, 70.0], 1.0, None, pid=7)
        b.run(1, 2.0, resumed, [resumed, 100.0], 3.0, "finished")
        assert judged(b, deaths={7: 1.0}).ok is ok, resumed


def test_a_missing_finish_is_flagged():
    b = Book()
    b.run(1, 0.0, 0.0, [0.0, 50.0], 1.0, "stopped")
    b.run(1, 2.0, 50.0, [50.0, 80.0], 3.0, "stopped")
    v = judged(b)
    assert v.finishes == {1: 0} and not v.ok
    assert "never finished" in "\n".join(v.problems)
    b2 = Book()
    b2.run(1, 0.0, 0.0, [0.0, 80.0], 1.0, "finished")  # says finished, short of the total
    assert not judged(b2).ok


def test_a_job_that_never_ran_is_flagged():
    v = judged(clean(), totals={1: TOTAL, 2: TOTAL}, deaths={7: 3.2})
    assert v.runs[2] == 0 and "job 2: no trainer ever ran it" in v.problems


def test_a_doubled_finish_is_flagged():
    b = clean()
    b.run(1, 6.0, 100.0, [100.0], 7.0, "finished")  # relaunched after it finished
    v = judged(b, deaths={7: 3.2})
    assert v.finishes == {1: 2} and not v.ok
    assert "finished 2 times" in "\n".join(v.problems)


def test_a_run_after_the_finish_is_flagged_though_it_does_no_work():
    b = clean()
    b.run(1, 6.0, TOTAL, [TOTAL], 7.0, "stopped")  # relaunched after it finished, stopped
    v = judged(b, deaths={7: 3.2})
    assert v.finishes == {1: 1} and not v.ok
    assert "ran again after it finished" in "\n".join(v.problems)


def test_ranks_of_one_launch_are_one_run_and_two_launches_must_not_overlap():
    b = Book()
    b.run(1, 0.0, 0.0, [0.0, 50.0], 1.0, "stopped", world=2, launch="a:1")
    b.run(1, 0.1, 0.0, [], 1.1, "stopped", node="n1", rank=1, world=2, launch="a:1")
    b.run(1, 2.0, 50.0, [50.0, 100.0], 3.0, "finished", world=2, launch="a:2")
    b.run(1, 2.0, 50.0, [], 3.0, "finished", node="n1", rank=1, world=2, launch="a:2")
    v = judged(b)
    assert v.ok, v.problems
    assert v.runs == {1: 2} and v.processes == 4
    b.records[-1]["t_begin"] = b.records[-1]["t"] = 0.5  # launch 2's rank 1 started early
    assert judged(b).overlaps == 1


def test_unreadable_and_malformed_records_are_reported_not_fatal(tmp_path):
    (tmp_path / "ledger").mkdir()
    lines = [json.dumps(r) for r in clean().records]
    lines.insert(1, '{"kind": "checkpoint", "job": 1, "no')  # half a line
    lines.append(json.dumps({"kind": "end", "job": "x"}))  # fields missing
    (tmp_path / "ledger" / "n0.jsonl").write_text("\n".join(lines) + "\n")
    records, bad = read_ledgers(tmp_path)
    assert len(bad) == 1 and "n0.jsonl:2" in bad[0]
    v = judge_run_dir(tmp_path, {1: TOTAL}, deaths={7: 3.2})
    text = "\n".join(v.problems)
    assert "unreadable ledger line n0.jsonl:2" in text and "malformed ledger record" in text


# -- property: any clean history passes; any single corruption of it fails ---------------------
@st.composite
def histories(draw):
    """Clean histories of one job: runs back to back, each stopped, killed or finishing."""
    cuts = sorted(draw(st.lists(st.integers(1, 99), max_size=6, unique=True)))
    ends = [float(c) for c in cuts] + [TOTAL]
    b, deaths, t, at = Book(), {}, 0.0, 0.0
    for end in ends:
        killed = end != TOTAL and draw(st.booleans())
        how = "finished" if end == TOTAL else (None if killed else "stopped")
        cps = [at] + ([end] if end != at else [])
        if killed and draw(st.booleans()):  # its last record never took effect
            cps.append(min(TOTAL, end + 1.0))
        pid = b.run(1, t, at, cps, t + 1.0, how)
        if killed:
            deaths[pid] = t + 1.0
        t, at = t + 2.0, end
    return b, deaths


@settings(max_examples=200, deadline=None)
@given(histories(), st.data())
def test_property_clean_passes_and_any_corruption_fails(history, data):
    b, deaths = history
    assert judged(b, deaths=deaths).ok, judged(b, deaths=deaths).problems
    starts = [r for r in b.records if r["kind"] == "start"]
    ends = [r for r in b.records if r["kind"] == "end"]
    what = data.draw(st.sampled_from(["shift_resume", "overlap", "drop_finish", "refinish",
                                      "rerun"]))
    if what == "shift_resume":
        rec = data.draw(st.sampled_from(starts))
        # off the integer grid: never the other point a killed run's resume may take
        rec["resumed"] += data.draw(st.sampled_from([-0.5, 0.5]))
    elif what == "overlap" and len(starts) > 1:
        rec = data.draw(st.sampled_from(starts[1:]))
        rec["t_begin"] = rec["t"] = rec["t"] - 1.5  # into the previous run's interval
    elif what == "drop_finish":
        b.records.remove(ends[-1])
        deaths[ends[-1]["pid"]] = ends[-1]["t"]  # seen dying: bounded, yet not finished
    elif what == "refinish":
        b.run(1, 1e6, TOTAL, [TOTAL], 1e6 + 1, "finished")
    else:  # launched again after it finished, and stopped there
        b.run(1, 1e6, TOTAL, [TOTAL], 1e6 + 1, "stopped")
    assert not judged(b, deaths=deaths).ok, (what, [
        (r["kind"], r["pid"], r.get("resumed", r.get("iteration", r.get("how"))))
        for r in b.records])


# -- real trainers write it ------------------------------------------------------------------
def test_a_process_ledger_is_appended_one_fsynced_line_per_record(tmp_path):
    book = Ledger(tmp_path / "ledger" / "n0.jsonl", job_id=3, node="n0")
    book.start(5.0, 10.0)
    book.checkpoint(7.5)
    book.end("stopped")
    book.end("crashed")  # only the first end counts
    records, bad = read_ledgers(tmp_path)
    assert not bad and [r["kind"] for r in records] == ["start", "checkpoint", "end"]
    assert records[-1]["how"] == "stopped" and records[-1]["last"] == 7.5
    assert {r["pid"] for r in records} == {os.getpid()}
    assert len({r["incarnation"] for r in records}) == 1
    assert records[0]["t_begin"] <= records[0]["t"] <= time.time()


def test_stopped_killed_and_finished_trainers_leave_a_passing_ledger(tmp_path):
    """Three launches of one job: SIGTERM (stopped), SIGKILL (death observed), finish."""
    run_dir, ck = tmp_path / "run", tmp_path / "ck"
    extra = ("--run-dir", str(run_dir))
    total = 400.0

    def cmd():
        return trainer_cmd(ck, job_id=4, total=total, tt=10.0, scale=400.0, extra=extra)

    def progressed(past: float):
        return lambda: (checkpoint.iterations(ck, 4) > past)

    first = start(cmd())
    wait_for(progressed(20.0), "the first run's progress")
    first.send_signal(signal.SIGTERM)
    assert finish(first) == EXIT_STOPPED
    second = start(cmd())
    wait_for(progressed(60.0), "the second run's progress")
    second.kill()
    second.wait()
    died = time.time()
    third = start(cmd())
    assert finish(third) == EXIT_FINISHED
    records, bad = read_ledgers(run_dir)
    assert not bad
    assert [r["how"] for r in records if r["kind"] == "end"] == ["stopped", "finished"]
    v = verdict(records, {4: total}, deaths={second.pid: died})
    assert v.ok, v.problems
    assert v.runs == {4: 3} and v.finishes == {4: 1} and v.killed == 1
    assert not verdict(records, {4: total}).ok  # without the observed death: unbounded


def test_a_crashing_trainer_ends_its_ledger_as_crashed(tmp_path):
    run_dir = tmp_path / "run"
    proc = start(trainer_cmd(tmp_path / "ck", job_id=5, total=10, tt=-1.0,
                             extra=("--run-dir", str(run_dir))))
    assert finish(proc) == 1
    records, _ = read_ledgers(run_dir)
    assert [(r["kind"], r.get("how")) for r in records] == [("end", "crashed")]


def test_torch_trainers_one_and_two_ranks_leave_a_passing_ledger(tmp_path):
    """The torch path keeps the same ledger: a stopped and resumed single-rank job, then a
    2-rank launch whose two processes are one run (rank 0 alone records checkpoints)."""
    import pytest

    pytest.importorskip("torch", reason="the train extra (torch) is not installed")
    from tests.trainer.test_torch_trainer import finish as torch_finish
    from tests.trainer.test_torch_trainer import start as torch_start
    from tests.trainer.test_torch_trainer import trainer_cmd as torch_cmd
    from tests.trainer.test_torch_trainer import wait_for as torch_wait
    from trainer.checkpoint import torch_state as torch_checkpoint
    from trainer.distributed import free_port

    data, ck, total = tmp_path / "data", tmp_path / "ck", 60
    run_dir = ck / "logs"  # where the torch tests' command puts --run-dir
    proc = torch_start(torch_cmd(ck, data, total, extra=("--checkpoint-every", "20")),
                       tmp_path / "a.out")
    torch_wait(lambda: torch_checkpoint.latest(ck, 1), "the first periodic checkpoint", [proc])
    proc.send_signal(signal.SIGTERM)
    assert torch_finish(proc, tmp_path / "a.out") == EXIT_STOPPED
    proc = torch_start(torch_cmd(ck, data, total), tmp_path / "b.out")
    assert torch_finish(proc, tmp_path / "b.out") == EXIT_FINISHED

    port = free_port()
    ranks = [torch_start(torch_cmd(ck, data, 10, job_id=2, extra=(
        "--rank", str(r), "--world-size", "2", "--master-port", str(port))),
        tmp_path / f"r{r}.out") for r in (0, 1)]
    assert [torch_finish(p, tmp_path / f"r{r}.out") for r, p in enumerate(ranks)] == [0, 0]

    records, bad = read_ledgers(run_dir)
    assert not bad
    v = verdict(records, {1: total, 2: 10})
    assert v.ok, v.problems
    assert v.runs == {1: 2, 2: 1} and v.processes == 4 and v.finishes == {1: 1, 2: 1}
    assert not [r for r in records if r["kind"] == "checkpoint" and r["rank"] != 0]


def test_a_ledger_that_cannot_be_written_does_not_stop_the_trainer(tmp_path, capsys):
    (tmp_path / "ledger").write_text("a file where the directory should be")
    book = Ledger(tmp_path / "ledger" / "n0.jsonl", job_id=3, node="n0")
    book.start(0.0, 10.0)
    book.end("finished")
    assert "ledger " in capsys.readouterr().err
    assert verdict([], {3: 10.0}).problems == ["job 3: no trainer ever ran it"]


def test_the_orphan_the_ledger_caught_in_the_live_test_is_flagged():
    """The records (start, last checkpoint, end) of the run where an agent was SIGKILLed in
    its trainer's first 0.1 s: the orphan on n1 trained on to the finish while the requeued
    job ran on n0 from 3475 (fixed in trainer/run.py, `launcher`). The scheduler logged one
    job_finished; the ledger shows the truth."""
    n1 = {"job": 1, "node": "n1", "pid": 14827, "incarnation": "cf48", "rank": 0}
    n0 = {"job": 1, "node": "n0", "pid": 14975, "incarnation": "cbaf", "rank": 0}
    records = [
        {"kind": "start", **n1, "resumed": 0.0, "total": 5804.0, "t_begin": 890.599,
         "t": 890.699},
        {"kind": "checkpoint", **n1, "iteration": 0.0, "t": 890.70},
        {"kind": "start", **n0, "resumed": 3475.1439387646433, "total": 5804.0,
         "t_begin": 903.632, "t": 903.7},
        {"kind": "checkpoint", **n0, "iteration": 3475.1439387646433, "t": 903.71},
        {"kind": "checkpoint", **n1, "iteration": 5804.0, "t": 912.51},
        {"kind": "end", **n1, "how": "finished", "last": 5804.0, "t": 912.520},
        {"kind": "checkpoint", **n0, "iteration": 5804.0, "t": 912.69},
        {"kind": "end", **n0, "how": "finished", "last": 5804.0, "t": 912.699},
    ]
    v = verdict(records, {1: 5804.0})
    assert v.overlaps == 1 and v.finishes == {1: 2} and v.double_counts == 1
