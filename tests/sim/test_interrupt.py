"""Ctrl-C of `interlace-sim`, by a real SIGINT to a real process once it has finished one
policy: one line on stderr, exit status 130, and what finished is kept (the finished
policy's --out rows and summary, its row of the table, a plot of it)."""
from __future__ import annotations

import csv
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _command() -> list[str]:
    """The installed console script beside this Python, else the module it runs."""
    script = Path(sys.executable).parent / "interlace-sim"
    return [str(script)] if script.exists() else [sys.executable, "-m", "scheduler.sim.cli"]


def _interrupted_run(out: Path, plot: Path) -> tuple[subprocess.Popen, list[str], str, str]:
    """interlace-sim on two policies, SIGINT once the second has started; (the process, its
    stderr lines up to then, its stdout, the rest of its stderr)."""
    # srsf takes about a second on the demo trace, muri-s a few: the signal lands in muri-s
    proc = subprocess.Popen(
        [*_command(), "--trace", "demo", "--spec", "n8g8", "--policy", "srsf,muri-s",
         "--out", str(out), "--plot", str(plot)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = []
    try:
        for line in proc.stderr:  # off a terminal: a line as each policy starts and ends
            seen.append(line)
            if "muri-s: simulating" in line:
                break
        else:
            pytest.fail(f"interlace-sim ended before muri-s started: {''.join(seen)}")
        proc.send_signal(signal.SIGINT)
        stdout, rest = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc, seen, stdout, rest


def test_ctrl_c_after_one_policy_keeps_it_and_says_so_in_one_line(tmp_path):
    for attempt in range(3):
        out, plot = tmp_path / f"out{attempt}", tmp_path / f"jct{attempt}.png"
        proc, seen, stdout, rest = _interrupted_run(out, plot)
        # a loaded machine can read muri-s's first line after muri-s has finished: the
        # signal then lands in no run (exit 0, both policies done), which tests nothing
        if not (proc.returncode == 0 and "muri-s: done in" in rest):
            break
    assert "srsf: done in" in "".join(seen)
    assert proc.returncode == 130
    assert "Traceback" not in rest and "KeyboardInterrupt" not in rest
    assert rest.strip().splitlines() == [
        f"interlace-sim: interrupted during muri-s; kept srsf, rows in {out}, plot in {plot}"]
    # the table has the finished policy's row and no other
    rows = [line.split()[0] for line in stdout.strip().splitlines()]
    assert rows == ["policy", "srsf"]
    jobs = list(csv.DictReader(open(out / "srsf-jobs.csv")))
    assert len(jobs) == 1000 and all(row["jct"] for row in jobs)
    assert json.loads((out / "srsf-summary.json").read_text())["jobs"] == 1000
    assert not any(out.glob("muri-s*"))
    assert plot.stat().st_size > 0
