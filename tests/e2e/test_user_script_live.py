"""A user's own PyTorch script as a job on a real live cluster (broker, scheduler, one agent
as processes on loopback), submitted, watched and cancelled with the interlace-submit,
interlace-status and interlace-cancel commands.

examples/user-script/train.py trains, checkpoints, is preempted by a shorter job (SRSF),
resumes from its checkpoint (each progress line is printed once: nothing was trained twice)
and finishes; its stage times reach the planner (profile_updated). Queued jobs show their
position and expected start; a queued and a running job are cancelled (journaled, the running
one's trainer stopped by its agent); an unknown job is refused with a clear message.
"""
from __future__ import annotations

import json
import sqlite3
import sys

import pytest

from scheduler.tools.jobs import cancel_main, status_main, submit_main
from tests.live_system import ROOT, LiveCluster, log_records, wait_for, write_spec
from trainer import checkpoint

pytest.importorskip("torch")
pytest.importorskip("sklearn")

USER_ITERATIONS = 4000  # ~10-30 s of the digits MLP on one core
SCRIPT = "examples/user-script/train.py"


def _job(status: dict, job_id: int) -> dict:
    return next(j for j in status["jobs"] if j["job_id"] == job_id)


def _status_json(capsys, endpoints: str) -> dict:
    capsys.readouterr()
    assert status_main(["--endpoints", endpoints, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_user_script_trains_is_preempted_resumes_and_finishes(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)  # the command's relative path is resolved where it was submitted
    cluster = LiveCluster(tmp_path / "run", spec=str(write_spec(tmp_path / "spec.csv", 1, 1)),
                          nodes=1, gpus_per_node=1, policy="srsf", time_scale=100.0)
    try:
        cluster.start()
        ep = str(cluster.endpoints_file)
        ckpts = cluster.run_dir / "checkpoints"
        # 1: the user's script, long enough for SRSF to put shorter jobs first
        assert submit_main(["--endpoints", ep, "--gpus", "1", "--iterations",
                            str(USER_ITERATIONS), "--job-id", "1", "--", sys.executable, SCRIPT,
                            "--checkpoint-every", "50"]) == 0
        assert "submitted job 1" in capsys.readouterr().out
        wait_for(lambda: checkpoint.iterations(ckpts, 1) >= 300, 90,
                 "the user's script to train and checkpoint past iteration 300")
        # 2 (~80 trace s) preempts it; 3 (~100) waits ahead of it: far shorter than what is
        # left of 1 by its measured pace (>= 3000 iterations, ~0.07-0.2 trace s each), too
        assert submit_main(["--endpoints", ep, "--gpus", "1", "--model", "resnet18",
                            "--iterations", "40", "--job-id", "2"]) == 0
        assert submit_main(["--endpoints", ep, "--gpus", "1", "--model", "resnet18",
                            "--iterations", "50", "--job-id", "3"]) == 0
        wait_for(lambda: _job(cluster.status(), 2)["state"] == "running", 30, "job 2 to run")
        status = _status_json(capsys, ep)
        one, three = _job(status, 1), _job(status, 3)
        assert (one["state"], three["state"]) == ("pending", "pending")
        assert one["preemptions"] >= 1
        assert (three["position"], one["position"]) == (1, 2)  # SRSF: shorter first
        assert 0 <= three["expected_start"] <= one["expected_start"]
        assert status_main(["--endpoints", ep, "3"]) == 0
        assert "position 1, expected start" in capsys.readouterr().out

        assert cancel_main(["--endpoints", ep, "3"]) == 0  # queued
        assert "cancelled job 3 (was pending)" in capsys.readouterr().out
        assert _job(cluster.status(), 3)["state"] == "cancelled"
        assert cancel_main(["--endpoints", ep, "99"]) == 1
        assert "unknown_job: job 99 was never submitted here" in capsys.readouterr().err

        wait_for(lambda: _job(cluster.status(), 1)["state"] == "finished", 120,
                 "job 2, then job 1 resumed from its checkpoint, to finish")
        assert _job(cluster.status(), 2)["state"] == "finished"
        final = checkpoint.read(ckpts, 1)
        assert final.done and final.iterations == USER_ITERATIONS
        out = (cluster.run_dir / "trainers" / "1.stderr").read_text()
        steps = [line.split()[1] for line in out.splitlines() if line.startswith("step ")]
        assert steps == [str(k) for k in range(500, USER_ITERATIONS + 1, 500)], out[-2000:]
        assert "done: accuracy" in out
        launches = [r for r in log_records(cluster.run_dir, "job_launched", "agent")
                    if r.get("job") == 1]
        assert len(launches) >= 2 and launches[-1]["start_iteration"] >= 300
        assert launches[-1]["kind"] == "command"
        profiled = [r for r in log_records(cluster.run_dir, "profile_updated")
                    if r["job_id"] == 1]
        assert profiled, "the script's stage times never reached the planner"
        assert not [r for r in log_records(cluster.run_dir, "subscriber.gap")
                    if r.get("sender") == "trainer.1"]  # none of its reports was lost
        assert 3 not in [r["job_id"] for r in log_records(cluster.run_dir, "job_started")]

        # a running job cancelled: its trainer is stopped through the agent
        assert submit_main(["--endpoints", ep, "--gpus", "1", "--iterations", "100000",
                            "--job-id", "4"]) == 0
        wait_for(lambda: _job(cluster.status(), 4)["state"] == "running", 30, "job 4 to run")
        assert cancel_main(["--endpoints", ep, "4"]) == 0
        assert "cancelled job 4 (was running)" in capsys.readouterr().out
        wait_for(lambda: [r for r in log_records(cluster.run_dir, "job_stopped", "agent")
                          if r.get("job") == 4], 30, "the agent to stop job 4's trainer")
        assert _job(cluster.status(), 4)["state"] == "cancelled"
        assert cancel_main(["--endpoints", ep, "4"]) == 1  # already over: said, not redone
        assert "already cancelled" in capsys.readouterr().err
        with sqlite3.connect(cluster.run_dir / "journal.db") as db:
            cancelled = sorted(r[0] for r in db.execute(
                "SELECT job_id FROM events WHERE kind='cancelled'"))
        assert cancelled == [3, 4]
    finally:
        cluster.stop_all()
