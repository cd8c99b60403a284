"""bench/bench_scale.py on a tiny cluster, and its checks that nothing was lost or started twice.

Real processes (broker, scheduler service, agent hosts running the node agent's code, client
processes) and sockets, as the benchmark runs them; the journal check is tried on a real
journal that lost and doubled ids, the double-start check on a made-up agents' record."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def bench(*args: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "bench/bench_scale.py", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


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
