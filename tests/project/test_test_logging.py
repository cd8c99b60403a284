"""What components log inside the test process (requesters, services, a broker or scheduler
on a thread) goes to pytest's capture, never to the terminal: with -s their lines used to land
among pytest's progress dots (tests/conftest.py routes them)."""
from __future__ import annotations

import subprocess
import sys

import structlog

from broker.testing import REPO_ROOT

EVENT = "probe.in_process_log"


def test_an_in_process_log_line_is_captured_by_pytest(caplog):
    structlog.get_logger("broker.client").warning(EVENT, sender="test")
    assert EVENT in caplog.text


def test_in_process_log_lines_stay_off_the_terminal_even_with_s():
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-s", "-q", "-p", "no:cacheprovider",
         f"{__file__}::test_an_in_process_log_line_is_captured_by_pytest"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert EVENT not in proc.stdout + proc.stderr
