"""bench_sim.py --fast-policies: ours and the artifact side by side, the simulation-only
figures derived as stated, and results checked against the artifact's own output."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import bench_sim  # noqa: E402
import subrun  # noqa: E402

from traces import generate, write_trace  # noqa: E402

ARTIFACT = Path("/tmp/artifact-sim/simulator")
ARTIFACT_PYTHON = Path("/tmp/artifact-venv/bin/python")
SPEC = ROOT.parent / "shared" / "reference" / "n8g8.csv"


def child(cpu: float, wall: float) -> subrun.ChildRun:
    return subrun.ChildRun("", "", 0, False, wall, cpu, 0)


def test_the_artifacts_simulation_time_is_its_process_less_its_start_up():
    ours = {"jobs": 10, "rounds": 20, "avg_jct": 100.0, "child_cpu_s": 0.5,
            "child_wall_s": 0.7, "cpu_s": 0.2, "wall_s": 0.25}
    row = bench_sim._side_row("t", "srsf", ours, child(5.0, 6.0), 100.0 * (1 + 1e-12),
                              child(1.5, 2.0))
    assert row["agree"]
    assert row["sim_cpu_s_artifact"] == pytest.approx(3.5)
    assert row["sim_wall_s_artifact"] == pytest.approx(4.0)
    assert row["ratio_process_cpu"] == pytest.approx(10.0)
    assert row["ratio_sim_cpu"] == pytest.approx(17.5)


def test_results_that_differ_beyond_1e9_do_not_agree():
    ours = {"jobs": 1, "rounds": 1, "avg_jct": 100.0, "child_cpu_s": 1.0, "child_wall_s": 1.0,
            "cpu_s": 1.0, "wall_s": 1.0}
    row = bench_sim._side_row("t", "srtf", ours, child(2.0, 2.0), 100.0 * (1 + 1e-8),
                              child(1.0, 1.0))
    assert not row["agree"]


@pytest.mark.skipif(not (ARTIFACT / "run_sim.py").is_file() or not ARTIFACT_PYTHON.is_file()
                    or not SPEC.is_file(), reason="the artifact (never part of this repo) "
                    "or the reference spec is not on this machine")
def test_a_small_trace_side_by_side_agrees_with_the_artifact(tmp_path):
    write_trace(tmp_path / "small.csv", generate(25, seed=5, max_gpus=8))
    rows = bench_sim.side_by_side(ARTIFACT, str(ARTIFACT_PYTHON), ["small"], ["srtf", "antman"],
                                  spec=SPEC, trace_dir=tmp_path, limit=300)
    assert [(r["trace"], r["policy"]) for r in rows] == [("small", "srtf"), ("small", "antman")]
    for row in rows:
        assert row["agree"], row
        assert row["jobs"] == 25
        assert 0 < row["sim_cpu_s_ours"] <= row["process_cpu_s_ours"]
        assert row["artifact_startup_cpu_s"] > 0
