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
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
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
    "interlace-feed": "traces.feeder:main",
    "interlace-tail": "scheduler.tools.tail:main",
    "interlace-slurm": "scheduler.tools.slurm.cli:main",
    "interlace-spec": "specs.cli:main",
    "interlace-logs": "scheduler.tools.logs:main",
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
FEED = ["interlace-feed", "default", "--endpoints", "dead.json", "--retries", "0",
        "--wait-endpoints", "0"]
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
    (folder / "nodes.csv").write_text(
        "sn,cpu_milli,memory_mib,gpu,model\nn0,96000,393216,8,G2\nn1,32000,262144,0,\n")
    (folder / "huge.csv").write_text(
        f"{HEADER}\n0,4,0,999999999999999999,resnet18,32,1000,0,1e305,1,1,1,0\n")
    (folder / "late.csv").write_text(f"{HEADER}\n0,4,1e305,100,resnet18,32,1000,0,10,1,1,1,0\n")
    (folder / "hel.csv").write_text(
        "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,"
        "duration,queue\n1,u,vc1,1,4,1,COMPLETED,2020-04-01 00:00:00,2020-04-01 00:00:10,"
        "2020-04-01 01:00:00,3590,10\n")
    for name, (submit, start, end) in {"negative": (0, 1, -5), "order": (50, 1, 9)}.items():
        (folder / name).mkdir()
        (folder / name / "scheduler.log").write_text(
            '{"event": "job_submitted", "job_id": 1, "submit": 0.0, "num_gpu": 1}\n'
            f'{{"event": "job_finished", "job_id": 1, "submit": {submit}, "start": {start}, '
            f'"end": {end}}}\n')
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
    # a trace clock below 0, or a job that ends before it starts, made a negative JCT
    ("report-negative", ["interlace-report", "negative", "--json"], "end -5", 1),
    ("report-out-of-order", ["interlace-report", "order", "--json"], "out of order", 1),
    # the feeder's numbers were plain floats: a request waited 4371 s on a dead broker
    ("feed-timeout", FEED + ["--timeout", "4371"], "--timeout", 1),
    ("feed-time-scale-inf", FEED + ["--time-scale", "inf"], "--time-scale", 1),
    ("feed-time-scale-zero", FEED + ["--time-scale", "0"], "--time-scale", 1),
    ("feed-endpoints-fifo", ["interlace-feed", "default", "--endpoints", "fifo",
                             "--wait-endpoints", "0"], "not a regular file", 1),
    ("tail-job-nan", ["interlace-tail", "run", "--job", "nan"], "--job", 1),
    # interlace-slurm's were too: a GPU list of 10**11 ids, a node count sbatch was given
    ("slurm-agent-gpus", ["interlace-slurm", "agent", "--node", "n0", "--run-dir", "r",
                          "--gpus-per-node", "99999999999", "--cpus", "1", "--mem", "1",
                          "--time-scale", "1"], "--gpus-per-node", 1),
    ("slurm-submit-nodes", ["interlace-slurm", "submit", "--nodes", "-1"], "--nodes", 1),
    ("slurm-run-time-scale", ["interlace-slurm", "run", "--time-scale", "nan"],
     "--time-scale", 1),
    ("spec-import-fifo", ["interlace-spec", "import", "openb", "fifo", "--out", "new.csv"],
     "not a regular file", 1),
    ("spec-import-gpu-mem", ["interlace-spec", "import", "openb", "nodes.csv", "--out",
                             "new.csv", "--gpu-mem", "G2=inf"], "--gpu-mem", 1),
    ("spec-show-big", ["interlace-spec", "show", "big.csv"], "num_gpu_p_node", 2),
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


def test_tail_shows_a_line_whose_time_no_clock_shows(tmp_path):
    """A log line stamped inf, NaN or year 3e12 is shown like a line that is not JSON: it
    once stopped interlace-tail with a traceback (datetime overflow) before any line."""
    (tmp_path / "scheduler.log").write_text(
        '{"ts": 1e400, "event": "a"}\n{"ts": NaN, "event": "b"}\n{"ts": 1e20, "event": "c"}\n'
        '{"ts": "2024-01-01T00:00:00Z", "event": "d"}\n')
    code, out, err, seconds, _ = run_tool(["interlace-tail", str(tmp_path)], tmp_path)
    assert code == 0 and not err and seconds < TIME_LIMIT_S, err
    assert [line.split()[2] for line in out.splitlines()] == ["a", "b", "c", "d"], out


def test_the_property_reaches_every_console_script():
    """TOOLS names every console script of setup.cfg, so a new tool joins the property."""
    import configparser

    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    scripts = {line.split("=")[0].strip() for line in
               config["options.entry_points"]["console_scripts"].strip().splitlines()}
    assert {tool.split()[0] for tool in TOOLS} == scripts


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
                  "2**63 - 1", f"{limits.MAX_SEEDS}, {limits.MAX_PROCESSES}",
                  "1e6, and at least 1e-6"):
        assert shown in table, shown
    assert (limits.MAX_SECONDS, limits.MAX_TRACE_SECONDS, limits.MAX_ITERATIONS,
            limits.MAX_TIME_SCALE) == (1e6, 1e9, 10**15, 1e6)
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


# -- property: every console script, one hostile option or input file ----------------------

BROKER = ["--endpoints", "dead.json", "--timeout", "0.2", "--retries", "0"]
# script (and subcommand) -> (entry point, the minimal valid argv, numeric options, file
# options). A file option is an option, or a token of the argv that names a positional file;
# LOG is the run's scheduler.log (RUN the run dir); OUT/ is a fresh folder for what is written.
TOOLS = {
    "interlace-sim": ("scheduler.sim.cli:main",
                      ["--trace", "t.csv", "--spec", "s.csv", "--policy", "fifo", "--json"],
                      ["--restart-overhead"], ["--trace", "--spec"]),
    "interlace-trace generate": (
        "traces.cli:main", ["generate", "--jobs", "5", "--seed", "1", "--out", "OUT/g.csv"],
        ["--jobs", "--seed", "--max-gpus", "--mean-interarrival", "--median-duration",
         "--duration-sigma", "--min-duration", "--max-duration"], []),
    "interlace-trace validate": ("traces.cli:main", ["validate", "t.csv", "--spec", "s.csv"],
                                 [], ["t.csv", "--spec"]),
    "interlace-trace import": ("traces.cli:main",
                               ["import", "helios", "hel.csv", "--out", "OUT/i.csv"],
                               ["--seed", "--limit", "--since", "--until"], ["hel.csv"]),
    "interlace-feed": ("traces.feeder:main",
                       ["t.csv", *BROKER, "--patience", "0", "--wait-endpoints", "0"],
                       ["--time-scale", "--timeout", "--retries", "--patience", "--poll",
                        "--wait-timeout", "--wait-endpoints"],
                       ["t.csv", "--endpoints", "--client-key"]),
    "interlace-tail": ("scheduler.tools.tail:main", ["RUN"], ["--job"], ["RUN", "LOG"]),
    "interlace-report": ("scheduler.tools.report:main", ["RUN", "--json"], [], ["RUN", "LOG"]),
    "interlace-sweep": ("scheduler.tools.sweep:main",
                        ["--traces", "t.csv", "--policies", "fifo", "--spec", "s.csv",
                         "--out", "OUT/sweep", "--no-report"],
                        ["--seeds", "--jobs", "--dask-timeout"], ["--traces", "--spec"]),
    "interlace-keys generate": ("broker.keys:main", ["generate", "OUT/keys", "--clients", "a"],
                                ["--count"], []),
    "interlace-submit": ("scheduler.tools.jobs:submit_main",
                         ["--gpus", "1", "--iterations", "10", *BROKER],
                         ["--gpus", "--iterations", "--iteration-time", "--priority",
                          "--job-id", "--timeout", "--retries"], ["--endpoints", "--client-key"]),
    "interlace-status": ("scheduler.tools.jobs:status_main", [*BROKER, "--", "JOB"],
                         ["JOB", "--timeout", "--retries"], ["--endpoints", "--client-key"]),
    "interlace-cancel": ("scheduler.tools.jobs:cancel_main", [*BROKER, "--", "JOB"],
                         ["JOB", "--timeout", "--retries"], ["--endpoints", "--client-key"]),
    "interlace-logs": ("scheduler.tools.logs:main", ["--run-dir", "RUN", "--", "JOB"], ["JOB"],
                       ["RUN"]),
    "interlace-slurm run": ("scheduler.tools.slurm.cli:main", ["run"],
                            ["--time-scale", "--gpus-per-node", "--stop-timeout"], []),
    "interlace-slurm agent": ("scheduler.tools.slurm.cli:main",
                              ["agent", "--node", "n0", "--run-dir", "OUT/run",
                               "--gpus-per-node", "1", "--cpus", "1", "--mem", "1",
                               "--time-scale", "1"],
                              ["--gpus-per-node", "--cpus", "--mem", "--time-scale"], []),
    "interlace-spec import": ("specs.cli:main",
                              ["import", "openb", "nodes.csv", "--out", "OUT/s.csv"], [],
                              ["nodes.csv"]),
    "interlace-spec show": ("specs.cli:main", ["show", "s.csv", "--json"], [], ["s.csv"]),
    # RUN stands for a folder with no testbed in it: every run ends in a refusal, quickly
    "interlace-calibrate": ("scheduler.tools.calibrate:main", ["RUN", "--no-cv"],
                            ["--round-interval"], ["RUN"]),
    "interlace-slurm submit": ("scheduler.tools.slurm.cli:main", ["submit", "--nodes", "1"],
                               ["--nodes", "--gpus-per-node", "--emulate-gpus", "--warn"], []),
}
# options whose valid values mean real work or a real wait (a timeout the user asked for):
# a valid value past the first number is drawn as that number, so each example stays short,
# while values past the bound (the refusals under test) are left as drawn
TAME = {"--jobs": 2, "--seeds": 3, "--count": 3, "--limit": 40, "--timeout": 0.2,
        "--retries": 1, "--patience": 0.2, "--wait-endpoints": 0.2, "--stop-timeout": 1,
        "--nodes": 4, "--gpus-per-node": 8, "--emulate-gpus": 8, "--cpus": 8, "--mem": 8}
FILE_KINDS = ("missing", "folder", "fifo", "device", "empty", "binary", "text", "json", "log")
JSON_NUMBER = st.one_of(st.floats(allow_nan=True, allow_infinity=True).map(json.dumps),
                        st.integers(-10**30, 10**30).map(str),
                        st.sampled_from(["1e400", "-0", '"junk"', "null", "[]", "true"]))
LOG_FIELDS = ("ts", "time_scale", "gpus", "submit", "start", "end", "num_gpu", "job_id", "now")


def _log(field: str, value: str) -> str:
    """A short live run's scheduler.log with `value` (JSON) in place of one field."""
    lines = [
        {"ts": '"2024-01-01T00:00:00Z"', "event": '"scheduler_start"', "policy": '"fifo"',
         "gpus": "8", "time_scale": "1.0"},
        {"ts": '"2024-01-01T00:00:01Z"', "event": '"job_submitted"', "job_id": "1",
         "submit": "0.0", "num_gpu": "1"},
        {"ts": '"2024-01-01T00:00:02Z"', "event": '"job_started"', "job_id": "1",
         "submit": "0.0", "now": "1.0", "num_gpu": "1"},
        {"ts": '"2024-01-01T00:00:09Z"', "event": '"job_finished"', "job_id": "1",
         "submit": "0.0", "start": "1.0", "end": "9.0"},
    ]
    for line in lines:
        if field in line:
            line[field] = value
    return "\n".join("{" + ", ".join(f'"{k}": {v}' for k, v in line.items()) + "}"
                     for line in lines) + "\n"


def _hostile_file(path: Path, kind: str, special: dict[str, Path], value: str, field: str) -> None:
    """Make `path` the kind of bad input file `kind` names (missing: nothing there)."""
    if kind in ("fifo", "device"):
        path.symlink_to(special[kind])
    elif kind == "folder":
        path.mkdir()
    elif kind != "missing":
        path.write_bytes({"empty": b"", "binary": bytes(range(256)) * 4,
                          "text": b"hello\nworld,1,2\n",
                          "json": ('{"ts": %s, "event": "x", "job_id": 1, "events_in": %s}\n'
                                   % (value, value)).encode(),
                          "log": _log(field, value).encode()}[kind])


def _with(argv: list[str], option: str, value: str) -> list[str]:
    """argv with `option`'s value (or the positional token `option`) set to `value`; as
    --option=VALUE, so a negative number reaches the option rather than reading as one."""
    argv = list(argv)
    if option in argv and option.startswith("-"):
        at = argv.index(option)
        argv[at:at + 2] = [f"{option}={value}"]
    elif option in argv:
        argv[argv.index(option)] = value
    else:  # before a "--" that ends the options
        argv.insert(argv.index("--") if "--" in argv else len(argv), f"{option}={value}")
    return argv


def _tame(option: str, value: str) -> str:
    from specs import limits

    bound = {"--jobs": limits.MAX_JOBS, "--seeds": limits.MAX_SEEDS, "--count": limits.MAX_KEYS,
             "--limit": limits.MAX_ID, "--retries": limits.MAX_RETRIES}.get(
        option, limits.MAX_WAIT_S if option in ("--timeout", "--patience", "--wait-endpoints",
                                                 "--stop-timeout") else limits.MAX_GPUS)
    try:
        number = float(value)
    except ValueError:
        return value
    if option in TAME and math.isfinite(number) and TAME[option] < number <= bound:
        return str(TAME[option])
    return value


def _finite_number(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


class _Hang(Exception):
    """An example ran past the bound: a hang, said as a failure rather than waited on."""


@contextlib.contextmanager
def _bounded(seconds: float):
    """Fail the example after `seconds` (SIGALRM: the tools run in this, the main, thread);
    puts back the signal handlers and log handlers a tool installs for itself."""
    import logging

    def expire(*_):
        raise _Hang(f"still running after {seconds} s")

    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM,
                                                     signal.SIGUSR1)}
    handlers = list(logging.getLogger().handlers)
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        for sig, handler in saved.items():
            signal.signal(sig, handler)
        logging.getLogger().handlers[:] = handlers


def _no_exec(path, argv):
    """os.execv for `interlace-slurm agent`: print what would run instead of becoming it."""
    print(" ".join(argv))
    raise SystemExit(0)


@settings(max_examples=60, deadline=None, derandomize=True,
          phases=[Phase.explicit, Phase.generate],  # shrinking a hang costs minutes per step
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(target=st.sampled_from([(tool, option) for tool, (_, _, numeric, files) in TOOLS.items()
                                for option in numeric + files]), value=HOSTILE,
       json_value=JSON_NUMBER, kind=st.sampled_from(FILE_KINDS),
       field=st.sampled_from(LOG_FIELDS))
def test_every_tool_survives_hostile_options_and_files(
        tmp_path_factory, special_files, target, value, json_value, kind, field):
    """Any console script, one of its numeric options or input files made hostile: never a
    traceback, never a hang, never exit 0 with a non-finite figure; and a value that is no
    finite number, or a file that cannot be read as one, is refused naming the option or
    the file."""
    import importlib
    from unittest import mock

    tool, option = target  # each option of each tool equally likely, not each tool
    entry, argv, numeric, files = TOOLS[tool]
    folder = tmp_path_factory.mktemp("tool")
    _files(folder)
    rows = [[str(i), "1", str(i * 1000), "100", "resnet18", "32", "10000", "1000", "100",
             "30", "50", "20", "0"] for i in range(3)]
    (folder / "t.csv").write_text("\n".join([HEADER, *(",".join(r) for r in rows)]) + "\n")
    (folder / "s.csv").write_text(f"{SPEC_HEADER}\n1,2,8,92,520\n")
    (folder / "RUN").mkdir()
    (folder / "RUN" / "scheduler.log").write_text(_log("policy", '"fifo"'))
    (folder / "OUT").mkdir()
    if option in numeric:
        value = _tame(option, value)
        bad, named = not _finite_number(value), option
        argv = _with(argv, option, value)
    else:
        # a run dir must be a folder; any other input, a readable regular file
        bad = kind != "folder" if option == "RUN" else kind in (
            "missing", "folder", "fifo", "device", "binary")
        named = option
        if option == "LOG":
            path = folder / "RUN" / "scheduler.log"
            path.unlink()
            bad = False  # tail shows what it can read; report says why it cannot score
        else:
            path = folder / f"hostile-{kind}"
            argv = _with(argv, option, str(path))
            named = path.name
        _hostile_file(path, kind, special_files, json_value, field)
    argv = ["3" if a == "JOB" else a.replace("OUT/", str(folder / "OUT") + "/") for a in argv]
    module, function = entry.split(":")
    main = getattr(importlib.import_module(module), function)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(PATH=str(folder / "OUT"), INTERLACE_ENDPOINTS="", INTERLACE_CLIENT_KEY="")
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        with mock.patch.dict(os.environ, env, clear=True), mock.patch("os.execv", _no_exec), \
                _bounded(2 * TIME_LIMIT_S):
            code, out, err, seconds = _call(main, argv)
    finally:
        os.chdir(cwd)
    assert "Traceback" not in err and seconds < TIME_LIMIT_S, (argv, err, seconds)
    if code == 0:
        if tool != "interlace-tail":  # tail prints the log's own words, computes nothing
            _no_impossible_figure(out + " " + err)
        if "--json" in argv:  # every figure of the summary is a time, count or share
            for line in out.splitlines():
                figures = json.loads(line, parse_constant=lambda c: pytest.fail(f"{argv}: {c}"))
                assert all(v >= 0 for v in figures.values() if isinstance(v, (int, float))), (
                    argv, line)
        assert not bad, (argv, out, err)
    else:
        assert err.strip(), f"{argv}: a refusal says why"
        if bad:
            assert named in err, (argv, err)
