"""A full disk under the run directory: a submit is refused saying so (`disk_full`), and
SIGTERM still shuts every process down cleanly, with no traceback and at most one line about
the log it could not write.

Real parts: broker, scheduler and agent are processes (tests/live_system.py) whose run dir is
a 3 MB tmpfs mounted for the test (root only: skipped, saying so, elsewhere); their stderr
goes to the test's own tmp dir, on a disk with room."""
from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

from broker.client import RequestFailed
from tests.helpers import job
from tests.live_system import LiveCluster
from traces.record import record_to_map

LOG_FAILURE = "log records that cannot be written are dropped"


@pytest.fixture
def small_disk(tmp_path):
    """A 3 MB tmpfs at tmp_path/small, unmounted afterwards."""
    where = tmp_path / "small"
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(where)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs ({mounted.stderr.strip() or mounted.returncode}); "
                    "run as root where mounting is allowed")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def _fill(folder: Path) -> None:
    """Take every byte left: a file of zeros, then each log's last page (a log whose page had
    room would still take a line or two)."""
    for path in [folder / "filler", *sorted(folder.glob("*.log"))]:
        with open(path, "ab", buffering=0) as out:
            try:
                while True:
                    out.write(b"\n" * 4096)
            except OSError:
                pass


@pytest.mark.real
def test_a_full_disk_refuses_submits_plainly_and_sigterm_still_exits_cleanly(small_disk,
                                                                            tmp_path):
    live = LiveCluster(small_disk / "run", spec="n2g8", nodes=1, gpus_per_node=8,
                       stderr_dir=tmp_path)
    try:
        live.start()
        _fill(live.run_dir)
        requester = live.requester("test", timeout=5.0, retries=1)
        try:
            with pytest.raises(RequestFailed) as refused:
                requester.request("scheduler", "job.submit", job=record_to_map(job(7)))
        finally:
            requester.close()
        assert str(refused.value) == "disk_full: no space left on device writing journal.db"
        for name in ("agent-n0", "scheduler", "broker"):
            live.kill(name, signal.SIGTERM)
        codes = {name: proc.returncode for name, proc in live.procs.items()}
    finally:
        live.stop_all()
    assert codes == {"broker": 0, "scheduler": 0, "agent-n0": 0}
    for name in codes:
        text = (tmp_path / f"{name}.stderr").read_text(errors="replace")
        assert "Traceback" not in text and "Logging error" not in text, (name, text[-3000:])
        assert text.count(LOG_FAILURE) <= 1, (name, text)
    scheduler = (tmp_path / "scheduler.stderr").read_text()
    assert scheduler.count(LOG_FAILURE) == 1 and "scheduler.log (No space left on device)" \
        in scheduler, scheduler
