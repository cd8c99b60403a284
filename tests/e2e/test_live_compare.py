"""The live-vs-model comparison in its CI form (bench/live_compare.py's `short` form).

Real torch trainers (bert, gpt2) on a live cluster of two one-GPU nodes (each node's
trainers pinned to one CPU core), SRSF, time scale 1. The simulator is told only what a
profiling pass (three solo runs per model, in turns) and a launch test measured before the
live run; its per-job JCTs are then compared with the live ones.

The error of that prediction has two parts, and the test checks each against what can
justify it:

* The machine's own pace. This 2-core virtual machine does not run at one speed: the same
  solo bert run took 9.3-15.3 ms per iteration in three consecutive profiling runs, and in
  one live run the trainers measured 12 ms per iteration for the first two jobs and 18 ms for
  the next two (1.1-1.95x their profiles). No model of the scheduler can know that before the
  run. So the prediction is asserted to be off by no more than the pace change the trainers
  measured explains (`pace_band`).
* The scheduling model: queueing, placement, restarts, the policy's decisions. A replay
  tells the simulator the pace each job's trainers measured in the live run (their own logs,
  outside the scheduler) and still only the launch test's restart costs; its JCTs must match
  the live ones tightly. Measured replay errors on this machine (SRSF, this form and its
  predecessor, 9 runs, load average 1-8): average JCT -10.1% to +6.0%, median per job at most
  10.8% (max 20.1%). The bound, 15% on the average and 20% on the median job, is 1.5-2x that.

Each check is shown failing when the model is told something wrong.
"""
from __future__ import annotations

import json

import pytest

from bench import live_compare as lc
from traces import read_trace

pytest.importorskip("torch", reason="the torch trainers need the train extra")

POLICY = "srsf"
REPLAY = lc.Bound(avg_jct=0.15, median_job=0.20)


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """One profiling pass, one launch test, one prediction, then one live run."""
    out = tmp_path_factory.mktemp("livecmp")
    known, trace, spec = lc.prepare(lc.SHORT, out)
    result = lc.run_policy(lc.SHORT, known, trace, spec, POLICY, out, repeats=1)
    return out, known, trace, spec, result


def _report(result) -> str:
    return lc.table(lc.lines(result, lc.SHORT)) + "\n" + json.dumps(
        {j: (round(run["live"][j]["jct"], 1), round(result["predicted"][j]["jct"], 1),
             round(run["pace_ratios"][j], 2)) for run in result["runs"] for j in run["live"]})


def _replayed(measured, pace_factor=1.0, restart_factor=1.0) -> dict:
    out, known, trace, spec, result = measured
    run = result["runs"][0]
    paces = {j: p * pace_factor for j, p in run["paces"].items()}
    replay = lc.predict(lc.repaced(read_trace(trace), paces), spec, POLICY,
                        known.distorted(restart_factor=restart_factor))
    return lc.compare(replay, run["live"])


def test_replayed_at_the_trainers_pace_the_model_matches_the_live_run(measured):
    *_, result = measured
    run = result["runs"][0]
    assert run["replay_comparison"] is not None, "SRSF ran every job alone"
    assert lc.check(run["replay_comparison"], REPLAY) == [], _report(result)
    assert run["replay_comparison"] == _replayed(measured)


# On five runs of this form these moved the replay's average JCT error to +29..+48%,
# -22..-37% and +36..+102%. A 3x restart cost gave +13..+54% (inside the bound once, a CI run
# at load 8 where the trainers ran 1.5-1.8x slower than profiled, so restarts weighed less),
# no restart cost -17..-26%: too near the bound to assert every time.
@pytest.mark.parametrize("wrong", [{"pace_factor": 1.5}, {"pace_factor": 0.67},
                                   {"restart_factor": 5.0}],
                         ids=["pace-x1.5", "pace-x0.67", "restart-x5"])
def test_the_replay_check_fails_when_the_model_is_told_something_wrong(measured, wrong):
    assert lc.check(_replayed(measured, **wrong), REPLAY), _report(measured[-1])


def test_the_prediction_is_off_by_no_more_than_the_machines_change_of_pace(measured):
    *_, result = measured
    run = result["runs"][0]
    assert lc.explained(run["comparison"], run["pace_ratios"], REPLAY.avg_jct) == [], \
        _report(result)


# The prediction's check is as loose as the machine's drift: a 3x profile failed it on each
# of four runs; a 1/3x profile on three (the fourth run's trainers were 2.2x slower than
# profiled, which explains nearly as much), a 2x or 0.5x profile on one or two.
def test_the_prediction_check_fails_when_the_profiles_are_wrong(measured, tmp_path, factor=3.0):
    _, known, trace, spec, result = measured
    bad = known.distorted(time_factor=factor)
    predicted = lc.predict(lc.job_trace(tmp_path / "trace.csv", lc.SHORT.jobs, bad), spec,
                           POLICY, bad)
    run = result["runs"][0]
    assert lc.explained(lc.compare(predicted, run["live"]), run["pace_ratios"],
                        REPLAY.avg_jct), _report(result)


def test_the_prediction_is_made_before_the_live_run_and_from_the_passes_alone(measured):
    out, known, trace, spec, result = measured
    written = out / f"predicted-{POLICY}.json"
    run_dir = out / "runs" / f"{POLICY}-0"
    assert written.stat().st_mtime <= (run_dir / "endpoints.json").stat().st_mtime
    # the same prediction again from the two passes' files and the trace alone
    again = lc.predict(read_trace(trace), spec, POLICY, lc.Known.load(out))
    assert {int(j): v for j, v in json.loads(written.read_text()).items()} == again


def test_comparison_figures():
    live = {0: {"submit": 0.0, "end": 10.0, "jct": 10.0}, 1: {"submit": 5.0, "end": 25.0,
                                                               "jct": 20.0}}
    model = {0: {"submit": 0.0, "end": 12.0, "jct": 12.0}, 1: {"submit": 5.0, "end": 20.0,
                                                                "jct": 15.0}}
    c = lc.compare(model, live)
    assert c["per_job"] == pytest.approx({0: 0.2, 1: -0.25})
    assert c["median_abs"] == pytest.approx(0.225) and c["max_abs"] == pytest.approx(0.25)
    assert c["avg_jct_err"] == pytest.approx(13.5 / 15 - 1)
    assert c["makespan_err"] == pytest.approx(20 / 25 - 1)
    assert lc.check(c, lc.Bound(avg_jct=0.2, median_job=0.3)) == []
    assert len(lc.check(c, lc.Bound(avg_jct=0.05, median_job=0.2))) == 2
    spread = lc.run_spread([live, {0: dict(live[0], jct=12.0), 1: live[1]}])
    assert spread["per_job"] == pytest.approx({0: 2 / 11, 1: 0.0})
    # model/live average 0.9: inside what paces 1.0-1.25x slower than profiled explain
    # (0.8-1.0), not inside what 0.9-1.0x explain (1.0-1.11) without slack
    assert lc.explained(c, {0: 1.0, 1: 1.25}, 0.0) == []
    assert lc.explained(c, {0: 0.9, 1: 1.0}, 0.0)
    assert lc.explained(c, {0: 0.9}, 0.15) == [] and lc.explained(c, {0: 0.9}, 0.05)


def _log(path, *records):
    path.write_text("".join(json.dumps(dict(r, level="info", component="trainer")) + "\n"
                            for r in records))


def test_a_jobs_live_pace_is_its_iterations_over_the_time_it_trained(tmp_path):
    """Across launches, start-up (spawn to the first iteration) left out: 100 iterations in
    2 s, then 49 in 1 s after a restart."""
    ts = "2026-12-01T10:00:{:06.3f}Z".format
    _log(tmp_path / "trainer-7.log",
         {"event": "trainer_start", "ts": ts(0)},
         {"event": "trainer_first_iteration", "iteration": 1, "ts": ts(3)},
         {"event": "trainer_stopped", "iterations": 101, "ts": ts(5)},
         {"event": "trainer_start", "ts": ts(9)},
         {"event": "trainer_first_iteration", "iteration": 102, "ts": ts(12)},
         {"event": "trainer_finished", "iterations": 151, "ts": ts(13)})
    assert lc.live_paces(tmp_path) == {7: pytest.approx(3.0 / 149)}


def test_a_trainers_timing_leaves_out_its_start_up_iteration(tmp_path):
    """The first iteration after a launch (warm-up) is the restart overhead, not the pace: a
    window that held it made the live scheduler's first measured profile of every job far
    slower than the truth, and SRSF preempted each job as soon as it was first measured."""
    records, _ = lc.run_trainer("bert", 3, 0, tmp_path)
    finished = [r for r in records if r["event"] == "trainer_finished"]
    assert finished and finished[0]["timing"]["iterations"] == 2
