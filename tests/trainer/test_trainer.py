"""The emulated trainer as a real process: completion, stop/resume, rate, orphaning, exit codes."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from trainer import checkpoint
from trainer.exits import EXIT_FINISHED, EXIT_STOPPED
from workloads.emulated import EmulatedRun, EmulatedSpec

ROOT = Path(__file__).resolve().parents[2]
DEADLINE_S = 15.0  # generous: a loaded 2-core machine can stall a process for seconds


def trainer_cmd(ckdir: Path, job_id: int = 1, total: float = 50, tt: float = 10.0,
                scale: float = 1000.0, report: float = 0.05, extra: tuple = ()) -> list[str]:
    return [sys.executable, "-m", "trainer.run", "--job-id", str(job_id), "--node", "n0",
            "--checkpoint-dir", str(ckdir), "--iterations", str(total), "--iteration-time",
            str(tt), "--stages", "2,5,3", "--time-scale", str(scale), "--report-every",
            str(report), *extra]


def start(cmd: list[str]) -> subprocess.Popen:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)


def wait_for(pred, what: str, deadline: float = DEADLINE_S, every: float = 0.01):
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        value = pred()
        if value:
            return value
        time.sleep(every)  # polling interval of a deadline wait, not synchronisation
    raise AssertionError(f"timed out after {deadline}s waiting for {what}")


def finish(proc: subprocess.Popen) -> int:
    try:
        rc = proc.wait(DEADLINE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    finally:
        if proc.stderr:
            proc.stderr.close()
    return rc


# -- the pure model ---------------------------------------------------------------------------
def test_emulated_run_is_a_function_of_elapsed_time():
    spec = EmulatedSpec(total=100, iteration_time=10.0, stages=(2, 5, 3), time_scale=1000.0)
    run = EmulatedRun(spec, start=40, t0=5.0)
    assert spec.wall_per_iteration == pytest.approx(0.01)
    assert run.iterations(5.0) == 40 and run.iterations(4.0) == 40  # clocks never run backwards
    assert run.iterations(5.25) == pytest.approx(65)
    assert run.wall_left(5.25) == pytest.approx(0.35)
    assert run.iterations(99.0) == 100 and run.finished(5.6) and run.wall_left(6.0) == 0
    assert spec.stage_map() == {"data": 2.0, "gpu": 5.0, "net": 3.0}
    assert EmulatedRun(spec, start=500, t0=0).iterations(0) == 100  # clamped to the total


@pytest.mark.parametrize("kw", [dict(total=0), dict(iteration_time=0), dict(time_scale=-1),
                                dict(stages=(1, 2)), dict(stages=(1, -2, 3))])
def test_emulated_spec_rejects_nonsense(kw):
    base = dict(total=10, iteration_time=1.0, stages=(1, 1, 1), time_scale=1.0)
    with pytest.raises(ValueError):
        EmulatedSpec(**{**base, **kw})


# -- the process --------------------------------------------------------------------------------
def test_runs_to_completion_with_exact_final_checkpoint(tmp_path):
    proc = start(trainer_cmd(tmp_path, job_id=4, total=30))  # 30 x 10 ms wall
    assert finish(proc) == EXIT_FINISHED
    ckpt = checkpoint.read(tmp_path, 4)
    assert ckpt is not None and ckpt.done and ckpt.iterations == 30 and ckpt.total == 30
    assert ckpt.node == "n0" and ckpt.job_id == 4
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp files left


def test_sigterm_checkpoints_and_relaunch_resumes(tmp_path):
    total = 150  # 1.5 s of wall time per uninterrupted run
    proc = start(trainer_cmd(tmp_path, job_id=9, total=total))
    wait_for(lambda: checkpoint.iterations(tmp_path, 9) >= 10, "some progress")
    proc.send_signal(signal.SIGTERM)
    assert finish(proc) == EXIT_STOPPED
    first = checkpoint.read(tmp_path, 9)
    assert first is not None and not first.done and 10 <= first.iterations < total

    proc = start(trainer_cmd(tmp_path, job_id=9, total=total))
    seen = [first.iterations]
    while proc.poll() is None:
        seen.append(checkpoint.iterations(tmp_path, 9))
        time.sleep(0.01)
    assert finish(proc) == EXIT_FINISHED
    final = checkpoint.read(tmp_path, 9)
    assert final.done and final.iterations == total
    seen.append(final.iterations)
    assert all(a <= b for a, b in zip(seen, seen[1:])), "iteration count went backwards"


def test_start_iteration_from_scheduler_wins_when_ahead(tmp_path):
    checkpoint.write(tmp_path, checkpoint.Checkpoint(job_id=2, iterations=5, total=40))
    # 0.5 wall-s per iteration: from 39.5 it ends at once; from the checkpoint's 5 it would
    # need 17 s and miss the deadline
    proc = start(trainer_cmd(tmp_path, job_id=2, total=40, scale=20.0,
                             extra=("--start-iteration", "39.5")))
    assert finish(proc) == EXIT_FINISHED
    assert checkpoint.read(tmp_path, 2).iterations == 40


def test_already_finished_checkpoint_exits_finished_at_once(tmp_path):
    checkpoint.write(tmp_path, checkpoint.Checkpoint(job_id=3, iterations=20, total=20, done=True))
    proc = start(trainer_cmd(tmp_path, job_id=3, total=20, scale=1.0))  # would take 200 s
    assert finish(proc) == EXIT_FINISHED
    assert checkpoint.read(tmp_path, 3).iterations == 20


def test_progress_rate_matches_iteration_time_over_time_scale(tmp_path):
    # 10 trace-s per iteration at 1000x: 100 iterations per wall second. The trainer stamps each
    # checkpoint with its own clock, so a stalled test process does not skew the measurement.
    proc = start(trainer_cmd(tmp_path, job_id=5, total=10**6, report=0.05))
    try:
        a = wait_for(lambda: checkpoint.read(tmp_path, 5), "a first checkpoint")
        b = wait_for(lambda: (c := checkpoint.read(tmp_path, 5)) and c.ts - a.ts >= 1.0 and c,
                     "a checkpoint 1 s later")
    finally:
        proc.send_signal(signal.SIGTERM)
        assert finish(proc) == EXIT_STOPPED
    rate = (b.iterations - a.iterations) / (b.ts - a.ts)
    assert rate == pytest.approx(100.0, rel=0.15)


def test_bad_arguments_are_a_crash_not_a_finish(tmp_path):
    proc = start(trainer_cmd(tmp_path, job_id=6, tt=0))
    rc = finish(proc)
    assert rc not in (EXIT_FINISHED, EXIT_STOPPED)
    assert checkpoint.read(tmp_path, 6) is None


def test_orphaned_trainer_checkpoints_and_stops(tmp_path):
    # A parent that starts the trainer, waits for its first checkpoint, and dies: the trainer
    # must notice (its parent changed) and stop with a checkpoint rather than run unowned.
    log_dir = tmp_path / "logs"
    cmd = trainer_cmd(tmp_path, job_id=8, total=10**6, extra=("--run-dir", str(log_dir)))
    script = textwrap.dedent(f"""
        import subprocess, sys, time
        from trainer import checkpoint
        p = subprocess.Popen({cmd!r}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        end = time.monotonic() + {DEADLINE_S}
        while checkpoint.read({str(tmp_path)!r}, 8) is None and time.monotonic() < end:
            time.sleep(0.01)
        print(p.pid)
    """)
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=DEADLINE_S * 2)
    pid = int(out.stdout.strip())
    log = log_dir / "trainer-8.log"
    try:
        line = wait_for(lambda: log.exists() and next(
            (json.loads(x) for x in log.read_text().splitlines() if "trainer_stopped" in x), None),
            "the orphaned trainer to stop")
        assert line["orphaned"] is True
        assert checkpoint.iterations(tmp_path, 8) > 0
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_the_pace_file_is_read_once_per_change(tmp_path):
    from trainer.pace import PaceReader, write

    path = tmp_path / "7.pace"
    reader = PaceReader(path)
    assert reader.changed() is None  # no file yet
    write(path, 2.5)
    assert reader.changed() == 2.5 and reader.changed() is None
    write(path, 4.0)
    assert reader.changed() == 4.0
    path.write_text("{not json")
    assert reader.changed() is None
    path.write_text('{"iteration_time": -1}')
    assert reader.changed() is None
    assert PaceReader(None).changed() is None
    with pytest.raises(ValueError):
        write(path, 0.0)
