"""A trainer that finished just as its stop came is reported finished, not stopped.

Found by the Slurm time-limit test: the launcher stops every agent (SIGTERM) while a trainer
has just written its final checkpoint (done) and its ledger's `finished`, and is tearing its
interpreter down. Python has put the default SIGTERM action back by then, so the trainer dies
of the signal (exit -15); the agent read that as `stopped`, the scheduler queued the job
again, and after the requeue it ran a second time from its end: finished twice in the
trainers' ledger. The trainer here is a real process that dies of SIGTERM; its final
checkpoint is the one a finishing trainer writes.
"""
from __future__ import annotations

import subprocess
import sys

import structlog

from node_agent.agent import Agent
from node_agent.config import AgentConfig
from node_agent.jobs import Job
from trainer import checkpoint

TOTAL = 500.0


def _agent_with_a_finished_trainer(tmp_path, done: bool) -> tuple[Agent, Job]:
    cfg = AgentConfig(node="n0", gpus=(0,), cpus=8, mem=16, endpoints_file="unused",
                      run_dir=tmp_path, stop_timeout=10.0)
    agent = Agent(cfg, structlog.get_logger())
    checkpoint.write(cfg.checkpoint_dir, checkpoint.Checkpoint(
        job_id=7, iterations=TOTAL if done else 200.0, total=TOTAL, node="n0", done=done))
    # a process whose SIGTERM action is the default, as in a trainer's interpreter teardown
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    job = Job(job_id=7, procs=[proc], gpus=(0,), total=TOTAL)
    agent.table.jobs[7] = job
    return agent, job


def test_a_shutdown_reports_a_trainer_killed_after_its_final_checkpoint_finished(tmp_path):
    agent, job = _agent_with_a_finished_trainer(tmp_path, done=True)
    [(stopped, rc)] = agent.stop_all()
    assert rc == -15  # died of the signal, as in the race
    kind, fields = agent.shutdown_report(stopped, rc)
    assert kind == "job.finished" and fields["ok"] is True and fields["iterations"] == TOTAL


def test_a_stop_request_reports_it_finished_too(tmp_path):
    agent, job = _agent_with_a_finished_trainer(tmp_path, done=True)
    job.stopping = True
    job.procs[0].terminate()
    agent._finish_stop(job)
    [(kind, report)] = list(agent.table.outbox)
    assert kind == "job.stopped" and report["finished"] is True and report["exit_code"] == -15


def test_without_a_final_checkpoint_it_is_stopped(tmp_path):
    agent, job = _agent_with_a_finished_trainer(tmp_path, done=False)
    [(stopped, rc)] = agent.stop_all()
    kind, fields = agent.shutdown_report(stopped, rc)
    assert kind == "job.stopped" and fields["iterations"] == 200.0
