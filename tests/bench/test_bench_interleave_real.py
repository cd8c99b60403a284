"""bench/interleave_real.py, short form: one small real pair through the gate, gate off and
alone. Checks the mechanics, not a speed-up (a loaded CI machine decides that): the io stage
read every batch file whole, the net stage all-reduced with a real second rank each
iteration, the prediction comes from the solo runs only, and every reported field is there."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the train extra (torch) is not installed")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import interleave_real  # noqa: E402
from scheduler.core.interleave import best_order  # noqa: E402

TINY = {
    "io-heavy": {"side": 256, "codec": "raw", "blur": 0, "width": 4, "depth": 1},
    "gpu-heavy": {"side": 32, "codec": "zlib", "blur": 0, "width": 16, "depth": 2},
}
ITERATIONS = 8
CASE_FIELDS = {
    "bench", "case", "order", "iterations", "solo_profile_ms", "solo_iteration_ms",
    "sequential_sum_ms", "predicted_tt_ms", "gate_rule_tt_ms", "measured_tt_ms",
    "predicted_over_measured", "gate_rule_over_measured", "predicted_speedup",
    "speedup_gated", "gate_off_tt_ms", "speedup_gate_off", "member_tt_ms",
    "gate_off_member_tt_ms", "gated_stage_ms", "gate_off_stage_ms", "gated_over_solo_work", "on_cpu",
    "io", "net", "run_s"}


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    got = []
    interleave_real.run(got.append, iterations=ITERATIONS,
                        cases=(("complementary", ("io-heavy", "gpu-heavy")),), jobs=TINY,
                        data_dir=str(tmp_path_factory.mktemp("data")))
    return got


def test_every_row_has_its_fields(rows):
    cases = [r["case"] for r in rows]
    assert cases == ["machine", "complementary", "disk", "end"]
    case = rows[1]
    assert CASE_FIELDS <= set(case)
    assert set(case["order"]) == {"io-heavy#0", "gpu-heavy#1"}
    for stages in (*case["gated_stage_ms"].values(), *case["gate_off_stage_ms"].values()):
        assert set(stages) == set(interleave_real.STAGES)
        assert all(v > 0 for v in stages.values())
    assert case["measured_tt_ms"] > 0 and case["speedup_gated"] > 0
    assert json.loads(json.dumps(rows)) == rows


def test_the_io_stage_read_every_batch_file_whole(rows):
    io = rows[1]["io"]
    assert {j: v["io_reads"] for j, v in io.items()} == {"io-heavy#0": ITERATIONS,
                                                         "gpu-heavy#1": ITERATIONS}
    assert all(v["io_bytes_ok"] for v in io.values())
    # a 256x256 raw image is 196608 bytes: 32 of them per batch (and a small header)
    assert io["io-heavy#0"]["io_mb_per_read"] == pytest.approx(32 * 196608 / 1e6, abs=0.01)


def test_the_net_stage_all_reduced_with_the_peer_every_iteration(rows):
    net = rows[1]["net"]
    # solo + gated + gate-off phases, and the final stop vote
    assert all(v["net_reduces"] == 3 * ITERATIONS + 1 for v in net.values())
    assert all(v["net_ok"] for v in net.values())


def test_the_prediction_is_the_model_of_the_solo_profiles(rows):
    case = rows[1]
    profiles = [tuple(p) for p in case["solo_profile_ms"].values()]
    tt, order = best_order(profiles)
    assert case["predicted_tt_ms"] == pytest.approx(tt, abs=0.05)
    slot_profiles = [case["solo_profile_ms"][j] for j in case["order"]]
    assert [list(p) for p in order] == slot_profiles  # the gate used the model's order
    solo = sum(case["solo_iteration_ms"].values())
    assert case["sequential_sum_ms"] == pytest.approx(solo, abs=0.05)


def test_predict_depends_on_the_profiles_alone():
    a, b = (0.06, 0.002, 0.01, 0.001), (0.001, 0.003, 0.1, 0.002)
    tt, rule, slots = interleave_real.predict([a, b])
    assert tt == best_order([a, b])[0] and sorted(slots) == [0, 1]
    assert rule <= tt + 1e-12
    same = interleave_real.predict([a, a])
    assert sorted(same[2]) == [0, 1]  # equal profiles still give two distinct slots


def test_overlap_iterations_leave_out_a_member_running_alone():
    # member a runs at 1 s/iteration throughout; b at 0.5 s but it stops at t=10
    results = {"a": {"ends": [float(t) for t in range(1, 21)]},
               "b": {"ends": [0.5 * t for t in range(1, 21)]}}
    per = interleave_real.overlap_iterations(results)
    assert per == {"a": pytest.approx(1.0), "b": pytest.approx(0.5)}


def test_the_cli_refuses_too_few_iterations():
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_interleave.py"), "--real",
                          "--iterations", "3"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "--iterations" in out.stderr


def test_the_cli_refuses_a_case_that_does_not_exist():
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_interleave.py"), "--real",
                          "--cases", "no-such-case"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "no case matches" in out.stderr
