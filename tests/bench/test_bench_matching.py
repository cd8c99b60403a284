"""bench/bench_matching.py --replay: the matchings a real Muri paper-preset simulation asks
for, recorded without changing the run, and the pure-Python matcher agreeing with the
compiled one on them.

Why: the twin tests elsewhere draw matrices at random; these are the inputs the simulator's
rounds really produce (a job mix's kinds, the tables _kind_table builds, round after round),
the ones the paper preset's published figures depend on.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import bench_matching  # noqa: E402

from scheduler.core import blossom  # noqa: E402
from scheduler.core.blossom import blossom_pairs_indexed  # noqa: E402
from scheduler.core.policies import muri_pairs  # noqa: E402
from scheduler.presets import get_preset  # noqa: E402
from scheduler.sim.simulator import simulate  # noqa: E402
from specs import load_spec, spec_path  # noqa: E402
from traces import read_trace  # noqa: E402

DEMO = str(ROOT / "traces" / "data" / "demo.csv")


@pytest.fixture(scope="module")
def demo_run():
    return bench_matching.record_matchings(DEMO, "n8g8", "muri-s")


def test_recording_leaves_the_run_and_the_matcher_as_they_were(demo_run):
    calls, _, avg_jct = demo_run
    spec = load_spec(spec_path("n8g8"))
    plain = simulate(read_trace(DEMO, spec=spec), spec, "muri-s", get_preset("paper"))
    assert avg_jct == plain.summary.avg_jct
    assert muri_pairs.blossom_pairs_indexed is blossom_pairs_indexed
    assert len(calls) > 1000 and max(len(c[0]) for c in calls) > 20


def test_the_pure_python_matcher_picks_the_same_pairs_on_a_simulations_inputs(demo_run):
    calls, _, _ = demo_run
    chosen = calls[::7]
    for kinds, m, table, pairs in chosen:
        assert blossom_pairs_indexed(kinds, m, table, compiled=False) == pairs
    if blossom._compiled is not None:  # the recorded pairs are the compiled ones then
        assert all(blossom_pairs_indexed(k, m, t, compiled=True) == p for k, m, t, p in chosen)


def test_replay_reports_counts_and_agreement(capsys):
    bench_matching.main(["--replay", str(ROOT / "traces" / "data" / "default.csv"),
                         "--spec", "n2g8", "--sample", "5"])
    out = capsys.readouterr().out
    assert "muri-s paper on default.csv:" in out
    assert "same pairs: True" in out
    if blossom._compiled is not None:
        full = next(line for line in out.splitlines() if "full scans" in line)
        assert full.endswith("same pairs: True")
