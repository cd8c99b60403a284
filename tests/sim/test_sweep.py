"""interlace-sweep on two tiny traces x four policies x three seeds (seconds): the CSV has one
row per run with the simulator's own numbers, the report's PNGs are drawn, the seeds mean
what --help says, and a sweep killed with SIGKILL resumes without redoing a finished run."""
from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scheduler.presets import get_preset
from scheduler.sim import cli as sim_cli
from scheduler.sim.simulator import simulate
from scheduler.tools import sweep
from scheduler.tools.sweep_plots import _binned
from scheduler.tools.sweep_runs import RoundLog
from scheduler.tools.sweep_store import COLUMNS, Store, StoreError
from scheduler.tools.sweep_traces import load, perturb
from specs import load_spec, spec_path
from traces import default_trace_path, generate, read_trace, write_trace

ROOT = Path(__file__).resolve().parents[2]
POLICIES = ["fifo", "srsf", "tiresias", "muri-s"]
SEEDS = 3
SPEC = "n2g8"


def tiny_trace(folder: Path) -> str:
    """A second small trace (60 jobs of at most 8 GPUs, crowding 16 GPUs)."""
    path = folder / "tiny60.csv"
    write_trace(path, generate(60, 3, max_gpus=8, mean_interarrival=150, median_duration=900,
                               duration_sigma=1.2, min_duration=120, max_duration=7200))
    return str(path)


def sweep_args(traces: list[str], out: Path, *extra: str, policies=POLICIES) -> list[str]:
    return ["--traces", ",".join(traces), "--policies", ",".join(policies),
            "--seeds", str(SEEDS), "--spec", SPEC, "--out", str(out), *extra]


def read_rows(out: Path) -> list[dict]:
    with open(out / "runs.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def key(row: dict) -> tuple:
    return (row["trace"], row["policy"], row["preset"], row["seed"])


def without_wall(rows: list[dict]) -> list[dict]:
    return sorted(({k: v for k, v in r.items() if k != "wall_s"} for r in rows), key=key)


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """The small sweep, run once: (its folder, its traces, what it printed)."""
    folder = tmp_path_factory.mktemp("sweep")
    traces = ["default", tiny_trace(folder)]
    out = folder / "out"
    stderr = subprocess.run(
        [sys.executable, "-m", "scheduler.tools.sweep", *sweep_args(traces, out), "--jobs", "2"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
        timeout=300, check=True).stderr
    return out, traces, stderr


def test_one_row_per_run_of_the_cross_product(small):
    out, traces, _ = small
    rows = read_rows(out)
    assert list(rows[0]) == list(COLUMNS)
    expected = {(t, p, "default", str(s)) for t in traces for p in POLICIES for s in range(SEEDS)}
    assert sorted(key(r) for r in rows) == sorted(expected)  # each once
    sizes = {"default": 40, traces[1]: 60}
    for row in rows:
        assert int(row["jobs"]) == sizes[row["trace"]] and row["spec"] == SPEC
        assert 0 < float(row["p50_jct_s"]) <= float(row["p99_jct_s"])
        assert float(row["avg_jct_s"]) <= float(row["makespan_s"])
        assert 0 < float(row["gpu_utilisation"]) <= 1
        if row["policy"] == "muri-s":  # it shares GPUs on these crowded traces
            assert float(row["mean_group_size"]) > 1
            assert 0 < float(row["group_efficiency"]) <= 1
        else:  # alone on its GPUs: no shared group, no efficiency
            assert float(row["mean_group_size"]) == 1 and row["group_efficiency"] == ""
    # a seed is another sample of the trace: not the same numbers
    by_key = {key(r): r for r in rows}
    for trace in traces:
        jcts = {by_key[(trace, "srsf", "default", str(s))]["avg_jct_s"] for s in range(SEEDS)}
        assert len(jcts) == SEEDS


def test_rows_are_what_interlace_sim_reports(small, capsys):
    out, traces, _ = small
    row = {key(r): r for r in read_rows(out)}[("default", "muri-s", "default", "0")]
    assert sim_cli.main(["--trace", "default", "--spec", SPEC, "--policy", "muri-s",
                         "--json"]) == 0
    sim = json.loads(capsys.readouterr().out)
    for column, field in (("avg_jct_s", "avg_jct"), ("p50_jct_s", "p50_jct"),
                          ("p99_jct_s", "p99_jct"), ("makespan_s", "makespan"),
                          ("avg_queueing_s", "avg_queueing"),
                          ("gpu_utilisation", "gpu_utilisation"), ("preemptions", "preemptions"),
                          ("rounds", "rounds"), ("jobs", "jobs")):
        assert float(row[column]) == float(sim[field]), column


def test_a_seeded_row_is_the_simulation_of_the_perturbed_trace(small):
    out, traces, _ = small
    row = {key(r): r for r in read_rows(out)}[(traces[1], "tiresias", "default", "2")]
    spec = load_spec(spec_path(SPEC))
    jobs = perturb(read_trace(traces[1], spec=spec), 2)
    result = simulate(jobs, spec, "tiresias", get_preset("default"))
    assert float(row["avg_jct_s"]) == result.summary.avg_jct
    assert float(row["makespan_s"]) == result.summary.makespan


def test_report_has_every_plot_and_they_are_drawn(small):
    out, traces, _ = small
    import matplotlib.image

    report = out / "report"
    expected = {"avg_jct_default.png"}
    for name in ("default", "tiny60"):
        expected |= {f"jct_cdf_{name}_default.png", f"over_time_{name}_default.png",
                     f"groups_{name}_default_muri-s.png"}
    assert {p.name for p in report.glob("*.png")} == expected  # no groups plot for fifo & co
    for name in expected:
        image = matplotlib.image.imread(report / name)
        assert image.shape[0] > 300 and image.shape[1] > 500
        ink = (image[..., :3] < 0.5).any(axis=2).mean()  # dark pixels: text, lines, bars
        assert 0.01 < ink < 0.6, name


def test_detail_files_agree_with_the_row(small):
    """The over-time series integrate to the row's utilisation; groups account for every
    busy GPU-second; the plots' binning keeps the integral."""
    out, traces, _ = small
    store = Store(out)
    for row in read_rows(out):
        detail = store.detail(key(row))
        end = float(row["makespan_s"])
        util = detail["utilisation"] + [[end, 0]]
        busy = sum(g * (min(t1, end) - t0) for (t0, g), (t1, _) in zip(util, util[1:]) if t0 < end)
        first = min(t for t, _ in detail["utilisation"])
        assert busy / ((end - first) * detail["total_gpus"]) == pytest.approx(
            float(row["gpu_utilisation"]), rel=1e-9)
        grouped = sum(g * s for _, g, _, s in detail["groups"])
        assert grouped == pytest.approx(busy, rel=1e-9)
        assert all(0 < e <= 1 for _, _, e, _ in detail["groups"])
        assert detail["queue"][-1][1] == 0 and max(q for _, q in detail["queue"]) <= int(row["jobs"])
        assert sorted(detail["jct_s"]) == detail["jct_s"] and len(detail["jct_s"]) == int(row["jobs"])
        x, binned = _binned(detail["utilisation"], end, 37)
        assert sum(binned) * end / 37 == pytest.approx(busy, rel=1e-9)


def test_round_log_watches_without_changing_the_run():
    spec = load_spec(spec_path(SPEC))
    jobs = read_trace(default_trace_path("default"), spec=spec)
    plain = simulate(jobs, spec, "muri-s", get_preset("default"))
    log = RoundLog()
    watched = simulate(jobs, spec, "muri-s", get_preset("default"), on_round=log)
    assert watched.summary == plain.summary and watched.rounds == plain.rounds
    assert any(size > 1 for size, _, _, _ in log.groups())


def test_seed_zero_is_the_trace_and_other_seeds_jitter_it():
    spec = load_spec(spec_path("n8g8"))
    jobs = sorted(load("philly_1k", spec), key=lambda r: (r.submit_time, r.job_id))
    assert perturb(jobs, 0) == jobs
    one = perturb(jobs, 1)
    assert one == perturb(jobs, 1) and one != perturb(jobs, 2)
    assert [(r.job_id, r.num_gpu, r.model_name, r.stage_times) for r in one] == \
        [(r.job_id, r.num_gpu, r.model_name, r.stage_times) for r in jobs]
    work = sorted(a.iterations / b.iterations for a, b in zip(one, jobs))
    gaps = sorted((a1.submit_time - a0.submit_time) / (b1.submit_time - b0.submit_time)
                  for a0, a1, b0, b1 in zip(one, one[1:], jobs, jobs[1:])
                  if b1.submit_time > b0.submit_time)
    for ratios in (work, gaps):
        assert 0.9 < ratios[len(ratios) // 2] < 1.1  # median 1
        assert ratios[0] < 0.8 and ratios[-1] > 1.25  # but spread
    assert all(a.submit_time <= b.submit_time for a, b in zip(one, one[1:]))


def test_killed_sweep_resumes_without_redoing_finished_runs(tmp_path):
    traces = ["default", tiny_trace(tmp_path)]
    out = tmp_path / "out"
    command = [sys.executable, "-m", "scheduler.tools.sweep", *sweep_args(traces, out),
               "--jobs", "1", "--no-report"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    first = subprocess.Popen(command, cwd=ROOT, env=env, stderr=subprocess.DEVNULL,
                             start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while _lines(out / "runs.csv") < 1 + 4:  # the header and four finished runs
            assert first.poll() is None, "the sweep ended before it could be killed"
            assert time.monotonic() < deadline, "no rows within 2 minutes"
            time.sleep(0.01)  # poll the file's content
        os.killpg(first.pid, signal.SIGKILL)
    finally:
        first.wait(timeout=30)
    before = (out / "runs.csv").read_text()
    done = before.count("\n") - 1
    assert 4 <= done < len(traces) * len(POLICIES) * SEEDS

    second = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=300, check=True)
    total = len(traces) * len(POLICIES) * SEEDS
    plan = re.search(r"(\d+) runs: (\d+) already in .*, (\d+) to run", second.stderr)
    assert plan and tuple(map(int, plan.groups())) == (total, done, total - done)
    assert len(re.findall(r"^interlace-sweep: \[\d+/\d+\]", second.stderr, re.M)) == total - done
    after = (out / "runs.csv").read_text()
    assert after.startswith(before)  # rows finished before the kill: unchanged, not rewritten
    keys = [key(r) for r in read_rows(out)]
    assert len(keys) == total == len(set(keys))


def _lines(path: Path) -> int:
    try:
        return path.read_text().count("\n")
    except FileNotFoundError:
        return 0


def test_a_row_cut_short_by_a_kill_is_dropped_and_run_again(small, tmp_path):
    out, traces, _ = small
    copy = tmp_path / "out"
    (copy / "runs").mkdir(parents=True)
    text = (out / "runs.csv").read_text()
    lines = text.splitlines(keepends=True)
    (copy / "runs.csv").write_text("".join(lines[:-1]) + lines[-1][:20])  # half a last row
    for detail in (out / "runs").iterdir():
        (copy / "runs" / detail.name).write_bytes(detail.read_bytes())
    assert sweep.main(sweep_args(traces, copy, "--jobs", "1", "--no-report")) == 0
    again = read_rows(copy)
    assert without_wall(again) == without_wall(read_rows(out))
    assert (copy / "runs.csv").read_text().startswith("".join(lines[:-1]))


def test_one_folder_one_sweep_at_a_time(tmp_path):
    first = Store(tmp_path)
    first.open()
    try:
        with pytest.raises(StoreError, match="another sweep is writing it"):
            Store(tmp_path).open()
    finally:
        first.close()
    Store(tmp_path).open()  # free again once the first has closed


@pytest.mark.parametrize("change, message", [
    (["--policies", "fifo,no-such-policy"], "--policies: unknown policy 'no-such-policy'"),
    (["--traces", "no-such-trace"], "no packaged trace of that name"),
    (["--presets", "paperish"], "--presets: unknown preset 'paperish'"),
    (["--seeds", "0"], "argument --seeds: must be an integer in [1, 10000], got '0'"),
])
def test_bad_input_is_one_line_and_runs_nothing(tmp_path, capsys, change, message):
    args = sweep_args(["default"], tmp_path / "out", policies=["fifo"])
    for flag, value in zip(change[::2], change[1::2]):
        if flag in args:
            args[args.index(flag) + 1] = value
        else:
            args += [flag, value]
    # 2: usage (a bad option, or a name that names nothing); 1: bad input
    assert sweep.main(args) == (1 if "trace" in message else 2)
    err = capsys.readouterr().err
    assert message in err and len(err.splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_a_folder_of_another_spec_is_refused(small, capsys):
    out, traces, _ = small
    assert sweep.main(["--traces", "default", "--policies", "fifo", "--spec", "n8g8",
                       "--out", str(out)]) == 1
    assert f"holds runs on spec {SPEC}" in capsys.readouterr().err


class _Terminal:
    """A stream that says it is a terminal and keeps what is written."""

    def __init__(self):
        self.text = ""

    def isatty(self):
        return True

    def write(self, text):
        self.text += text

    def flush(self):
        pass


def test_progress_is_a_bar_on_a_terminal_and_a_line_per_run_elsewhere():
    from io import StringIO

    from scheduler.tools.sweep import _Progress
    from scheduler.tools.sweep_runs import Task

    tasks = [Task("t", p, "default", 0, SPEC, None, ()) for p in ("fifo", "srsf")]
    row = {"avg_jct_s": 7200.0, "wall_s": 1.0}
    terminal = _Terminal()
    bar = _Progress(2, terminal)
    bar(tasks[0], (row, {}))
    bar(tasks[1], RuntimeError("no GPUs"))
    assert "1/2 runs" in terminal.text and "2/2 runs, 1 failed" in terminal.text
    assert "t srsf default seed 0: failed: RuntimeError: no GPUs\n" in terminal.text
    assert terminal.text.endswith("\n") and terminal.text.count("\n") == 2
    log = StringIO()
    lines = _Progress(2, log)
    lines(tasks[0], (row, {}))
    lines(tasks[1], RuntimeError("no GPUs"))
    assert log.getvalue().splitlines() == [
        "interlace-sweep: [1/2] t fifo default seed 0: avg JCT 2.00 h in 1.0 s",
        "interlace-sweep: [2/2] t srsf default seed 0: failed: RuntimeError: no GPUs"]


def test_the_example_plug_in_runs_in_a_sweep_by_its_names(tmp_path):
    """Installed (a dist-info with the example's entry point, as pip writes it) it is run by
    its registered name; and by package.module:Class. Each pool process resolves the name."""
    site = tmp_path / "site"
    info = site / "interlace_policy_example-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: interlace-policy-example\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(
        "[interlace.policies]\nlargest-first = interlace_policy_example.policy:LargestFirst\n")
    example = ROOT / "examples" / "interlace-policy-example" / "src"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, (ROOT, site, example)))}
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "scheduler.tools.sweep", "--traces", "default", "--spec", SPEC,
         "--policies", "largest-first,interlace_policy_example.policy:LargestFirst,fifo",
         "--seeds", "2", "--jobs", "2", "--no-report", "--out", str(out)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    rows = {(r["policy"], r["seed"]): r for r in read_rows(out)}
    assert len(rows) == 6
    for seed in ("0", "1"):
        plug_in = rows[("largest-first", seed)]
        assert without_wall([plug_in])[0] | {"policy": ""} == \
            without_wall([rows[("interlace_policy_example.policy:LargestFirst", seed)]])[0] \
            | {"policy": ""}  # the same class by either name
        assert plug_in["avg_jct_s"] != rows[("fifo", seed)]["avg_jct_s"]  # and not FIFO
