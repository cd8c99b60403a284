"""The scaling benchmark (bench_sim.py --scaling) and fidelity.py --all produce their tables
and files with sane figures; no timing is asserted (CI machines vary)."""
from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import fidelity  # noqa: E402
import scaling  # noqa: E402
import subrun  # noqa: E402

from traces import generate  # noqa: E402

REFERENCE = ROOT.parent / "shared" / "reference"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


# -- the scale -------------------------------------------------------------------------------
def test_the_largest_size_is_100k_jobs_on_2048_gpus_of_8_gpu_nodes():
    spec = scaling.cluster_for(100_000)
    assert (spec.total_gpus, spec.gpus_per_node) == (2_048, 8)


@pytest.mark.parametrize("jobs", [400, 1_000, 10_000, 33_333, 100_000])
def test_cluster_gpus_are_in_proportion_to_jobs_within_half_a_node(jobs):
    spec = scaling.cluster_for(jobs)
    assert spec.gpus_per_node == 8
    assert spec.num_switch * spec.nodes_per_switch == spec.num_nodes
    assert abs(spec.total_gpus - jobs * 2_048 / 100_000) <= 4


def test_tiny_sizes_still_get_one_node():
    assert scaling.cluster_for(1).total_gpus == 8


@pytest.mark.parametrize("jobs", [50, 1_000, 10_000])
def test_every_generated_job_fits_its_cluster(jobs):
    args = scaling.trace_args(jobs)
    gpus = scaling.cluster_for(jobs).total_gpus
    assert max(r.num_gpu for r in generate(**args)) <= gpus


def test_arrivals_thin_out_as_the_cluster_grows():
    """Same load: ten times the GPUs take ten times the arrival rate (same job mix)."""
    small, large = scaling.trace_args(10_000), scaling.trace_args(100_000)
    assert small["max_gpus"] == large["max_gpus"] == 32
    gpus_small = scaling.cluster_for(10_000).total_gpus
    gpus_large = scaling.cluster_for(100_000).total_gpus
    assert small["mean_interarrival"] * gpus_small == pytest.approx(
        large["mean_interarrival"] * gpus_large, rel=1e-3)


# -- the child runs ----------------------------------------------------------------------------
def test_peak_rss_is_each_childs_own():
    """A 300 MB child, then a small one: the small one's figure is not the big one's (which
    RUSAGE_CHILDREN, the maximum over every child so far, would report). Measured from a small
    parent, as the benchmark does: Linux keeps a child's high-water mark across exec, so a
    child of this (large) test process would start from its pages."""
    script = (
        "import json, sys\n"
        f"sys.path.insert(0, {str(ROOT / 'bench')!r})\n"
        "import subrun\n"
        "big = subrun.run_capped([sys.executable, '-c', 'b = bytearray(300 * 2**20); b[-1] = 1'], 60)\n"
        "small = subrun.run_capped([sys.executable, '-c', 'pass'], 60)\n"
        "print(json.dumps([big.returncode, small.returncode, big.peak_rss_bytes, small.peak_rss_bytes]))\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True, timeout=120).stdout
    big_rc, small_rc, big_rss, small_rss = json.loads(out)
    assert big_rc == small_rc == 0
    assert big_rss >= 300 * 2**20
    assert 0 < small_rss < 100 * 2**20


def test_a_run_past_its_cap_is_stopped_and_reported():
    task = {"generate": scaling.trace_args(2_000), "spec": {
        "num_switch": 1, "nodes_per_switch": 5, "gpus_per_node": 8, "cpus_per_node": 92,
        "mem_per_node": 520}, "policy": "muri-s", "preset": "default"}
    # a child cannot even import the simulator in 10 ms
    row = subrun.simulate_capped(task, 0.01)
    assert row["timed_out"] and row["error"] == "> 0.01 s"
    assert "rounds" not in row


def test_ratio_says_more_than_where_the_artifact_was_capped():
    row = {"process_s": 2.0, "timed_out": False, "artifact_s": 300.0, "artifact_timed_out": True}
    assert scaling.ratio(row) == "more than 150.0x"
    assert scaling.ratio(dict(row, artifact_timed_out=False)) == "150.0x"
    assert scaling.ratio(dict(row, timed_out=True, artifact_timed_out=False)) == "ours capped"


# -- the scaling mode end to end ---------------------------------------------------------------
@pytest.fixture(scope="module")
def scaling_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("scaling")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench_sim.py"), "--scaling", "--sizes", "50,200",
         "--policies", "fifo,srtf", "--limit", "300", "--out", str(out)],
        capture_output=True, text=True, timeout=600)
    return proc, out


def test_scaling_mode_prints_a_row_per_size_and_policy(scaling_run):
    proc, _ = scaling_run
    assert proc.returncode == 0, proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines()]
    table = [r for r in rows if r and r[0] in ("50", "200")]
    assert sorted((r[0], r[2]) for r in table) == [("200", "fifo"), ("200", "srtf"),
                                                  ("50", "fifo"), ("50", "srtf")]
    assert "[4/4]" in proc.stderr  # progress as runs end


def test_scaling_csv_and_json_hold_sane_figures(scaling_run):
    _, out = scaling_run
    with open(out / "scaling.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 4
    as_json = json.loads((out / "scaling.json").read_text())
    assert [(r["jobs"], r["policy"], r["events"]) for r in as_json] == [
        (int(r["jobs"]), r["policy"], int(r["events"])) for r in rows]
    for r in rows:
        jobs = int(r["jobs"])
        assert int(r["gpus"]) == scaling.cluster_for(jobs).total_gpus
        assert r["timed_out"] == "False" and not r.get("error")
        assert int(r["finished"]) == jobs
        # every job arrives and ends, so at least one event per job
        assert int(r["events"]) >= jobs
        assert float(r["peak_rss_mb"]) > 0
        assert float(r["wall_s"]) > 0
        # the child's CPU time covers its start-up and the trace too, the simulation's does not
        assert 0 <= float(r["cpu_s"]) < float(r["process_cpu_s"])
        assert float(r["ms_per_event"]) == pytest.approx(
            1000 * float(r["wall_s"]) / int(r["events"]), abs=1e-4)


def test_scaling_plot_is_a_png(scaling_run):
    _, out = scaling_run
    data = (out / "scaling.png").read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 1_000


def test_scaling_mode_rejects_an_unknown_policy(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench_sim.py"), "--scaling", "--sizes", "50",
         "--policies", "nope", "--out", str(tmp_path)], capture_output=True, text=True,
        timeout=120)
    assert proc.returncode == 2 and "unknown policies" in proc.stderr


# -- fidelity --all ----------------------------------------------------------------------------
def test_find_traces_takes_the_first_folder_and_skips_the_absent(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    for folder, name in [(first, "trace3"), (second, "trace3"), (second, "trace1_pr")]:
        (folder / f"{name}.csv").write_text("x")
    found = fidelity.find_traces(fidelity.ALL_TRACES, [first, second])
    assert found == {"trace1_pr": second / "trace1_pr.csv", "trace3": first / "trace3.csv"}


needs_reference = pytest.mark.skipif(
    not (REFERENCE / "published_results.csv").is_file(),
    reason=f"reference data not found at {REFERENCE} (the artifact's traces are not shipped)")


@needs_reference
def test_fidelity_all_on_the_reference_traces(capsys):
    """Every reference trace present, a cheap exact policy: the published figures to 1e-6."""
    code = fidelity.main(["--all", "--policies", "srsf", "--jobs", "2", "--limit", "300"])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    published = fidelity.load_published(REFERENCE / "published_results.csv")
    present = fidelity.find_traces(fidelity.ALL_TRACES, [REFERENCE])
    assert {"trace3", "trace3_pr"} <= set(present)
    for name in present:
        line = next(x for x in out.splitlines() if x.split()[:2] == [name, "srsf"])
        assert "%" in line and "n/a" not in line
    assert f"[{len(present)}/{len(present)}]" in err
    assert f"{len(present)} runs, total wall" in out
    rows = fidelity.run_all({"trace3": REFERENCE / "trace3.csv"}, ["srsf"], 300, 1,
                            progress=False)
    errors = fidelity.relative_errors(rows[0], published[("trace3", "srsf")])
    assert set(errors) == {"avg_jct", "p99_jct", "makespan"}
    assert all(abs(e) <= 1e-6 for e in errors.values())


@needs_reference
def test_fidelity_all_names_the_runs_past_the_limit(capsys):
    code = fidelity.main(["--all", "--traces", "trace3", "--policies", "srtf,srsf",
                          "--limit", "0.01", "--jobs", "2"])
    out, _ = capsys.readouterr()
    assert code == 0
    assert "past the 0.01 s limit: trace3 srtf, trace3 srsf" in out
    assert out.count("> 0.01 s") == 2


# -- how far a capped run got ------------------------------------------------------------------
def test_the_last_heartbeat_tells_how_far_a_run_got():
    stderr = ('{"events": 10, "finished": 2, "cpu_s": 1.0, "wall_s": 2.0}\n'
              "some warning\n"
              '{"events": 30, "finished": 9, "cpu_s": 3.0, "wall_s": 6.5}\n'
              "Traceback (most recent call last):\n")
    assert subrun.last_heartbeat(stderr) == {"events": 30, "finished": 9, "cpu_s": 3.0,
                                             "wall_s": 6.5}
    assert subrun.last_heartbeat("no progress at all\n") is None


def test_the_child_heartbeat_counts_every_event(capsys):
    import sim_child

    beat = sim_child._Heartbeat(every=0.0)
    for finished in (0, 1, 1):
        beat(finished, 5)
    lines = [json.loads(x) for x in capsys.readouterr().err.splitlines()]
    assert [(b["events"], b["finished"]) for b in lines] == [(1, 0), (2, 1), (3, 1)]
    assert subrun.last_heartbeat("\n".join(json.dumps(b) for b in lines))["events"] == 3


def test_a_capped_row_reports_time_per_event_from_its_last_heartbeat():
    task = {"jobs_label": 1_000, "policy": "muri-s", "preset": "default"}
    row = {"timed_out": True, "child_wall_s": 300.2, "child_cpu_s": 150.0, "peak_rss_mb": 90.0,
           "error": "> 300 s", "partial": {"events": 400, "finished": 150, "cpu_s": 100.0,
                                           "wall_s": 200.0}}
    out = scaling.figures(task, row, 300)
    assert out["gpus"] == scaling.cluster_for(1_000).total_gpus
    assert (out["partial_events"], out["partial_finished"]) == (400, 150)
    assert out["partial_ms_per_event"] == 500.0 and out["partial_cpu_ms_per_event"] == 250.0
    assert "events" not in out and "~500.000" in scaling.table([out])


@pytest.mark.parametrize("policy", ["fifo", "muri-s"])
def test_the_warm_up_leaves_the_measured_run_unchanged(policy):
    """The warm-up simulates first in the same process: the run measured after it has the same
    events and outcome as a cold one (no state carried over)."""
    import sim_child

    task = {"generate": scaling.trace_args(60), "spec": {
        "num_switch": 1, "nodes_per_switch": 1, "gpus_per_node": 8, "cpus_per_node": 92,
        "mem_per_node": 520}, "policy": policy, "preset": "default"}
    warm, cold = sim_child.run_task(task), sim_child.run_task(dict(task, warm_up=False))
    keys = ("jobs", "finished", "rounds", "avg_jct", "p99_jct", "makespan")
    assert [warm[k] for k in keys] == [cold[k] for k in keys]
