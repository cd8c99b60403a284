"""A trainer's stop signal is taken by a handler that cannot hang its own process.

The child below waits in short chunks, as the emulated trainer's loop does, while another
thread sends it SIGTERM over and over. A handler that takes a lock the waiting main thread
may hold (threading.Event.set while Event.wait holds it) deadlocks sooner or later, or, run
inside itself by the next signal, overflows the stack: with threading.Event as the flag the
child died with RecursionError in 3 of 3 runs. Run in a child so that a hang is a timeout
here, not a hung suite."""
from __future__ import annotations

import subprocess
import sys

from tests.live_system import ROOT

CHILD = r"""
import os, signal, threading, time
from trainer.stopflag import stop_on_signals
stop = stop_on_signals()
def storm():
    for _ in range(3000):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.0002)
threading.Thread(target=storm, daemon=True).start()
deadline = time.monotonic() + 2.0
while time.monotonic() < deadline:
    stop.wait(0.0001)
print("set" if stop.is_set() else "not set", flush=True)
"""


def test_a_storm_of_stop_signals_never_hangs_the_waiting_trainer():
    try:
        done = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, capture_output=True,
                              text=True, timeout=30)
    except subprocess.TimeoutExpired:
        raise AssertionError("the child hung in its stop signal's handler") from None
    assert done.returncode == 0 and done.stdout.strip() == "set", done.stderr[-2000:]
