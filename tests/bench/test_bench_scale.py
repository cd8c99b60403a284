"""bench/bench_scale.py on a tiny cluster, and its checks that nothing was lost, started
twice or finished other than once.

Real processes (broker, scheduler service, agent hosts running the node agent's code, client
processes) and sockets, as the benchmark runs them; the journal check is tried on a real
journal that lost and doubled ids, the double-start check on a made-up agents' record, the
finish check on ledgers written by the trainers' own writer that finish a job twice, and on
a journal and ledgers that disagree."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_bench(*args: str) -> tuple[int, dict]:
    """The benchmark's exit status and its JSON result."""
    proc = subprocess.run(
        [sys.executable, "bench/bench_scale.py", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout.strip(), proc.stderr[-3000:]
    return proc.returncode, json.loads(proc.stdout.strip().splitlines()[-1])


def bench(*args: str) -> dict:
    rc, result = run_bench(*args)
    assert rc == 0, result
    return result


def test_every_acknowledged_submission_is_journaled_once_and_counted():
    result = bench("--clients", "2", "--seconds", "2", "--agents", "2")
    journal = result["journal"]
    assert journal["acknowledged"] > 0 and result["submissions_per_s"] > 0
    assert journal["acknowledged"] == journal["journaled"] - journal["journaled_unacknowledged"]
    assert not result["lost"] and journal["acknowledged_missing"] == 0
    assert result["refused"] == 0 and result["false_deaths"] == []
    assert result["heartbeats_sent"] > 0 and result["heartbeats_unacknowledged"] == 0
    assert 0 < result["scheduler_cpu_share"] <= result["cores"]


def test_a_backlog_starts_once_the_agents_come_up():
    """60 jobs queued while no agent is up; two 8-GPU agents come: what fits starts, each
    job launched once, counted from the agents' own record."""
    result = bench("--starts", "--agents", "2", "--backlog", "60", "--clients", "2")
    assert result["backlog"] == 60 and result["journal"]["acknowledged_missing"] == 0
    assert 0 < result["jobs_started"] <= 60 and result["starts_per_s"] > 0
    assert result["launch_requests"] >= result["jobs_started"]
    assert result["jobs_started_logged"] >= result["jobs_started"]
    assert result["launched_twice_without_stop"] == 0 and not result["lost"]
    assert result["false_deaths"] == []


def test_a_second_launch_without_a_stop_between_is_a_double_start():
    sys.path.insert(0, str(ROOT / "bench"))
    from bench_scale import launched_twice

    fine = [(1.0, "job.launch", 1, "n0"), (2.0, "job.stop", 1, "n0"),
            (3.0, "job.launch", 1, "n0"), (1.5, "job.launch", 2, "n0"),
            (1.5, "job.launch", 2, "n1")]  # one job on two nodes: a launch to each
    assert launched_twice(fine) == 0
    assert launched_twice(fine + [(4.0, "job.launch", 1, "n0"),
                                  (0.5, "job.launch", 3, "n1")]) == 1


def test_the_journal_check_finds_a_lost_and_a_doubled_acknowledgement(tmp_path):
    sys.path.insert(0, str(ROOT / "bench"))
    from bench_scale import CLIENT_RANGE, journal_check
    from scheduler.live.journal import Journal
    from tests.helpers import job

    ids = [CLIENT_RANGE + 1, CLIENT_RANGE + 2, CLIENT_RANGE + 3]
    with Journal(tmp_path / "journal.db") as journal:
        for job_id in ids:
            journal.submit(job(job_id), 0.0)
    check = journal_check(tmp_path / "journal.db", [ids[0], ids[1], ids[1], CLIENT_RANGE + 9])
    assert check["acknowledged_missing"] == 1  # 9 was acknowledged, never journaled
    assert check["acknowledged_twice"] == 1
    assert check["journaled_unacknowledged"] == 1  # 3: in flight when the clients stopped


def test_a_backlog_runs_to_its_end_and_each_job_finishes_once_by_journal_log_and_ledgers():
    """--finish: 100 jobs queued, then four agents whose stand-in trainers do a job's work
    in a second of running; every job finished once by the scheduler's journal and log and
    by the trainers' ledgers, the same jobs by all three, and the ledgers judged sound
    (no overlapping runs, each resumed where the last checkpoint left it)."""
    rc, result = run_bench("--starts", "--finish", "1", "--agents", "4", "--backlog", "100",
                           "--clients", "2", "--finish-timeout", "120")
    assert rc == 0 and result["ok"] and not result["timed_out"], result
    assert result["journal"]["acknowledged"] == 100 and not result["lost"]
    assert result["finished_journal"] == result["finished_log"] == 100
    assert result["finished_ledgers"] == 100 and result["unfinished"] == 0
    assert result["finished_twice"] == {"journal": 0, "log": 0, "ledgers": 0}
    assert result["finished_journal_not_ledgers"] == result["finished_ledgers_not_journal"] \
        == result["finished_journal_or_log_only"] == result["finished_unsubmitted"] == []
    judged = result["ledger_verdict"]
    assert result["ledger_verdict_problems"] == [] and judged["problems"] == 0
    assert judged["jobs"] == judged["finishes"] == 100 and judged["runs"] >= 100
    assert judged["overlaps"] == judged["gaps"] == judged["double_counts"] == 0
    # a run per launch: the ledgers saw every launch the agents answered
    assert result["launch_requests"] >= judged["runs"] >= result["jobs_started"] == 100
    assert result["finished_once"] and result["launched_twice_without_stop"] == 0


def _finish_check_case(tmp_path, finish_twice: bool):
    """Jobs 1..3 submitted and journaled finished, each run to its end by a trainer whose
    records are the ledger's own writer's (trainer.ledger.Ledger), on nodes n0 and n1;
    with `finish_twice`, job 2 runs again from the start on n1 after finishing on n0, and
    job 99, never submitted, finishes on n1."""
    sys.path.insert(0, str(ROOT / "bench"))
    from bench_scale import finish_check
    from scheduler.live.journal import Journal
    from tests.helpers import job
    from trainer.ledger import Ledger, ledger_path

    totals = {1: 100.0, 2: 200.0, 3: 300.0}
    with Journal(tmp_path / "journal.db") as journal:
        for job_id in totals:
            journal.submit(job(job_id, iterations=int(totals[job_id])), 0.0)
            journal.mark_finished(job_id, 1.0, totals[job_id], "n0")

    def run(job_id: int, node: str, total: float) -> None:
        book = Ledger(ledger_path(tmp_path / "agents" / node, node), job_id, node)
        book.start(0.0, total)
        book.checkpoint(total)
        book.end("finished")

    for job_id, total in totals.items():
        run(job_id, "n0", total)
    if finish_twice:
        run(2, "n1", totals[2])
        run(99, "n1", 50.0)
    return finish_check(tmp_path / "agents", tmp_path / "journal.db", list(totals),
                        list(totals), totals)


def test_the_finish_check_passes_jobs_each_finished_once_everywhere(tmp_path):
    check = _finish_check_case(tmp_path, finish_twice=False)
    assert check["finished_once"] and check["ledger_verdict_problems"] == []
    assert check["finished_journal"] == check["finished_log"] == check["finished_ledgers"] == 3


def test_the_finish_check_finds_a_job_finished_twice_and_one_never_submitted(tmp_path):
    check = _finish_check_case(tmp_path, finish_twice=True)
    assert not check["finished_once"]
    assert check["finished_twice"] == {"journal": 0, "log": 0, "ledgers": 1}
    assert check["finished_unsubmitted"] == [99]
    assert check["finished_ledgers_not_journal"] == [99]
    problems = check["ledger_verdict_problems"]
    assert any(p.startswith("job 2: finished 2 times") for p in problems), problems
    assert any(p.startswith("job 2: double count") for p in problems), problems
    assert "job 99 ran but is not one of the run's jobs" in problems


def test_the_finish_check_finds_the_journal_and_the_ledgers_disagreeing(tmp_path):
    """A job the journal says finished whose trainer never wrote so: the ledgers' word is
    the evidence, and the journal's alone is not enough."""
    sys.path.insert(0, str(ROOT / "bench"))
    from bench_scale import finish_check
    from scheduler.live.journal import Journal
    from tests.helpers import job

    with Journal(tmp_path / "journal.db") as journal:
        journal.submit(job(5, iterations=10), 0.0)
        journal.mark_finished(5, 1.0, 10.0, "n0")
    (tmp_path / "agents" / "n0").mkdir(parents=True)
    check = finish_check(tmp_path / "agents", tmp_path / "journal.db", [5], [5], {5: 10.0})
    assert not check["finished_once"]
    assert check["finished_journal_not_ledgers"] == [5] and check["unfinished"] == 1
    assert check["ledger_verdict_problems"] == ["job 5: no trainer ever ran it"]


def test_the_backlog_is_in_once_a_round_planned_after_the_last_submission_is_applied():
    sys.path.insert(0, str(ROOT / "bench"))
    from bench_scale import round_applied_after_submissions

    def log(*events: str) -> list[dict]:
        return [{"event": e} for e in events]

    assert not round_applied_after_submissions(log("round", "round_done"))
    # the round_done of a round planned before the last submission took it not
    assert not round_applied_after_submissions(
        log("job_submitted", "round", "job_submitted", "round_done"))
    assert not round_applied_after_submissions(log("job_submitted", "round"))
    assert round_applied_after_submissions(
        log("job_submitted", "round", "job_submitted", "round_done", "round", "round_done"))


def test_a_finishing_stand_in_resumes_from_its_checkpoint_as_its_ledger_requires(tmp_path):
    """The stand-in trainer (bench/agent_host.py --finish-after): stopped, it checkpoints
    where it stands; relaunched on its node with a stale start it goes on from its own
    checkpoint, on another node from the launch's start; the ledgers, judged alone, show
    one job run three times and finished once. Relaunched once finished, it ends at once,
    finished, as the trainer does: a second finish the verdict reports."""
    sys.path.insert(0, str(ROOT / "bench"))
    from agent_host import FinishingTrainer
    from broker.testing import wait_until
    from node_agent.config import AgentConfig
    from trainer import checkpoint
    from trainer.exits import EXIT_FINISHED, EXIT_STOPPED
    from trainer.ledger import read_ledgers, verdict

    def cfg(node: str) -> AgentConfig:
        return AgentConfig(node=node, gpus=(0,), cpus=2, mem=8.0, endpoints_file="unused",
                           run_dir=tmp_path / node)

    def judged():
        records = [r for node in ("n0", "n1") for r in read_ledgers(tmp_path / node)[0]]
        return verdict(records, {7: 1000.0})

    first = FinishingTrainer(cfg("n0"), 7, 1000, 0.0, finish_after=60.0)
    assert first.poll() is None
    wait_until(lambda: first.position() > 0, 10)
    first.terminate()
    assert first.wait() == first.poll() == EXIT_STOPPED
    stopped = checkpoint.read(cfg("n0").checkpoint_dir, 7)
    assert 0 < stopped.iterations < 1000 and not stopped.done
    again = FinishingTrainer(cfg("n0"), 7, 1000, 0.0, finish_after=60.0)  # a stale start
    assert again.resumed == stopped.iterations
    again.terminate()
    moved = checkpoint.read(cfg("n0").checkpoint_dir, 7).iterations
    assert moved >= stopped.iterations
    last = FinishingTrainer(cfg("n1"), 7, 1000, moved, finish_after=0.2)  # the launch's start
    assert last.resumed == moved
    wait_until(lambda: last.poll() is not None, 10)
    assert last.wait() == EXIT_FINISHED
    assert checkpoint.read(cfg("n1").checkpoint_dir, 7).done
    v = judged()
    assert v.ok, v.problems
    assert v.runs == {7: 3} and v.finishes == {7: 1}
    rerun = FinishingTrainer(cfg("n1"), 7, 1000, moved, finish_after=0.2)
    assert rerun.poll() == EXIT_FINISHED
    assert any(p.startswith("job 7: finished 2 times") for p in judged().problems)
