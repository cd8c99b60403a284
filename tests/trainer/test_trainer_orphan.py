"""A trainer whose launcher dies before the trainer first looks at its parent.

Why: the trainer learns it is orphaned when its parent changes; it remembers the parent at
start. If the agent is SIGKILLed in the ~0.1-0.3 s between spawning the trainer and the
trainer's first look, the parent it remembers is already init, nothing ever changes, and the
orphan trains on unowned while the scheduler relaunches the job elsewhere: two processes run
one job at once. The trainers' ledger showed exactly that in the killed-agent live test.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from trainer import checkpoint
from tests.trainer.test_trainer import DEADLINE_S, ROOT, trainer_cmd, wait_for


def test_a_trainer_orphaned_before_it_looked_still_stops(tmp_path):
    log_dir = tmp_path / "logs"
    cmd = trainer_cmd(tmp_path, job_id=9, total=10**6, extra=("--run-dir", str(log_dir)))
    # the launcher spawns the trainer and exits at once, long before the trainer's imports end
    launcher = "import subprocess, sys; subprocess.Popen(sys.argv[1:], start_new_session=True)"
    subprocess.run([sys.executable, "-c", launcher, *cmd], cwd=ROOT, check=True,
                   env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=DEADLINE_S,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    log = log_dir / "trainer-9.log"

    def event(name):
        return log.exists() and next(
            (json.loads(x) for x in log.read_text().splitlines() if name in x), None)

    try:
        line = wait_for(lambda: event("trainer_stopped"), "the orphaned trainer to stop")
        assert line["orphaned"] is True
        ckpt = checkpoint.read(tmp_path, 9)
        assert ckpt is not None and not ckpt.done
    finally:
        start = event("trainer_start")
        if start:
            try:
                os.kill(start["pid"], signal.SIGKILL)
            except ProcessLookupError:
                pass
