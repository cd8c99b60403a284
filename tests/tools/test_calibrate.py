"""interlace-calibrate: the fit recovers what was planted, reads logs strictly, and the shipped
`default` model predicts the paper's real testbed run (where its logs are present)."""
from __future__ import annotations

import math
from pathlib import Path
from types import MappingProxyType, SimpleNamespace

import numpy as np
import pytest

from scheduler.core.metrics import JobOutcome
from scheduler.presets import get_preset
from scheduler.sim.simulator import simulate
from scheduler.tools import calibrate
from scheduler.tools.runlogs import (JobRun, RunLog, RunLogError, read_testbed_jobs,
                                     find_testbed, write_testbed_jobs)
from specs.spec import ClusterSpec, load_spec
from traces.generate import generate
from traces.muri_csv import read_trace

ROOT = Path(__file__).resolve().parents[2]
TESTBED = ROOT.parent / "shared" / "reference" / "testbed"
needs_testbed = pytest.mark.skipif(
    not (TESTBED / "cluster_trace.csv").is_file(),
    reason="the paper's testbed logs (../shared/reference/testbed) are not here")
ROUND = 360.0  # the testbed's round period (its run.sh)
#: the testbed's logs, by this project's policy names
TESTBED_LOGS = {"srtf": "SRTF", "srsf": "SRSF", "tiresias": "tiresias", "themis": "themis",
                "muri-s": "Muri-S", "muri-l": "Muri-L"}


def _run(job_id, alone, starts, running):
    return JobRun(job_id, 1, 0.0, 0.0, running, running, starts, alone)


def test_the_overhead_fit_recovers_a_planted_calibration_and_overhead():
    rng = np.random.default_rng(1)
    alone = rng.uniform(50, 50_000, 300)
    starts = rng.integers(1, 12, 300)
    jobs = {i: _run(i, a, int(s), 1.04 * a + 22.0 * s) for i, (a, s) in
            enumerate(zip(alone, starts))}
    fit = calibrate.fit_overhead([RunLog("srsf", jobs, "planted")])
    assert fit.calibration == pytest.approx(1.04, abs=1e-9)
    assert fit.overhead_s == pytest.approx(22.0, abs=1e-6)
    assert fit.overhead_sd < 1e-6 and fit.jobs == 300


def test_errors_are_measured_against_the_log_by_hand():
    log = RunLog("srsf", {0: JobRun(0, 1, 0.0, 0.0, 100.0, 100.0, 1, 100.0),
                          1: JobRun(1, 1, 0.0, 100.0, 300.0, 200.0, 1, 200.0)}, "log")
    replayed = SimpleNamespace(outcomes=[_outcome(0, 0.0, 110.0, 110.0),
                                         _outcome(1, 0.0, 330.0, 220.0)])
    e = calibrate.errors(log, replayed)
    assert e.avg == pytest.approx((110 + 330) / (100 + 300) - 1)
    assert e.p99 == pytest.approx(330 / 300 - 1)
    assert e.makespan == pytest.approx(330 / 300 - 1)
    assert e.job_jct == pytest.approx(math.log(1.1))
    assert e.job_running == pytest.approx(math.log(1.1) ** 2)


def _outcome(job_id, submit, end, running):
    return JobOutcome(job_id, 1, "resnet18", submit, submit, end, 0, 1, running, running, 0.0)


@pytest.mark.slow
def test_the_slowdown_fit_recovers_planted_slowdowns_through_replays(tmp_path, capsys):
    """A folder in the testbed's layout whose logs a simulation with known slowdowns wrote:
    interlace-calibrate finds those slowdowns again (the sizes its groups used)."""
    records = generate(40, 3, mean_interarrival=120, max_gpus=4, median_duration=1800)
    spec = ClusterSpec(1, 2, 8, 92, 350)
    planted = get_preset("default", muri_merge_rule="efficiency",
                         overhead_table=MappingProxyType({}), overhead_default=15.0,
                         group_slowdown=MappingProxyType({2: 1.15, 3: 1.4, 4: 1.3}))
    _write_folder(tmp_path, records, spec, planted, ("srsf", "muri-s"), 60.0)
    assert calibrate.main([str(tmp_path), "--round-interval", "60", "--no-cv"]) == 0
    out = capsys.readouterr().out
    first = out.splitlines()[0]
    assert first.startswith("restart overhead 1")  # 15 s planted, within a second
    overhead = float(first.split()[2])
    assert overhead == pytest.approx(15.0, abs=0.5)
    fitted = dict(part.split(": ") for part in
                  out.splitlines()[1].removeprefix("group slowdown ").split(" (")[0].split(", "))
    sizes = _sizes_used(records, spec, planted)
    for size in sizes:
        assert float(fitted[str(size)]) == pytest.approx(
            planted.model.group_slowdown[size], abs=0.051), out
    assert sizes, "the planted run formed no group"


def _sizes_used(records, spec, preset):
    """The group sizes that held at least a fifth of the grouped job-seconds of the run: a
    size used only briefly leaves too little in the logs to be fitted."""
    held: dict[int, float] = {}
    last = [0.0, ()]

    def note(now, plan, core):
        for group in last[1]:
            held[len(group.jobs)] = held.get(len(group.jobs), 0.0) + (now - last[0]) * len(group.jobs)
        last[:] = [now, [g for g in plan.groups if len(g.jobs) > 1]]

    simulate(records, spec, "muri-s", preset, on_round=note, round_interval=60.0)
    total = sum(held.values())
    return sorted(size for size, seconds in held.items() if seconds >= 0.2 * total)


def _write_folder(folder, records, spec, preset, policies, period):
    from traces.muri_csv import write_trace

    write_trace(folder / "cluster_trace.csv", records)
    (folder / "spec.csv").write_text(
        "num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\n"
        f"{spec.num_switch},{spec.nodes_per_switch},{spec.gpus_per_node},"
        f"{spec.cpus_per_node},{spec.mem_per_node}\n")
    for policy in policies:
        result = simulate(records, spec, policy, preset, round_interval=period)
        prefix = {"srsf": "SRSF", "muri-s": "Muri-S", "muri-l": "Muri-L"}[policy]
        write_testbed_jobs(folder / f"{prefix}-job.csv", result.outcomes)


# -- reading logs strictly -------------------------------------------------------------------
HEADER = "job_id,num_gpu,submit_time,start_time,end_time,real_executed_time,duration,job_counter\n"


@pytest.mark.parametrize("row, says", [
    ("0,1,0,5,x,10,10,1", "end_time: not a number: 'x'"),
    ("0,1,0,5,inf,10,10,1", "end_time: must be a finite number"),
    ("0,1,0,5,20,-1,10,1", "real_executed_time: must be a finite number"),
    ("0,1,10,5,20,10,10,1", "submit <= start <= end does not hold"),
])
def test_a_bad_row_is_one_line_naming_file_line_and_field(tmp_path, row, says):
    path = tmp_path / "SRSF-job.csv"
    path.write_text(HEADER + "1,1,0,0,5,5,5,1\n" + row + "\n")
    with pytest.raises(RunLogError) as err:
        read_testbed_jobs(path, "srsf")
    text = str(err.value)
    assert text.startswith(f"{path}:3: ") and says in text and "\n" not in text


def test_a_log_without_a_column_names_it(tmp_path):
    path = tmp_path / "SRSF-job.csv"
    path.write_text("job_id,num_gpu\n1,1\n")
    with pytest.raises(RunLogError, match="no column submit_time"):
        read_testbed_jobs(path, "srsf")


def test_a_folder_without_a_trace_or_a_spec_is_one_line(tmp_path, capsys):
    assert calibrate.main([str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err == f"interlace-calibrate: {tmp_path}: no cluster_trace.csv (the trace the " \
                  f"testbed ran)\n"
    (tmp_path / "cluster_trace.csv").write_text("job_id\n")
    with pytest.raises(RunLogError, match="needs one cluster spec CSV"):
        find_testbed(tmp_path)


# -- the shipped model against the real testbed ----------------------------------------------
def _testbed_summary(policy: str) -> tuple[float, float, float]:
    """avg JCT, makespan and p99 JCT as the testbed's result.out states them."""
    text = (TESTBED / f"{TESTBED_LOGS[policy]}-result.out").read_text()
    fields = dict(part.strip().split(": ") for part in text.split(","))
    return (float(fields["avg JCT"]), float(fields["makespan"]), float(fields["99th JCT"]))


@pytest.fixture(scope="module")
def replays():
    records = read_trace(TESTBED / "cluster_trace.csv")
    spec = load_spec(TESTBED / "testbed_n8g8.csv")
    return {policy: simulate(records, spec, policy, get_preset("default"), round_interval=ROUND)
            for policy in TESTBED_LOGS}


@needs_testbed
@pytest.mark.parametrize("policy", list(TESTBED_LOGS))
def test_the_default_model_predicts_each_policy_of_the_real_testbed(replays, policy):
    avg, makespan, p99 = _testbed_summary(policy)
    s = replays[policy].summary
    assert s.avg_jct == pytest.approx(avg, rel=0.10)
    assert s.p99_jct == pytest.approx(p99, rel=0.20)
    assert s.makespan == pytest.approx(makespan, rel=0.20)
    # per job: half the jobs within 15% of their measured JCT
    log = read_testbed_jobs(TESTBED / f"{TESTBED_LOGS[policy]}-job.csv", policy)
    assert calibrate.errors(log, replays[policy]).job_jct <= math.log(1.15)


@needs_testbed
def test_interleaving_gains_what_it_gained_on_the_testbed(replays):
    def ratio(a, b):
        return replays[a].summary.avg_jct / replays[b].summary.avg_jct

    real = {p: _testbed_summary(p)[0] for p in TESTBED_LOGS}
    assert ratio("muri-s", "srsf") == pytest.approx(real["muri-s"] / real["srsf"], abs=0.05)
    assert ratio("muri-l", "tiresias") == pytest.approx(real["muri-l"] / real["tiresias"],
                                                        abs=0.05)


@needs_testbed
def test_short_jobs_wait_for_the_testbed_s_rounds(replays):
    """The testbed's 4-GPU jobs: median JCT 318 s for a median run of 49 s, most of it the
    wait for a round; the replay at the same period comes within 20%."""
    log = read_testbed_jobs(TESTBED / "SRSF-job.csv", "srsf")
    four = [j.job_id for j in log.jobs.values() if j.num_gpu == 4]
    real = float(np.median([log.jobs[i].jct for i in four]))
    replayed = {o.job_id: o for o in replays["srsf"].outcomes}
    assert float(np.median([replayed[i].jct for i in four])) == pytest.approx(real, rel=0.2)


@needs_testbed
@pytest.mark.slow
def test_values_fitted_without_a_run_predict_it(tmp_path):
    """Cross-validation on the testbed: the overhead fitted without SRSF's run predicts SRSF,
    the slowdowns fitted on Muri-L's run alone predict Muri-S, within 15% average JCT."""
    trace, spec_file, files = find_testbed(TESTBED)
    logs = {name: read_testbed_jobs(path, name) for name, path in files.items()}
    records, spec = read_trace(trace), load_spec(spec_file)
    base = get_preset("default", muri_merge_rule="efficiency")
    replay = calibrate.Replays(records, spec, ROUND)
    plain = [logs[p] for p in ("srtf", "tiresias", "themis")]
    overhead = calibrate.fit_overhead(plain)
    start = dict(get_preset("default").model.group_slowdown)
    slowdown = calibrate.fit_slowdown(replay, base, overhead, [logs["muri-l"]], start)
    preset = calibrate.fitted_preset(base, overhead, slowdown)
    for held_out in ("srsf", "muri-s"):
        e = calibrate.errors(logs[held_out], replay(held_out, preset))
        assert abs(e.avg) <= 0.15, (held_out, e)
