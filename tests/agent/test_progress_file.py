"""A plain script's progress file (node_agent/progress_file.py): what the agent takes from it
as the job's iterations, and what it never trusts."""
from __future__ import annotations

import dataclasses
import math
import subprocess
from pathlib import Path

import pytest

from node_agent import progress_file
from node_agent.config import AgentConfig
from node_agent.jobs import Job, JobTable
from trainer import checkpoint


@pytest.mark.parametrize("text, value", [
    ("", None), ("\n \n", None),          # nothing written yet
    ("12\n", 12.0), ("12", 12.0),         # a newline or none
    ("3\n7\n 11 \n\n", 11.0),             # the last line wins
    ("0\n", 0.0), ("100\n", 100.0), ("42.5\n", 42.5),
])
def test_the_last_line_is_the_count(text, value):
    assert progress_file.parse(text, 100) == (value, None)


@pytest.mark.parametrize("text, problem", [
    ("epoch 3\n", "not a number"), ("12\nabc\n", "not a number"),
    ("nan\n", "not a finite number"), ("inf\n", "not a finite number"),
    ("-1\n", "negative"), ("101\n", "beyond the job's 100 iterations"),
])
def test_bad_content_is_not_trusted(text, problem):
    value, said = progress_file.parse(text, 100)
    assert value is None and said.startswith(problem)


def test_a_missing_file_says_nothing(tmp_path):
    assert progress_file.read(tmp_path / "none", 100) == (None, None)
    (tmp_path / "p").write_text("x" * 10_000 + "\n57\n")  # only its end is read
    assert progress_file.read(tmp_path / "p", 100) == (57.0, None)


class Log:
    def __init__(self):
        self.records = []

    def warning(self, event, **fields):
        self.records.append((event, fields))


def _table(tmp_path) -> tuple[JobTable, Log]:
    log = Log()
    cfg = AgentConfig(node="n0", gpus=(0,), cpus=1, mem=1.0, endpoints_file="/e.json",
                      run_dir=tmp_path)
    return JobTable(cfg, log), log


def _job(path: Path | None, start: float = 0.0) -> Job:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return Job(job_id=5, procs=[proc], gpus=(0,), total=100.0, start=start,
               progress_file=path)


def test_the_agent_takes_the_file_where_it_is_ahead_and_logs_bad_content_once(tmp_path):
    table, log = _table(tmp_path)
    path = tmp_path / "progress"
    job = _job(path, start=10.0)
    assert table.iterations(job) == 10.0  # no file: where the launch started it
    path.write_text("30\n")
    assert table.iterations(job) == 30.0
    checkpoint.write(table.cfg.checkpoint_dir, checkpoint.Checkpoint(5, 45.0, 100.0))
    assert table.iterations(job) == 45.0  # the API's checkpoint is ahead
    path.write_text("60\n")
    assert table.iterations(job) == 60.0
    path.write_text("60\nnan\n")
    assert table.iterations(job) == 45.0 and table.iterations(job) == 45.0
    assert [e for e, _ in log.records] == ["progress_file_ignored"]  # once, not per look
    assert log.records[0][1]["problem"].startswith("not a finite number")
    path.write_text("1e9\n")
    assert table.iterations(job) == 45.0 and len(log.records) == 2
    assert not math.isnan(table.iterations(_job(None, start=3.0)))
    assert table.iterations(_job(None, start=3.0)) == 45.0  # no file for a packaged job


def test_the_file_a_command_was_submitted_with_is_read_in_its_working_directory(tmp_path):
    """`interlace-submit --progress-file PATH`: relative to where the command runs (its own
    directory with --own-workdir), an absolute one as it is; without it, the job's own file
    (INTERLACE_PROGRESS_FILE). Whatever the agent reads, the program is told."""
    from node_agent import user_command
    from scheduler.live.handlers import command_problem
    from traces.record import JobRecord

    cfg = AgentConfig(node="n0", gpus=(0,), cpus=1, mem=1.0, endpoints_file="/e.json",
                      run_dir=tmp_path)
    w = {"kind": "command", "iterations": 10, "argv": ["x"], "workdir": "/submitted"}
    assert user_command.progress_path(cfg, 7, dict(w, progress_file="done.txt")) == \
        Path("/submitted/done.txt")
    assert user_command.progress_path(cfg, 7, dict(w, progress_file="done.txt",
                                                    own_workdir=True)) == \
        tmp_path / "jobs" / "job-7" / "done.txt"
    assert user_command.progress_path(cfg, 7, dict(w, progress_file="/abs/p")) == Path("/abs/p")
    default = user_command.progress_path(cfg, 7, w)
    assert default == progress_file.path_for(user_command.job_dir(cfg.checkpoint_dir, 7))
    env = user_command.environment(cfg, 7, (0,), 10.0, 0.0, 0, 1, 0, {}, None,
                                   progress="/abs/p")
    assert env["INTERLACE_PROGRESS_FILE"] == "/abs/p"
    base = JobRecord(job_id=1, num_gpu=1, submit_time=0.0, iterations=10, model_name="m",
                     batch_size=1, duration=1.0, interval=0.0, iteration_time=0.1,
                     stage_times=(0.1, 0.0, 0.0))
    assert command_problem(dataclasses.replace(base, progress_file="p")) == \
        "progress_file needs a command"
    assert "at most 4096" in command_problem(dataclasses.replace(
        base, command=("x",), progress_file="p" * 5000))
    with pytest.raises(Exception, match="progress_file"):
        user_command.check(dict(w, workdir="", progress_file="p" * 5000))
