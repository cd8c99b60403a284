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
