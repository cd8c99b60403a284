"""Interlace under a real Slurm (tests/slurm_harness.py: munged, slurmctld, two slurmd on
loopback), submitted the way an operator would, `interlace-slurm submit`.

What a Slurm user expects, each checked from outside the scheduler: the trace runs to the end
with every job finished exactly once (the trainers' own ledgers, trainer/ledger.py); each
agent is a job step of its own with a readable name (`squeue --steps`); `scancel` in the
middle checkpoints every running job and closes the journal, and a requeue resumes from the
journal and the checkpoints with nothing lost or run twice; the time limit's warning signal
does the same and requeues the job by itself.
"""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from scheduler.tools.report import read_records
from tests.slurm_harness import SlurmCluster, missing
from traces import write_trace
from traces.generate import generate
from trainer.ledger import judge_run_dir, read_ledgers

ROOT = Path(__file__).resolve().parents[2]
SCALE = 200.0  # trace seconds per wall second
NODES, GPUS = 2, 4

pytestmark = [pytest.mark.real, pytest.mark.slow,
              pytest.mark.skipif(missing() is not None, reason=missing() or "")]


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """One Slurm for the module: starting it costs about a second, tearing down a few."""
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"), nodes=NODES)
    try:
        yield cluster.start()
    finally:
        cluster.stop()


def _trace(path: Path, seed: int, n: int = 20, median: float = 800.0):
    records = generate(n, seed, max_gpus=GPUS, mean_interarrival=60, median_duration=median,
                       min_duration=400, max_duration=2400)
    write_trace(path, records)
    return records


def _submit(slurm: SlurmCluster, run_dir: Path, trace: Path, *extra: str) -> int:
    """`interlace-slurm submit`, as an operator on the login node runs it."""
    done = subprocess.run([sys.executable, "-m", "scheduler.tools.slurm", "submit",
                           "--nodes", str(NODES), "--emulate-gpus", str(GPUS),
                           "--run-dir", str(run_dir), *extra, "--", "--trace", str(trace),
                           "--time-scale", str(SCALE), "--stop-timeout", "15"],
                          cwd=ROOT, env=slurm.env(PYTHONPATH=str(ROOT)), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split()[0])


def _events(run_dir: Path, component: str, event: str) -> list[dict]:
    path = run_dir / f"{component}.log"
    return [r for r in read_records(path)[0] if r["event"] == event] if path.exists() else []


def _finished_once(run_dir: Path, records) -> None:
    """Exactly once, from the trainers' ledgers alone (trainer/ledger.py's verdict)."""
    verdict = judge_run_dir(run_dir, {r.job_id: float(r.iterations) for r in records})
    assert verdict.ok, verdict.problems
    assert verdict.finishes == {r.job_id: 1 for r in records}


def _wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.3)
    return value


def _ledger_ends(run_dir: Path, how: str) -> list[dict]:
    return [r for r in read_ledgers(run_dir)[0] if r["kind"] == "end" and r["how"] == how]


def _stopped_cleanly(run_dir: Path) -> None:
    """The orderly stop: the agents first (each stopped its trainers with a checkpoint and
    exited cleanly), then the feeder, the scheduler (journal closed), the broker last."""
    order = [r["name"] for r in _events(run_dir, "slurm-launcher", "component_stopped")]
    agents = {f"interlace-agent-n{i}" for i in range(NODES)}
    tail = order[-(NODES + 3):]
    assert set(tail[:NODES]) == agents and tail[NODES:] == ["feeder", "scheduler", "broker"]
    for i in range(NODES):
        assert _events(run_dir, f"agent-n{i}", "agent_exit"), f"agent n{i} did not exit cleanly"
    assert _events(run_dir, "scheduler", "scheduler_exit"), "the scheduler did not stop cleanly"


def _resumed_from_the_journal(run_dir: Path, finished_before: int) -> None:
    """The second start read the first one's journal: its finished jobs and the rest."""
    assert len(_events(run_dir, "scheduler", "scheduler_start")) == 2
    [recovered] = _events(run_dir, "scheduler", "recovered")
    assert recovered["finished"] >= finished_before and recovered["jobs"] >= 1


def _release_now(slurm: SlurmCluster, job: int) -> None:
    """Slurm holds a requeued job back for about two minutes; let it start in 2 s (the delay
    is Slurm's, not what is tested). Not at once: slurmd refuses a batch job started in the
    same second as the kill that revoked its credential ("Job credential revoked": FAILED)."""
    slurm.run("scontrol", "update", f"jobid={job}", "StartTime=now+2")


def test_a_trace_runs_in_an_allocation_each_job_once(slurm, tmp_path):
    records = _trace(tmp_path / "trace.csv", seed=3)
    run_dir = tmp_path / "run"
    job = _submit(slurm, run_dir, tmp_path / "trace.csv")
    slurm.wait_state(job, {"RUNNING"}, 60)
    steps = _wait(lambda: s if len(s := slurm.steps(job)) == NODES + 1 else None, 30,
                  "the batch step and one step per agent")
    names = {name: nodes for _, name, nodes in steps}
    assert names == {"batch": "sn0", "interlace-agent-n0": "sn0", "interlace-agent-n1": "sn1"}
    assert slurm.wait_state(job, {"COMPLETED", "FAILED", "CANCELLED"}, 240) == "COMPLETED"
    _finished_once(run_dir, records)
    spec = (run_dir / "spec.csv").read_text().splitlines()[1]
    assert spec == f"1,{NODES},{GPUS},{slurm.cpus},{spec.split(',')[-1]}"
    _stopped_cleanly(run_dir)


def test_scancel_checkpoints_and_a_requeue_resumes_with_nothing_lost(slurm, tmp_path):
    records = _trace(tmp_path / "trace.csv", seed=4, median=1600)
    run_dir = tmp_path / "run"
    job = _submit(slurm, run_dir, tmp_path / "trace.csv")
    slurm.wait_state(job, {"RUNNING"}, 60)
    # in the middle: some jobs finished, some running with a checkpoint behind them
    _wait(lambda: len(_ledger_ends(run_dir, "finished")) >= 4, 120, "four jobs to finish")
    slurm.run("scancel", str(job))
    assert slurm.wait_state(job, {"CANCELLED"}, 60) == "CANCELLED"
    slurm.wait_ended(job, 60)
    _stopped_cleanly(run_dir)
    stopped = _ledger_ends(run_dir, "stopped")
    assert stopped, "no running job was stopped with a checkpoint"
    assert len(_ledger_ends(run_dir, "finished")) < len(records), "cancelled too late"

    slurm.run("scontrol", "requeue", str(job))
    _release_now(slurm, job)
    assert slurm.wait_state(job, {"COMPLETED", "FAILED", "CANCELLED"}, 240) == "COMPLETED"
    assert slurm.job_field(job, "Restarts") == "1"
    starts = [r for r in read_ledgers(run_dir)[0] if r["kind"] == "start"]
    resumed = {r["job"] for r in starts if r["resumed"] > 0}
    assert {r["job"] for r in stopped if r["last"] > 0} <= resumed, "a job started over"
    _finished_once(run_dir, records)
    _resumed_from_the_journal(run_dir, finished_before=4)


def test_the_time_limit_warning_checkpoints_and_requeues_itself(slurm, tmp_path):
    records = _trace(tmp_path / "trace.csv", seed=5, n=12, median=1600)
    run_dir = tmp_path / "run"
    job = _submit(slurm, run_dir, tmp_path / "trace.csv")
    slurm.wait_state(job, {"RUNNING"}, 60)
    _wait(lambda: len(_ledger_ends(run_dir, "finished")) >= 2, 120, "two jobs to finish")
    # what `sbatch --signal=B:USR1@S` (set by interlace-slurm submit) sends S s before the limit
    slurm.run("scancel", "--batch", "--signal=USR1", str(job))
    _wait(lambda: slurm.job_field(job, "Restarts") == "1", 60, "the launcher to requeue the job")
    _stopped_cleanly(run_dir)
    assert _ledger_ends(run_dir, "stopped"), "no running job was stopped with a checkpoint"
    _release_now(slurm, job)
    assert slurm.wait_state(job, {"COMPLETED", "FAILED", "CANCELLED"}, 240) == "COMPLETED"
    _finished_once(run_dir, records)
    requeued = _events(run_dir, "slurm-launcher", "slurm_requeue")
    assert [r["rc"] for r in requeued] == [0]
    _resumed_from_the_journal(run_dir, finished_before=2)
