"""Jobs whose program fails, on a real live cluster (broker, scheduler, one agent as processes on
loopback), submitted with interlace-submit and watched with interlace-status and
interlace-report.

tests/e2e/scripts/fails_at_start.py dies at start of a missing import, as a script whose
`import torch` fails does. Run for ever so, the job backs off (0.5 s, then 1 s: the stated
backoff) and is `failed` at its third failure, with the exit and its traceback's last lines
in `interlace-status --json`, and is never launched again; run to fail twice, then to train,
it finishes; a program that does not exist is refused by the agent and, with
`--max-restarts 1`, failed after two tries. No failure counts as a preemption. A cancelled
job and the failed ones are shown apart in the status counts and the report, with the
iterations they did, out of its JCT figures.
"""
from __future__ import annotations

import json
import sys

from scheduler.tools.jobs import cancel_main, status_main, submit_main
from scheduler.tools.report import main as report_main
from tests.live_system import ROOT, LiveCluster, log_records, wait_for, write_spec

SCRIPT = "tests/e2e/scripts/fails_at_start.py"
SCALE = 100.0  # trace seconds per wall second
BACKOFF, CAP = 0.5, 2.0  # wall seconds: 50 and 200 trace seconds
MISSING = "ModuleNotFoundError: No module named 'a_module_that_is_not_installed'"


def _job(cluster: LiveCluster, job_id: int) -> dict:
    status = cluster.status() or {}
    return next((j for j in status.get("jobs") or [] if j["job_id"] == job_id), {})


def _launches(cluster: LiveCluster, job_id: int) -> int:
    return sum(1 for r in log_records(cluster.run_dir, "job_launched", "agent")
               if r.get("job") == job_id)


def _submit(ep: str, job_id: int, *args: str) -> None:
    assert submit_main(["--endpoints", ep, "--gpus", "1", "--job-id", str(job_id), *args]) == 0


def test_a_program_that_fails_backs_off_then_fails_and_one_that_recovers_finishes(
        tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)  # the command's relative path is resolved where it was submitted
    cluster = LiveCluster(tmp_path / "run", spec=str(write_spec(tmp_path / "spec.csv", 1, 2)),
                          nodes=1, gpus_per_node=2, policy="fifo", time_scale=SCALE,
                          scheduler_args=["--failure-backoff", str(BACKOFF),
                                          "--failure-backoff-cap", str(CAP),
                                          "--max-failures", "3"])
    try:
        cluster.start()
        ep = str(cluster.endpoints_file)
        _submit(ep, 1, "--iterations", "100", "--", sys.executable, SCRIPT, "always")
        _submit(ep, 2, "--iterations", "100", "--", sys.executable, SCRIPT, "2")
        wait_for(lambda: _job(cluster, 1).get("state") == "failed", 60, "job 1 to fail")
        wait_for(lambda: _job(cluster, 2).get("state") == "finished", 60, "job 2 to finish")

        # job 1: three launches, each after the stated backoff, then failed with its output
        starts = [r["now"] for r in log_records(cluster.run_dir, "job_started")
                  if r["job_id"] == 1]
        backoffs = [r for r in log_records(cluster.run_dir, "job_run_failed")
                    if r["job_id"] == 1]
        assert len(starts) == 3 and len(backoffs) == 2
        for n, (failed, start) in enumerate(zip(backoffs, starts[1:])):
            assert failed["not_before"] - failed["now"] == BACKOFF * 2 ** n * SCALE
            assert start >= failed["not_before"]
        ended = log_records(cluster.run_dir, "job_failed")
        assert [(r["job_id"], r["failures"]) for r in ended] == [(1, 3)]
        capsys.readouterr()
        assert status_main(["--endpoints", ep, "1", "--json"]) == 0
        one = json.loads(capsys.readouterr().out)
        failure = one["last_failure"]
        assert (one["state"], one["preemptions"], failure["failures"]) == ("failed", 0, 3)
        assert failure["exit"] == f"exit status 1: {MISSING}"
        assert failure["output"][-1] == MISSING and failure["not_before"] is None
        assert "Traceback (most recent call last):" in failure["output"]
        assert status_main(["--endpoints", ep, "1"]) == 0
        text = capsys.readouterr().out
        assert "failed" in text and "3 failures in a row" in text and f"| {MISSING}" in text

        # job 2: failed twice, then ran to its end; two failures, no preemption
        two = _job(cluster, 2)
        assert two["preemptions"] == 0 and two["last_failure"]["failures"] == 2
        assert _launches(cluster, 2) == 3
        out = (cluster.run_dir / "trainers" / "2.stderr").read_text()
        assert out.count("Traceback") == 2 and out.rstrip().endswith("trained")

        # a program that does not exist: refused by the agent, failed at its second try
        _submit(ep, 3, "--iterations", "100", "--max-restarts", "1", "--",
                "/nonexistent/program")
        wait_for(lambda: _job(cluster, 3).get("state") == "failed", 60, "job 3 to fail")
        three = _job(cluster, 3)["last_failure"]
        assert three["failures"] == 2 and three["exit"].startswith(
            "would not start: cannot start '/nonexistent/program'")
        assert _launches(cluster, 3) == 0

        # rounds go on for longer than the longest backoff: job 1 is never launched again
        rounds = (cluster.status() or {})["rounds"]
        _submit(ep, 4, "--iterations", "300", "--iteration-time", "1.0")  # ~3 s wall
        _submit(ep, 5, "--iterations", "100000")
        wait_for(lambda: _job(cluster, 5).get("state") == "running", 30, "job 5 to run")
        wait_for(lambda: _job(cluster, 5).get("iterations_done", 0) > 0, 30,
                 "job 5 to make progress")
        assert cancel_main(["--endpoints", ep, "5"]) == 0
        wait_for(lambda: _job(cluster, 4).get("state") == "finished", 60, "job 4 to finish")
        status = cluster.status()
        assert status["rounds"] > rounds
        assert _launches(cluster, 1) == 3
        out = (cluster.run_dir / "trainers" / "1.stderr").read_text()
        assert out.count("Traceback") == 3 and out.count(MISSING) == 3
        assert status["counts"] == {"pending": 0, "running": 0, "finished": 2,
                                    "cancelled": 1, "failed": 2}
        cancelled = _job(cluster, 5)
        assert cancelled["state"] == "cancelled" and 0 < cancelled["iterations_done"] < 100000

        # the report: the two finished jobs in its figures, the others apart
        capsys.readouterr()
        assert report_main([str(cluster.run_dir), "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert (report["jobs"], report["preemptions"], report["unfinished"]) == (2, 0, 0)
        assert (report["cancelled"], report["failed"], report["failures"]) == (1, 2, 7)
        apart = {e["job_id"]: e for e in report["ended_early"]}
        assert sorted(apart) == [1, 3, 5] and apart[5]["state"] == "cancelled"
        assert apart[5]["iterations_done"] > 0 and apart[5]["iterations"] == 100000
        assert report_main([str(cluster.run_dir)]) == 0
        table = capsys.readouterr().out
        assert "cancelled: 1 job, not in the JCT figures: 5 (" in table
        assert "failed: 2 jobs, not in the JCT figures: 1 (0/100 it), 3 (0/100 it)" in table
        assert f"  job 1: exit status 1: {MISSING}" in table
        assert "  job 3: would not start: cannot start '/nonexistent/program'" in table
        assert apart[1]["exit"] == f"exit status 1: {MISSING}"
    finally:
        cluster.stop_all()
