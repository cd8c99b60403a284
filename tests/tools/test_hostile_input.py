"""Hostile input on the command-line tools: every refusal is one line on stderr naming the
option, file or field and the bound broken (specs/limits.py), a non-zero exit, no traceback,
no hang and no memory blow-up; and no tool exits 0 with a figure computed from impossible
input. Each case runs the tool as a real process, as a user would."""
from __future__ import annotations

import contextlib
import io
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
TIME_LIMIT_S = 5.0  # a refusal is immediate; this leaves room for a loaded machine's imports
MEMORY_LIMIT_KB = 200 * 1024

ENTRY = {  # console script -> module:function (setup.cfg's entry points)
    "interlace-submit": "scheduler.tools.jobs:submit_main",
    "interlace-status": "scheduler.tools.jobs:status_main",
    "interlace-cancel": "scheduler.tools.jobs:cancel_main",
    "interlace-sim": "scheduler.sim.cli:main",
    "interlace-sweep": "scheduler.tools.sweep:main",
    "interlace-trace": "traces.cli:main",
    "interlace-keys": "broker.keys:main",
    "interlace-report": "scheduler.tools.report:main",
}
# runs an entry point as its console script does; reports its peak memory (KB) at exit on
# the descriptor HOSTILE_FD (VmHWM: this program's own; getrusage's maxrss would keep the
# parent's peak, which a vfork/exec child inherits on Linux);
# HOSTILE_BLOCK names modules to make unimportable (an extra that is not installed)
RUNNER = """\
import atexit, importlib, os, sys
for name in filter(None, os.environ.get("HOSTILE_BLOCK", "").split(",")):
    sys.modules[name] = None
def peak_kb():
    with open("/proc/self/status") as status:
        return next(line.split()[1] for line in status if line.startswith("VmHWM:"))
atexit.register(lambda: os.write(int(os.environ["HOSTILE_FD"]), peak_kb().encode()))
module, function = sys.argv[1].split(":")
sys.argv = sys.argv[2:]
sys.exit(getattr(importlib.import_module(module), function)())
"""

HEADER = ("job_id,num_gpu,submit_time,iterations,model_name,batch_size,duration,interval,"
          "iteration_time,resource_time_0,resource_time_1,resource_time_2,priority")
SPEC_HEADER = "num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node"
SUBMIT = ["interlace-submit", "--gpus", "1", "--iterations", "10", "--endpoints", "dead.json"]
GENERATE = ["interlace-trace", "generate", "--jobs", "5", "--seed", "1", "--out", "g.csv"]
ROWS = {  # spec rows that describe no cluster a simulator could hold
    "big.csv": "1,100000000,100000000,92,520",
    "wide.csv": "1,1,100000000,92,520",
    "long.csv": "1,100000000,8,92,520",
}


def _files(folder: Path) -> None:
    """The inputs the cases name, in `folder` (the working directory of each run)."""
    # an endpoints file naming ports nothing listens on: no running broker
    (folder / "dead.json").write_text(json.dumps(
        {"events_in": "tcp://127.0.0.1:1", "events_out": "tcp://127.0.0.1:2",
         "requests": "tcp://127.0.0.1:3"}))
    os.mkfifo(folder / "fifo")
    (folder / "junk.key").write_bytes(bytes(range(256)) * 2)
    for name, row in ROWS.items():
        (folder / name).write_text(f"{SPEC_HEADER}\n{row}\n")
    (folder / "huge.csv").write_text(
        f"{HEADER}\n0,4,0,999999999999999999,resnet18,32,1000,0,1e305,1,1,1,0\n")
    (folder / "late.csv").write_text(f"{HEADER}\n0,4,1e305,100,resnet18,32,1000,0,10,1,1,1,0\n")
    (folder / "hel.csv").write_text(
        "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,"
        "duration,queue\n1,u,vc1,1,4,1,COMPLETED,2020-04-01 00:00:00,2020-04-01 00:00:10,"
        "2020-04-01 01:00:00,3590,10\n")
    run = folder / "run"
    run.mkdir()
    (run / "scheduler.log").write_text("\n".join([
        '{"event": "scheduler_start", "policy": "fifo", "gpus": 8, "time_scale": 1.0}',
        '{"event": "job_submitted", "job_id": 1, "submit": 0.0, "num_gpu": 1}',
        '{"event": "job_finished", "job_id": 1, "submit": 0.0, "start": 1.0, "end": Infinity}',
        '{"event": "job_finished", "job_id": 2, "submit": NaN, "start": 1.0, "end": 5.0}',
    ]) + "\n")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("hostile")
    _files(folder)
    return folder


def run_tool(argv: list[str], cwd: Path, block: str = "") -> tuple[int, str, str, float, int]:
    """(exit status, stdout, stderr, seconds, peak KB) of one console script's run."""
    read, write = os.pipe()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HOSTILE_BLOCK": block, "HOSTILE_FD": str(write),
           "OMP_NUM_THREADS": "1", "INTERLACE_ENDPOINTS": "", "INTERLACE_CLIENT_KEY": ""}
    start = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-c", RUNNER, ENTRY[argv[0]], *argv], cwd=cwd,
                              env=env, capture_output=True, text=True, timeout=20,
                              pass_fds=(write,))
    finally:
        os.close(write)
    with os.fdopen(read) as peak:
        kb = int(peak.read() or 0)
    return proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start, kb


CASES = [  # (id, argv, what the one line must name, lines on stderr)
    ("submit-timeout-inf", SUBMIT + ["--timeout", "inf"], "--timeout", 1),
    ("submit-timeout-1e308", SUBMIT + ["--timeout", "1e308"], "--timeout", 1),
    ("submit-job-id", SUBMIT + ["--job-id", "99999999999999999999999"], "--job-id", 1),
    ("cancel-job-id", ["interlace-cancel", "--endpoints", "dead.json",
                       "99999999999999999999999"], "JOB", 1),
    ("submit-key-missing", SUBMIT + ["--client-key", "missing.key"], "--client-key", 1),
    ("status-key-folder", ["interlace-status", "--endpoints", "dead.json", "--client-key",
                           "run"], "--client-key", 1),
    ("cancel-key-junk", ["interlace-cancel", "--endpoints", "dead.json", "--client-key",
                         "junk.key", "3"], "--client-key", 1),
    ("sweep-no-dask", ["interlace-sweep", "--traces", "default", "--policies", "fifo",
                       "--out", "sweep", "--dask", "tcp://127.0.0.1:1"], "dask extra", 1),
    ("generate-interarrival", GENERATE + ["--mean-interarrival", "1e308"],
     "--mean-interarrival", 1),
    ("generate-sigma", GENERATE + ["--duration-sigma", "1e308"], "--duration-sigma", 1),
    ("generate-median", GENERATE + ["--median-duration", "1e308"], "--median-duration", 1),
    ("generate-max", GENERATE + ["--max-duration", "1e308"], "--max-duration", 1),
    # two fields broken, each said in its own line (one line per problem, as for traces)
    ("sim-spec-big", ["interlace-sim", "--spec", "big.csv"], "num_gpu_p_node", 2),
    ("sim-spec-wide", ["interlace-sim", "--spec", "wide.csv"], "num_gpu_p_node", 1),
    ("sim-spec-long", ["interlace-sim", "--spec", "long.csv"], "num_node_p_switch", 1),
    ("sweep-spec-big", ["interlace-sweep", "--traces", "default", "--policies", "fifo",
                        "--out", "sweep", "--spec", "wide.csv"], "num_gpu_p_node", 1),
    ("sweep-seeds", ["interlace-sweep", "--traces", "default", "--policies", "fifo",
                     "--out", "sweep", "--seeds", "99999999999"], "--seeds", 1),
    ("keys-count", ["interlace-keys", "generate", "keys", "--clients", "a", "--count",
                    "99999999999"], "--count", 1),
    ("validate-fifo", ["interlace-trace", "validate", "fifo"], "not a regular file", 1),
    ("sim-trace-fifo", ["interlace-sim", "--trace", "fifo"], "not a regular file", 1),
    ("sim-spec-fifo", ["interlace-sim", "--spec", "fifo"], "not a regular file", 1),
    ("submit-endpoints-fifo", ["interlace-submit", "--gpus", "1", "--iterations", "10",
                               "--endpoints", "fifo"], "not a regular file", 1),
    ("status-endpoints-fifo", ["interlace-status", "--endpoints", "fifo"],
     "not a regular file", 1),
    ("validate-huge-job", ["interlace-trace", "validate", "huge.csv"], "iteration_time", 2),
    ("sim-huge-job", ["interlace-sim", "--trace", "huge.csv"], "iterations", 2),
    ("sim-restart-overhead", ["interlace-sim", "--restart-overhead", "1e308"],
     "--restart-overhead", 1),
    ("validate-late-submit", ["interlace-trace", "validate", "late.csv"], "submit_time", 1),
    ("import-over-source", ["interlace-trace", "import", "helios", "hel.csv", "--out",
                            "hel.csv"], "--out", 1),
    ("sim-out-proc", ["interlace-sim", "--out", "/proc/nope"], "--out", 1),
    ("report-infinity", ["interlace-report", "run", "--json"], "finite", 1),
]


@pytest.mark.parametrize("argv, names, lines", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_hostile_input_is_one_line(inputs, argv, names, lines):
    block = "distributed,dask" if "--dask" in argv else ""
    code, out, err, seconds, kb = run_tool(argv, inputs, block)
    assert code != 0, out
    assert "Traceback" not in err and "Warning" not in err, err
    said = err.splitlines()
    assert len(said) == lines and names in err, err
    assert seconds < TIME_LIMIT_S and kb < MEMORY_LIMIT_KB, (seconds, kb)


def test_import_left_its_source_alone(inputs):
    assert (inputs / "hel.csv").read_text().startswith("job_id,user,vc")


def test_a_generated_trace_runs_on_the_default_cluster(tmp_path):
    """A new user's first steps: generate with defaults, validate, simulate, no options."""
    code, _, err, _, _ = run_tool(["interlace-trace", "generate", "--jobs", "500", "--seed",
                                   "7", "--out", "gen.csv"], tmp_path)
    assert code == 0, err
    assert run_tool(["interlace-trace", "validate", "gen.csv"], tmp_path)[0] == 0
    code, out, err, _, _ = run_tool(["interlace-sim", "--trace", "gen.csv", "--policy", "fifo",
                                     "--json"], tmp_path)
    assert code == 0 and json.loads(out)["jobs"] == 500, err


def test_a_trace_for_a_bigger_cluster_is_one_line_naming_the_way_out(tmp_path):
    """validate without --spec checks the simulator's default cluster, and every job too
    large for it is one line for all, naming --spec and --max-gpus."""
    from traces.cli import main

    assert main(["generate", "--jobs", "500", "--seed", "7", "--out", str(tmp_path / "g.csv"),
                 "--max-gpus", "32"]) == 0
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main(["validate", str(tmp_path / "g.csv")]) == 1
    (line,) = err.getvalue().splitlines()
    assert "cluster's 16" in line and "--spec" in line and "--max-gpus 16" in line


def test_docs_state_the_limits():
    """docs/traces.md's table shows the bounds specs/limits.py enforces."""
    from specs import limits

    text = (ROOT / "docs" / "traces.md").read_text(encoding="utf-8")
    table = text.split("## Limits", 1)[1].split("\n## ", 1)[0]
    for shown in ("1e6 s", "1e9 s", "1e15", "2**53", "2**31 - 1", str(limits.MAX_NODES),
                  f"| {limits.MAX_GPUS_PER_NODE} |", str(limits.MAX_CPUS), "3600 s",
                  str(limits.MAX_RETRIES), str(limits.MAX_JOBS), str(limits.MAX_KEYS),
                  "2**63 - 1", f"{limits.MAX_SEEDS}, {limits.MAX_PROCESSES}"):
        assert shown in table, shown
    assert (limits.MAX_SECONDS, limits.MAX_TRACE_SECONDS, limits.MAX_ITERATIONS) == (
        1e6, 1e9, 10**15)
    assert (limits.MAX_ID, limits.MAX_BATCH_SIZE, limits.MAX_SEED) == (
        2**53, 2**31 - 1, 2**63 - 1)


# -- property: random numeric options and small input files --------------------------------

HOSTILE = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(-10**30, 10**30).map(str),
    st.sampled_from(["nan", "inf", "-inf", "1e308", "-1e308", "1e-320", "-0", "0", "1",
                     "0x10", "", "1_000", "9" * 5000, "1e999999"]),
)
SMALL = st.integers(1, 40).map(str)  # counts kept small where a valid one means real work


def _call(main, argv: list[str]) -> tuple[int, str, str, float]:
    """main(argv) in this process: (exit status, stdout, stderr, seconds)."""
    out, err = io.StringIO(), io.StringIO()
    start = time.monotonic()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
    return code, out.getvalue(), err.getvalue(), time.monotonic() - start


def _no_impossible_figure(text: str) -> None:
    for word in ("nan", "inf", "NaN", "Infinity"):
        assert word not in text.replace("interlace", "").split(), text


@pytest.fixture(scope="module")
def special_files(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("special")
    os.mkfifo(folder / "fifo")
    return {"fifo": folder / "fifo", "folder": folder, "device": Path("/dev/null")}


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(option=st.sampled_from(["--mean-interarrival", "--median-duration",
                               "--duration-sigma", "--min-duration", "--max-duration",
                               "--max-gpus", "--seed", "--jobs"]),
       value=HOSTILE, jobs=SMALL)
def test_generate_never_crashes_and_writes_only_valid_traces(tmp_path_factory, option, value,
                                                             jobs):
    from traces.cli import main

    out = tmp_path_factory.mktemp("gen") / "g.csv"
    argv = ["generate", "--jobs", jobs, "--seed", "1", "--out", str(out), option, value]
    code, _, err, seconds = _call(main, argv)
    assert "Traceback" not in err and "internal error" not in err and seconds < TIME_LIMIT_S
    if code == 0:  # what generate writes, validate accepts
        assert _call(main, ["validate", str(out), "--spec", "n64g8"])[0] == 0
    else:
        assert len(err.splitlines()) == 1 and option in err, err


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(column=st.integers(0, 12), value=HOSTILE, spec_column=st.integers(0, 4),
       spec_value=st.one_of(HOSTILE, st.integers(1, 64).map(str)),
       overhead=st.one_of(HOSTILE, st.just("30")),
       special=st.sampled_from([None, None, None, "fifo", "folder", "device"]))
def test_sim_never_crashes_nor_reports_an_impossible_figure(
        tmp_path_factory, special_files, column, value, spec_column, spec_value, overhead,
        special):
    from scheduler.sim.cli import main

    folder = tmp_path_factory.mktemp("sim")
    rows = [[str(i), "1", str(i * 1000), "100", "resnet18", "32", "10000", "1000", "100",
             "30", "50", "20", "0"] for i in range(3)]
    rows[1][column] = value
    trace = folder / "t.csv"
    trace.write_text("\n".join([HEADER, *(",".join(r) for r in rows)]) + "\n")
    spec_row = ["1", "2", "8", "92", "520"]
    spec_row[spec_column] = spec_value
    spec = folder / "s.csv"
    spec.write_text(f"{SPEC_HEADER}\n{','.join(spec_row)}\n")
    if special is not None:
        trace = special_files[special]
    code, out, err, seconds = _call(main, ["--trace", str(trace), "--spec", str(spec),
                                           "--policy", "fifo,muri-s", "--json",
                                           "--restart-overhead", overhead])
    assert "Traceback" not in err and seconds < TIME_LIMIT_S, err
    if code == 0:
        for line in out.splitlines():
            figures = json.loads(line, parse_constant=lambda c: pytest.fail(c))
            assert all(math.isfinite(v) for v in figures.values()
                       if isinstance(v, (int, float)) and not isinstance(v, bool))
        _no_impossible_figure(out)
    else:
        assert err.strip(), "a refusal says why"
