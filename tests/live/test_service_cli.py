"""`python -m scheduler.live` as a process, on a journal it cannot use: one line naming
the file and exit status 1, never a traceback (the broker is up, so nothing else stops it)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from broker.testing import REPO_ROOT, broker_process


@pytest.mark.parametrize("kind", ["unwritable", "not_sqlite"])
def test_an_unusable_journal_is_one_line_naming_it(tmp_path, kind):
    if kind == "unwritable":  # under a regular file: no directory can hold it, even for root
        (tmp_path / "file").write_text("")
        journal = tmp_path / "file" / "journal.db"
    else:
        journal = tmp_path / "journal.db"
        journal.write_bytes(b"this is no SQLite database\n" * 200)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p))
    with broker_process(tmp_path / "broker"):
        proc = subprocess.run(
            [sys.executable, "-m", "scheduler.live", "--spec", "n2g8",
             "--endpoints", str(tmp_path / "broker" / "endpoints.json"),
             "--run-dir", str(tmp_path / "run"), "--journal", str(journal),
             "--wait-endpoints", "5"],
            cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert proc.stderr.splitlines() == [proc.stderr.strip()]
    assert proc.stderr.startswith(f"scheduler: {journal}: cannot use the journal (")


SCHEDULER = ["--spec", "n2g8", "--endpoints", "e.json", "--run-dir", "run"]
AGENT = ["--node", "n0", "--gpus", "0", "--endpoints", "e.json", "--run-dir", "run"]


@pytest.mark.parametrize("module, argv, option", [
    ("scheduler", ["--time-scale", "inf"], "--time-scale"),
    ("scheduler", ["--time-scale", "0"], "--time-scale"),
    ("scheduler", ["--round", "nan"], "--round"),
    ("scheduler", ["--agent-timeout", "1e308"], "--agent-timeout"),
    ("agent", ["--time-scale", "1e400"], "--time-scale"),
    ("agent", ["--heartbeat", "-1"], "--heartbeat"),
    ("agent", ["--stop-timeout", "inf"], "--stop-timeout"),
    ("agent", ["--cpus", "99999999999"], "--cpus"),
    ("agent", ["--mem", "nan"], "--mem"),
])
def test_the_scheduler_and_agent_refuse_unbounded_numbers_naming_the_option(
        module, argv, option, capsys):
    """A time scale of inf or a heartbeat of nan would run a cluster whose clock never moves:
    refused at the command line with the option and its range (specs/limits.py)."""
    from node_agent import cli as agent_cli
    from scheduler.live import cli as scheduler_cli
    parse = scheduler_cli.parse_args if module == "scheduler" else agent_cli.parse_args
    with pytest.raises(SystemExit) as exit_:
        parse((SCHEDULER if module == "scheduler" else AGENT) + argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"argument {option}: must be" in err and "Traceback" not in err
