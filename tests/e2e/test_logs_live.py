"""A user's plain scripts on a real live cluster (broker, scheduler, one agent as processes on
loopback): their output through `interlace-logs`, their progress through the progress file,
each in a working directory of its own.

tests/e2e/scripts/epochs.py is an epoch-based script that knows nothing of trainer/api.py:
it checkpoints its own (epoch, batch) in its working directory and resumes from it. As a
two-rank job that reports no progress, status shows its progress unknown; preempted by a
shorter job under SRSF and relaunched, `interlace-logs` prints both ranks' lines of both
launches and marks the relaunch, and `-f` follows it until it is cancelled. As a one-rank job
writing $INTERLACE_PROGRESS_FILE, status shows its iterations grow while it runs; preempted,
it is stopped at the count it wrote, resumes mid-epoch from its own checkpoint, and once
cancelled status shows the iterations it did.
"""
from __future__ import annotations

import json
import sys
import threading

from scheduler.tools.jobs import cancel_main, status_main, submit_main
from scheduler.tools.logs import main as logs_main
from tests.live_system import ROOT, LiveCluster, log_records, wait_for, write_spec

SCRIPT = str(ROOT / "tests" / "e2e" / "scripts" / "epochs.py")


def _job(cluster: LiveCluster, job_id: int) -> dict:
    status = cluster.status() or {}
    return next((j for j in status.get("jobs") or [] if j["job_id"] == job_id), {})


def _launches(cluster: LiveCluster, job_id: int) -> list[dict]:
    return [r for r in log_records(cluster.run_dir, "job_launched", "agent")
            if r.get("job") == job_id]


def _text(path) -> str:
    return path.read_text() if path.exists() else ""


def _short_job(ep: str, job_id: int, gpus: int) -> None:
    """A packaged job far shorter than what is left of job 1: SRSF runs it first."""
    assert submit_main(["--endpoints", ep, "--gpus", str(gpus), "--model", "resnet18",
                        "--iterations", "20", "--job-id", str(job_id)]) == 0


def _spec(path, gpus: int) -> str:
    """One node of `gpus` GPUs and CPUs enough for a 2-GPU job (6 a GPU)."""
    path.write_text("num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\n"
                    f"1,1,{gpus},32,64\n")
    return str(path)


def test_logs_print_both_ranks_and_mark_the_relaunch(tmp_path, capsys):
    cluster = LiveCluster(tmp_path / "run", spec=_spec(tmp_path / "spec.csv", 2),
                          nodes=1, gpus_per_node=2, policy="srsf", time_scale=100.0)
    try:
        cluster.start()
        ep = str(cluster.endpoints_file)
        assert submit_main(["--endpoints", ep, "--gpus", "2", "--iterations", "400",
                            "--job-id", "1", "--own-workdir", "--", sys.executable, SCRIPT,
                            "--epochs", "10", "--batches", "40", "--sleep", "0.05",
                            "--no-progress"]) == 0
        said = capsys.readouterr().out
        workdir = cluster.run_dir / "jobs" / "job-1"
        assert f"runs in {workdir} (its own)" in said
        assert str(cluster.run_dir / "trainers" / "1.r<rank>.stderr") in said
        assert "`interlace-logs 1`" in said
        r0, r1 = (cluster.run_dir / "trainers" / f"1.r{r}.stderr" for r in (0, 1))
        wait_for(lambda: "epoch 1 done" in _text(r0) and "epoch 1 done" in _text(r1), 60,
                 "both ranks to finish an epoch")
        assert status_main(["--endpoints", ep, "1"]) == 0  # it reported no progress
        assert "?/400 it" in capsys.readouterr().out

        _short_job(ep, 2, 2)  # takes both GPUs first: job 1 is stopped
        wait_for(lambda: _job(cluster, 2).get("state") == "finished", 60, "job 2 to finish")
        wait_for(lambda: len(_launches(cluster, 1)) >= 2 and
                 _text(r0).count("resumed at epoch") and _text(r1).count("resumed at epoch"),
                 60, "job 1 to be relaunched and both ranks to resume")
        assert _job(cluster, 1)["preemptions"] >= 1

        lines: list[str] = []
        assert logs_main(["--endpoints", ep, "1"], write=lines.append) == 0
        marks = [i for i, line in enumerate(lines) if line.startswith("--- launch ")]
        assert len(marks) == 2, lines
        assert lines[marks[0]].startswith("--- launch 1 (from the start) on n0 at ")
        assert lines[marks[1]].startswith("--- launch 2 (") and " on n0 at " in lines[marks[1]]
        first, second = lines[marks[0] + 1:marks[1]], lines[marks[1] + 1:]
        for rank in (0, 1):
            assert f"[r{rank}] rank {rank}: starting" in first
            assert f"[r{rank}] rank {rank}: epoch 1 done" in first
            assert any(line.startswith(f"[r{rank}] rank {rank}: resumed at epoch ")
                       for line in second), second
        assert all(line.startswith(("[r0] ", "[r1] ")) for line in first + second)

        followed: list[str] = []
        ended: list[int] = []
        follower = threading.Thread(target=lambda: ended.append(
            logs_main(["--endpoints", ep, "1", "-f"], write=followed.append)), daemon=True)
        follower.start()
        wait_for(lambda: len(followed) >= len(lines), 30, "-f to print what there was")
        assert followed[:len(lines)] == lines
        assert follower.is_alive()  # the job runs on: -f waits for it
        assert cancel_main(["--endpoints", ep, "1"]) == 0
        follower.join(30)
        assert ended == [0], "-f did not end with the job"
        assert logs_main(["--endpoints", ep, "9"]) == 1
        assert "no output of job 9" in capsys.readouterr().err
    finally:
        cluster.stop_all()


def test_a_plain_epoch_script_reports_progress_resumes_mid_epoch_and_is_cancelled(
        tmp_path, capsys):
    cluster = LiveCluster(tmp_path / "run", spec=str(write_spec(tmp_path / "spec.csv", 1, 1)),
                          nodes=1, gpus_per_node=1, policy="srsf", time_scale=100.0)
    try:
        cluster.start()
        ep = str(cluster.endpoints_file)
        # 12 epochs of 25 batches: one iteration is one batch
        assert submit_main(["--endpoints", ep, "--gpus", "1", "--iterations", "300",
                            "--job-id", "1", "--own-workdir", "--progress-file", "done.txt",
                            "--", sys.executable, SCRIPT, "--epochs", "12", "--batches", "25",
                            "--sleep", "0.1", "--progress", "done.txt"]) == 0
        workdir = cluster.run_dir / "jobs" / "job-1"
        progress = workdir / "done.txt"  # --progress-file: in its working directory
        seen: list[float] = []

        def grown() -> bool:
            capsys.readouterr()
            assert status_main(["--endpoints", ep, "1", "--json"]) == 0
            one = json.loads(capsys.readouterr().out)
            if one["state"] != "running":  # still being launched
                return False
            seen.append(one["iterations_done"])
            return one["progress_known"] and one["iterations_done"] >= 40

        wait_for(grown, 60, "status to show job 1's iterations grow")
        assert len(set(seen)) >= 2 or seen[0] >= 40

        _short_job(ep, 2, 1)
        wait_for(lambda: _job(cluster, 2).get("state") == "running", 30, "job 2 to run")
        stopped = wait_for(lambda: [r for r in log_records(cluster.run_dir, "job_stopped",
                                                           "agent") if r.get("job") == 1],
                           30, "the agent to stop job 1")
        written = float(progress.read_text().split()[-1])  # what the script wrote last
        assert stopped[-1]["iterations"] == written >= 40  # the stop reports the file's count

        wait_for(lambda: "resumed at epoch" in _text(cluster.run_dir / "trainers" / "1.stderr"),
                 60, "job 1 to resume from its own checkpoint")
        out = _text(cluster.run_dir / "trainers" / "1.stderr")
        resumed = next(line for line in out.splitlines() if "resumed at epoch" in line)
        at = int(resumed.rsplit("iteration ", 1)[1].rstrip(")"))
        # where it stopped (one batch on, were it killed between its save and its count)
        assert written <= at <= written + 1
        relaunch = _launches(cluster, 1)[-1]
        assert relaunch["start_iteration"] == written and relaunch["kind"] == "command"
        assert (workdir / "state.json").exists()  # its own directory, not the submit one

        wait_for(lambda: _job(cluster, 1).get("iterations_done", 0) >= at + 10, 60,
                 "job 1 to go on from there")
        assert cancel_main(["--endpoints", ep, "1"]) == 0
        wait_for(lambda: _job(cluster, 1).get("state") == "cancelled", 30, "job 1 cancelled")
        # the count the scheduler had from the file at the cancel (a heartbeat behind it at
        # most: the trainer's last batches before its SIGTERM are not counted)
        final = float(progress.read_text().split()[-1])
        cancelled = [r for r in log_records(cluster.run_dir, "job_cancelled")
                     if r["job_id"] == 1][-1]["iterations"]
        assert at + 10 <= cancelled <= final < 300
        assert _job(cluster, 1)["iterations_done"] == cancelled
        capsys.readouterr()
        assert status_main(["--endpoints", ep, "1"]) == 0
        assert f"cancelled  1 GPU  {cancelled:.0f}/300 it" in capsys.readouterr().out
    finally:
        cluster.stop_all()
