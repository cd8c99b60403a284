"""scripts/demo as a newcomer runs it: the live system forms interleaved groups on its packaged
trace, and its closing line says how many and what they gained against the simulator's SRSF
on the same trace (the figures checked against the run's own log and the simulator's
summary it wrote, not against the script's arithmetic alone)."""
from __future__ import annotations

import json
import re
import subprocess

import pytest

from scheduler.tools import report
from tests.live_system import ROOT

CLOSING = re.compile(r"^-- interleaving live: (\d+) groups? of two or more jobs formed, (\d+) of "
                     r"(\d+) jobs ran in one; average JCT ([0-9.]+) h live against ([0-9.]+) h "
                     r"for the simulator's SRSF on the same trace, (\d+)% (shorter|longer)$",
                     re.M)


@pytest.mark.slow
def test_the_demo_interleaves_and_says_what_it_gained(tmp_path):
    run = tmp_path / "run"
    done = subprocess.run([str(ROOT / "scripts" / "demo"), str(run)], cwd=ROOT,
                          capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    found = CLOSING.search(done.stdout)
    assert found, done.stdout[-2000:]
    groups, grouped, jobs = map(int, found.group(1, 2, 3))
    assert groups >= 1 and 2 <= grouped <= jobs == 40
    live = report.load_run(run)
    assert (live.groups, live.jobs_grouped) == (groups, grouped)
    srsf = json.loads((run / "sim" / "srsf-summary.json").read_text())["avg_jct"]
    assert float(found.group(5)) == pytest.approx(srsf / 3600, abs=0.005)
    live_avg = live.result().summary.avg_jct
    assert float(found.group(4)) == pytest.approx(live_avg / 3600, abs=0.005)
    change = round(abs(live_avg / srsf - 1) * 100)
    assert int(found.group(6)) == change
    assert found.group(7) == ("shorter" if live_avg <= srsf else "longer")
