"""Simulator speed against the published artifact, and one planning round's latency.

Run from the repository root:  python bench/bench_sim.py [--artifact DIR] [--skip-large]
Scaling mode (bench/scaling.py):  python bench/bench_sim.py --scaling [--sizes 1000,10000,100000]
    [--policies fifo,...] [--preset default] [--limit S] [--artifact DIR] [--artifact-limit S]
    [--out DIR]: 1k, 10k, 100k generated jobs at one offered load on clusters in proportion
    (100,000 jobs on 2,048 GPUs), each run in its own process (peak RSS, a time cap); a table,
    scaling.csv/.json and a log-log plot of time per event.
Side by side, the fast policies against the artifact:
    python bench/bench_sim.py --fast-policies --artifact DIR [--artifact-python PY]
    [--traces trace1,trace2,trace4] [--policies srtf,srsf,tiresias,antman] [--repeat N]: the
    fast policies on the artifact's own traces (DIR/trace-data, spec n8g8), ours and the
    artifact one after the other in this run, each in a fresh process; see `side_by_side`.

Speed targets: Muri-S on trace3 < 1.5 s and on trace3_pr < 5 s, Themis on trace3 < 10 s,
SRSF on trace3 < 0.5 s, a generated 20,000-job trace on 512 GPUs < 60 s for Muri-S, and one
Muri planning round over 256 candidate jobs < 100 ms.

The baseline is the artifact's own simulator. With `--artifact DIR` (a checkout of the
artifact's `simulator/` folder, never part of this repository) it is timed in the same run;
without it the ratios use the artifact times measured once on this machine shape (2 cores),
given below. The reference traces are read from ../shared/reference/ and skipped if absent.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scheduler.core.engine import Core  # noqa: E402
from scheduler.core.policies import POLICIES  # noqa: E402
from scheduler.plugins import make_policy  # noqa: E402
from scheduler.presets import get_preset  # noqa: E402
from scheduler.sim.simulator import simulate  # noqa: E402
from specs import load_spec, spec_path  # noqa: E402
from traces import read_trace, write_trace  # noqa: E402
from traces.generate import generate  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scaling  # noqa: E402
import subrun  # noqa: E402

REFERENCE = ROOT.parent / "shared" / "reference"
# (trace, policy, artifact schedule name, artifact seconds quoted by the issue, target seconds)
CASES = [
    ("trace3", "srsf", "shortest-gpu", 7.0, 0.5),
    ("trace3", "muri-s", "multi-resource-blossom-same-gpu", 117.0, 1.5),
    ("trace3_pr", "muri-s", "multi-resource-blossom-same-gpu", 480.0, 5.0),
    ("trace3", "themis", "themis", 1000.0, 10.0),
]


def time_artifact(artifact: Path, trace: str, schedule: str,
                  python: str = sys.executable) -> float:
    with tempfile.TemporaryDirectory() as logs:
        start = time.perf_counter()
        subprocess.run([python, "run_sim.py", f"--cluster_spec={REFERENCE / 'n8g8.csv'}",
                        "--scheme=yarn", f"--trace_file={REFERENCE / (trace + '.csv')}",
                        f"--schedule={schedule}", f"--log_path={logs}", "--multi_resource", "4"],
                       cwd=artifact, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        return time.perf_counter() - start


def planning_round_ms(candidates: int = 256, repeats: int = 20, spec: str = "n8g8") -> float:
    """Median latency of one Muri-S round with `candidates` queued jobs."""
    preset = get_preset("default")
    records = generate(candidates, seed=11, max_gpus=8, backlog=True)
    samples = []
    for r in range(repeats):
        core = Core(load_spec(spec_path(spec)), make_policy("muri-s", preset), preset.model)
        for rec in records:
            core.submit(rec, 0.0)
        start = time.perf_counter()
        core.round(0.0)
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def steady_round_ms(queued: int, spec: str, arrivals: int = 20) -> float:
    """Median latency of the rounds a running scheduler makes as jobs keep arriving: what it
    learnt about candidate pairs in earlier rounds is still valid."""
    preset = get_preset("default")
    records = generate(queued + arrivals, seed=11, max_gpus=8, backlog=True)
    core = Core(load_spec(spec_path(spec)), make_policy("muri-s", preset), preset.model)
    for rec in records[:queued]:
        core.submit(rec, 0.0)
    core.round(0.0)
    samples = []
    for i, rec in enumerate(records[queued:], start=1):
        core.submit(rec, float(i))
        core.advance(float(i))
        start = time.perf_counter()
        core.round(float(i))
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


# our policy name -> the artifact's --schedule name (the fast policies: no matching, no LP)
FAST_POLICIES = {"srtf": "shortest", "srsf": "shortest-gpu", "tiresias": "dlas-gpu",
                 "antman": "antman"}
FAST_TRACES = ("trace1", "trace2", "trace4")
EXACT = 1e-9  # relative difference on average JCT that counts as the same result


def run_artifact(artifact: Path, python: str, trace: Path, schedule: str, spec: Path,
                 limit: float) -> tuple[subrun.ChildRun, float | None]:
    """One artifact run in a fresh process (its own CPU seconds via wait4); with its average
    JCT from its own per-job log (job.csv), or None when it failed."""
    with tempfile.TemporaryDirectory(prefix="bench-sim-") as tmp:
        log = Path(tmp) / "log"
        log.mkdir()
        run = subrun.run_capped(
            [python, str(artifact / "run_sim.py"), f"--cluster_spec={spec}", "--scheme=yarn",
             f"--trace_file={trace}", f"--schedule={schedule}", f"--log_path={log}",
             "--multi_resource", "4", "--autopack=False"], limit, cwd=tmp)
        jobs = log / "job.csv"
        if run.returncode != 0 or run.timed_out or not jobs.is_file():
            return run, None
        with open(jobs, newline="") as fh:
            rows = list(csv.DictReader(fh))
        return run, sum(float(r["JCT"]) for r in rows) / len(rows)


def run_ours(trace: Path, spec: Path, policy: str, limit: float) -> dict:
    """One run of ours in a fresh process (bench/sim_child.py, no warm-up): the whole
    process's CPU and wall seconds, and the simulation's own, measured inside it."""
    return subrun.simulate_capped({"trace_file": str(trace), "spec_file": str(spec),
                                   "policy": policy, "preset": "paper", "warm_up": False},
                                  limit)


def _ratio(theirs: float | None, ours: float | None) -> float | None:
    return round(theirs / ours, 1) if theirs is not None and ours else None


def artifact_startup(artifact: Path, python: str, trace: Path, policies: Sequence[str],
                     spec: Path, repeat: int = 1, limit: float = 600.0) -> dict:
    """policy -> the artifact's start-up run (imports, reading the spec, one job: the trace's
    first), the fastest of `repeat` by CPU; what its whole-process times are less of to give
    its simulation's."""
    startup: dict[str, subrun.ChildRun] = {}
    with tempfile.TemporaryDirectory(prefix="bench-sim-one-") as tmp:
        one = Path(tmp) / "one_job.csv"
        write_trace(one, read_trace(trace)[:1])
        for policy in policies:
            runs = [run_artifact(artifact, python, one, FAST_POLICIES[policy], spec, limit)[0]
                    for _ in range(repeat)]
            startup[policy] = min(runs, key=lambda r: r.cpu_s)
    return startup


def side_by_side(artifact: Path, python: str, traces: Sequence[str], policies: Sequence[str],
                 spec: Path = REFERENCE / "n8g8.csv", repeat: int = 1,
                 limit: float = 3600.0, trace_dir: Path | None = None) -> list[dict]:
    """Ours and the artifact on the same trace, one after the other in this run; per case
    the fastest of `repeat` runs of each (by CPU seconds).

    Whole process: each side's CPU (user + system) and wall seconds from start to exit.
    Simulation only: ours as timed inside the process around `simulate` (after imports and
    reading the trace); the artifact's cannot be timed inside, so it is its whole process
    minus its start-up, which is measured here, per policy, by a run on a 1-job trace (the
    trace's first job): imports (numpy, cvxpy), reading the spec, one job. Results must
    agree: average JCT within relative 1e-9 of the artifact's own job.csv. Traces are read
    from `trace_dir` (by default the artifact's own trace-data/).
    """
    trace_dir = artifact / "trace-data" if trace_dir is None else trace_dir
    rows = []
    startup = artifact_startup(artifact, python, trace_dir / f"{traces[0]}.csv", policies, spec,
                               repeat, limit)
    for trace in traces:
        path = trace_dir / f"{trace}.csv"
        for policy in policies:
            ours, theirs, theirs_avg, errors = None, None, None, []
            for _ in range(repeat):  # alternating, so that load drifts hit both alike
                mine = run_ours(path, spec, policy, limit)
                if "error" in mine:
                    errors.append(f"ours: {mine['error']}")
                elif ours is None or mine["child_cpu_s"] < ours["child_cpu_s"]:
                    ours = mine
                run, avg = run_artifact(artifact, python, path, FAST_POLICIES[policy],
                                        spec, limit)
                if avg is None:
                    errors.append(f"artifact: > {limit:g} s wall" if run.timed_out else
                                  f"artifact: exit {run.returncode}: "
                                  f"{run.stderr.strip()[-200:]}")
                elif theirs is None or run.cpu_s < theirs.cpu_s:
                    theirs, theirs_avg = run, avg
            row = _side_row(trace, policy, ours, theirs, theirs_avg, startup[policy])
            if errors and "error" in row:
                row["error"] += f" ({'; '.join(errors)})"
            rows.append(row)
    return rows


def _side_row(trace: str, policy: str, ours: dict | None, theirs: subrun.ChildRun | None,
              theirs_avg: float | None, startup: subrun.ChildRun) -> dict:
    row: dict = {"trace": trace, "policy": policy}
    if ours is None or theirs is None:
        row["error"] = "ours failed" if ours is None else "the artifact failed"
        return row
    rel = abs(ours["avg_jct"] - theirs_avg) / abs(theirs_avg)
    sim_cpu = max(theirs.cpu_s - startup.cpu_s, 0.0)
    sim_wall = max(theirs.wall_s - startup.wall_s, 0.0)
    row.update({
        "jobs": ours["jobs"], "rounds": ours["rounds"],
        "avg_jct_ours": ours["avg_jct"], "avg_jct_artifact": theirs_avg,
        "agree": rel <= EXACT, "avg_jct_rel_diff": rel,
        "process_cpu_s_ours": round(ours["child_cpu_s"], 3),
        "process_cpu_s_artifact": round(theirs.cpu_s, 3),
        "process_wall_s_ours": round(ours["child_wall_s"], 3),
        "process_wall_s_artifact": round(theirs.wall_s, 3),
        "sim_cpu_s_ours": round(ours["cpu_s"], 3),
        "sim_cpu_s_artifact": round(sim_cpu, 3),
        "sim_wall_s_ours": round(ours["wall_s"], 3),
        "sim_wall_s_artifact": round(sim_wall, 3),
        "artifact_startup_cpu_s": round(startup.cpu_s, 3),
        "ratio_process_cpu": _ratio(theirs.cpu_s, ours["child_cpu_s"]),
        "ratio_sim_cpu": _ratio(sim_cpu, ours["cpu_s"]),
    })
    return row


def print_side_by_side(rows: Sequence[dict], out=sys.stdout) -> None:
    """A table (CPU seconds; wall seconds in the JSON lines), then one JSON line per case."""
    head = (f"{'case':<16} {'agree':>5} {'proc ours':>9} {'proc art':>9} {'x proc':>6} "
            f"{'sim ours':>8} {'sim art':>8} {'x sim':>6}")
    print("CPU seconds, one after the other in this run; proc = the whole process (start-up,"
          " imports, reading the trace); sim art = the artifact's process minus its start-up"
          " (a 1-job trace run here)", file=out)
    print(head, file=out)
    for r in rows:
        case = f"{r['policy']} {r['trace']}"
        if "error" in r:
            print(f"{case:<16} {r['error']}", file=out)
            continue
        print(f"{case:<16} {str(r['agree']):>5} {r['process_cpu_s_ours']:>9.3f} "
              f"{r['process_cpu_s_artifact']:>9.3f} {r['ratio_process_cpu']:>6} "
              f"{r['sim_cpu_s_ours']:>8.3f} {r['sim_cpu_s_artifact']:>8.3f} "
              f"{r['ratio_sim_cpu']:>6}", file=out)
    for r in rows:
        print(json.dumps(r), file=out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--artifact", type=Path, help="the artifact's simulator/ folder, to time it here")
    ap.add_argument("--artifact-python", default=os.environ.get("ARTIFACT_PYTHON", sys.executable),
                    help="the Python that runs the artifact (needs numpy, cvxpy, ecos)")
    ap.add_argument("--skip-large", action="store_true", help="skip the 20,000-job run")
    side = ap.add_argument_group("side-by-side mode (fast policies against the artifact)")
    side.add_argument("--fast-policies", action="store_true",
                      help="time ours and the artifact (--artifact) side by side instead")
    side.add_argument("--traces", default=",".join(FAST_TRACES),
                      help="the artifact's traces (in DIR/trace-data), comma-separated")
    side.add_argument("--repeat", type=int, default=1, help="runs of each side per case")
    side.add_argument("--side-limit", type=float, default=3600.0,
                      help="wall seconds per run of either side (a loaded machine is slow)")
    side.add_argument("--trace-dir", type=Path,
                      help="where the traces are (default: the artifact's trace-data/)")
    scale = ap.add_argument_group("scaling mode")
    scale.add_argument("--scaling", action="store_true", help="run the scaling benchmark instead")
    scale.add_argument("--sizes", default=",".join(map(str, scaling.SIZES)),
                       help="comma-separated job counts")
    scale.add_argument("--policies", default=None,
                       help="comma-separated (default: every policy in scaling mode, the four "
                            "fast ones side by side)")
    scale.add_argument("--preset", default="default")
    scale.add_argument("--limit", type=float, default=300.0,
                       help="seconds per run of ours (shown as '> limit' past it)")
    scale.add_argument("--artifact-limit", type=float, default=300.0,
                       help="seconds per artifact run")
    scale.add_argument("--workers", type=int, default=1,
                       help="runs at a time (1 keeps the timings apart)")
    scale.add_argument("--out", type=Path, default=Path("out") / "scaling",
                       help="folder for scaling.csv, scaling.json, scaling.png")
    args = ap.parse_args()
    if args.fast_policies:
        if args.artifact is None or not (args.artifact / "run_sim.py").is_file():
            ap.error("--fast-policies needs --artifact DIR (the artifact's simulator/ folder)")
        policies = [p for p in (args.policies or ",".join(FAST_POLICIES)).split(",") if p]
        unknown = [p for p in policies if p not in FAST_POLICIES]
        if unknown:
            ap.error(f"unknown fast policies {unknown}; choose from {', '.join(FAST_POLICIES)}")
        rows = side_by_side(args.artifact, args.artifact_python,
                            [t for t in args.traces.split(",") if t], policies,
                            repeat=max(args.repeat, 1), limit=args.side_limit,
                            trace_dir=args.trace_dir)
        print_side_by_side(rows)
        return 0 if all(r.get("agree") for r in rows) else 1
    if args.scaling:
        args.policies = args.policies or ",".join(scaling.POLICIES)
        unknown = [p for p in args.policies.split(",") if p and p not in POLICIES]
        if unknown:
            ap.error(f"unknown policies {unknown}; choose from {', '.join(POLICIES)}")
        if args.artifact is not None and not (args.artifact / "run_sim.py").is_file():
            ap.error(f"no run_sim.py in {args.artifact}")
        return scaling.main(args)
    rows = []
    paper = get_preset("paper")
    if (REFERENCE / "n8g8.csv").is_file():
        spec = load_spec(REFERENCE / "n8g8.csv")
        for trace, policy, schedule, quoted, target in CASES:
            records = read_trace(REFERENCE / f"{trace}.csv")
            result = simulate(records, spec, policy, paper)
            baseline = (time_artifact(args.artifact, trace, schedule, args.artifact_python)
                        if args.artifact else quoted)
            rows.append({"case": f"{policy} {trace} (paper preset)", "seconds": round(result.wall_s, 3),
                         "target_s": target, "artifact_s": round(baseline, 1),
                         "speedup": round(baseline / result.wall_s, 1),
                         "baseline": "measured now" if args.artifact else "quoted"})
    else:
        print(f"reference traces not found at {REFERENCE}: skipping the artifact comparison",
              file=sys.stderr)
    if not args.skip_large:
        records = generate(20_000, seed=3, max_gpus=32, mean_interarrival=225.0)
        result = simulate(records, load_spec(spec_path("n64g8")), "muri-s", get_preset("default"))
        rows.append({"case": "muri-s 20,000 generated jobs, 512 GPUs (default preset)",
                     "seconds": round(result.wall_s, 2), "target_s": 60.0,
                     "rounds": result.rounds})
    rows.append({"case": "one muri-s planning round, 256 candidate jobs, 64 GPUs",
                 "seconds": round(planning_round_ms() / 1000, 4), "target_s": 0.1})
    rows.append({"case": "first (cold) muri-s round, 1,000 queued jobs, 64 nodes (512 GPUs)",
                 "seconds": round(planning_round_ms(1000, 3, "n64g8") / 1000, 4),
                 "target_s": 0.2})
    rows.append({"case": "steady muri-s round (one more arrival), 1,000 queued jobs, 64 nodes",
                 "seconds": round(steady_round_ms(1000, "n64g8") / 1000, 4), "target_s": 0.2})
    for row in rows:
        row["meets_target"] = row["seconds"] < row["target_s"]
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
