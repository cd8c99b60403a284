"""Our `paper` preset against the published Muri numbers, as a table.

Run from the repository root:
    python bench/fidelity.py [--traces trace3,trace3_pr] [--policies ...]
    python bench/fidelity.py --all [--trace-dir DIR] [--jobs N] [--limit S]
        [--themis-solver bisection] [--artifact DIR]

Reads the artifact's traces and published figures from ../shared/reference/ (never part of
this repository) and prints, per trace and policy, our avg / p99 JCT and makespan, the
published ones where there are any, the relative errors and our wall time. `--all` runs every
trace of the artifact's set that is present (trace1..4 and their _pr variants, looked for in
../shared/reference/ and in --trace-dir, e.g. the artifact's simulator/trace-data) on the
n8g8 cluster, each run in its own process, N at a time and capped at --limit seconds.

With `--artifact DIR` (a checkout of the artifact, Rivendile/Muri) `--all` runs every
published value of Figs. 9-13 instead, read from the artifact's draw scripts
(artifact_figures.py), each with the settings its figure was made with (Fig. 11's
ablations, Fig. 12's group sizes, Fig. 13's auto-unpack), on the artifact's own traces; the
table gives each value, ours, the error, and a count per figure.

Themis under `paper` solves the artifact's program with ECOS at every event, which makes it
most of the table's time (more than an hour on 2 cores; see README). `--themis-solver
bisection` runs it with the `default` preset's bisection instead: the same optimal worst
ratio, but another optimum where there are many, so its rows are no longer the artifact's
runs; the table says so.
"""
from __future__ import annotations

import argparse
import csv
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from scheduler.core.policies.themis import SOLVERS  # noqa: E402
from scheduler.presets import get_preset  # noqa: E402
from scheduler.sim.simulator import simulate  # noqa: E402
from specs import load_spec, spec_path  # noqa: E402
from traces import read_trace  # noqa: E402

import artifact_figures  # noqa: E402
import subrun  # noqa: E402

REFERENCE = ROOT.parent / "shared" / "reference"
POLICIES = ["srtf", "srsf", "tiresias", "themis", "antman", "muri-s", "muri-l"]
ALL_TRACES = [f"trace{i}{pr}" for i in range(1, 5) for pr in ("", "_pr")]
METRICS = (("avg_jct", "avg_jct_s"), ("p99_jct", "p99_jct_s"), ("makespan", "makespan_s"))
# Rough CPU cost of a policy per job of a trace, relative to the list policies (measured with
# --all: Themis solves a conic program per event, Muri matches groups per round). Only the
# order matters: the costliest runs start first, so N processes finish close together.
POLICY_COST = {"themis": 50.0, "muri-s": 8.0, "muri-l": 8.0}


def find_traces(names: list[str], folders: list[Path]) -> dict[str, Path]:
    """name -> file for each named trace present in a folder (the first folder wins)."""
    found = {}
    for name in names:
        for folder in folders:
            if (folder / f"{name}.csv").is_file():
                found[name] = folder / f"{name}.csv"
                break
    return found


def load_published(path: Path) -> dict[tuple[str, str], dict[str, float]]:
    """(trace, policy) -> published figures; empty where the file is absent."""
    if not path.is_file():
        return {}
    with open(path) as fh:
        return {(r["trace"], r["policy"]): {k: float(v) for k, v in r.items() if k.endswith("_s")}
                for r in csv.DictReader(fh)}


def relative_errors(row: dict, published: dict[str, float] | None) -> dict[str, float]:
    """metric -> ours / published - 1, for the metrics the run and the paper both have."""
    if not published or "error" in row:
        return {}
    return {ours: row[ours] / published[theirs] - 1 for ours, theirs in METRICS
            if theirs in published}


HEADER = (f"{'trace':10} {'policy':9} {'avg JCT s':>12} {'err':>10} {'p99 JCT s':>12} "
          f"{'err':>10} {'makespan s':>12} {'err':>10} {'wall s':>8} {'CPU s':>8}")


def format_row(row: dict, published: dict[str, float] | None) -> str:
    if "error" in row:
        return (f"{row['trace']:10} {row['policy']:9} {row['error']} "
                f"(CPU {row.get('child_cpu_s', 0):.0f} s)")
    errors = relative_errors(row, published)
    cells = []
    for ours, _ in METRICS:
        err = f"{100 * errors[ours]:+9.4f}%" if ours in errors else "       n/a"
        cells.append(f"{row[ours]:12.0f} {err}")
    return (f"{row['trace']:10} {row['policy']:9} {' '.join(cells)} {row['wall_s']:8.2f} "
            f"{row['cpu_s']:8.2f}")


def published_lines(rows: list[dict], published: dict) -> list[str]:
    """The published figures the errors are against, one line per (trace, policy)."""
    out = []
    for r in rows:
        ref = published.get((r["trace"], r["policy"]))
        if ref:
            out.append(f"{r['trace']:10} {r['policy']:9} "
                       + " ".join(f"{ref[k]:12.0f} {'':10}" for _, k in METRICS))
    return out


def count_jobs(path: Path) -> int:
    """Rows of a trace file (its jobs): the size the run's cost grows with."""
    with open(path, "rb") as fh:
        return max(sum(1 for _ in fh) - 1, 0)


def costliest_first(tasks: list[dict]) -> list[dict]:
    """The tasks by estimated cost, largest first (longest-processing-time scheduling: a
    long run started last would leave the other processes idle while it ends alone)."""
    jobs = {t["trace_file"]: count_jobs(Path(t["trace_file"])) for t in tasks}
    return sorted(tasks, key=lambda t: -jobs[t["trace_file"]] * POLICY_COST.get(t["policy"], 1.0))


def overrides(themis_solver: str | None) -> dict:
    """The paper preset's fields a table run changes: none, or Themis's solver."""
    return {} if themis_solver is None else {"themis_solver": themis_solver}


def run_all(traces: dict[str, Path], policies: list[str], limit: float | None, jobs: int,
            progress: bool = True, themis_solver: str | None = None) -> list[dict]:
    """Every (trace, policy) in its own process, `jobs` at a time, the costliest started
    first; rows in trace order."""
    spec = spec_path("n8g8")
    tasks = [{"trace_file": str(path), "spec_file": str(spec), "policy": policy,
              "preset": "paper", "preset_overrides": overrides(themis_solver), "trace": name}
             for name, path in traces.items() for policy in policies]
    position = {(t["trace"], t["policy"]): i for i, t in enumerate(tasks)}

    rows = [dict(row, trace=task["trace"], policy=task["policy"])
            for task, row in subrun.run_all(costliest_first(tasks), limit, jobs,
                                            _progress if progress else None)]
    return sorted(rows, key=lambda r: position[r["trace"], r["policy"]])


def _progress(task: dict, row: dict, k: int, n: int) -> None:
    """A line on stderr as each run ends: which, and its time or why it has none."""
    state = row.get("error") or f"{row['wall_s']:.1f} s"
    extra = "".join(f" {key}={value}" for key, value in task.get("run", ((), (), ()))[2])
    print(f"[{k}/{n}] {task['trace']} {task['policy']}{extra}: {state}", file=sys.stderr,
          flush=True)


def run_in_process(traces: dict[str, Path], policies: list[str],
                   themis_solver: str | None = None):
    """The plain mode: one run after another in this process, yielding rows as they end."""
    spec = load_spec(spec_path("n8g8"))
    preset = get_preset("paper", **overrides(themis_solver))
    for name, path in traces.items():
        records = read_trace(path)
        for policy in policies:
            cpu = time.process_time()
            result = simulate(records, spec, policy, preset)
            s = result.summary
            yield {"trace": name, "policy": policy, "avg_jct": s.avg_jct, "p99_jct": s.p99_jct,
                   "makespan": s.makespan, "wall_s": result.wall_s,
                   "cpu_s": time.process_time() - cpu}


def run_figures(artifact: Path, folders: list[Path], policies: list[str], limit: float | None,
                jobs: int, themis_solver: str | None = None) -> tuple[list, dict, list[str]]:
    """Every run a published value of Figs. 9-13 needs, in child processes; returns the
    published values, each run's row by (trace, policy, overrides), and the traces missing."""
    values = [v for v in artifact_figures.published(artifact) if v.policy in policies]
    traces = find_traces(sorted({v.trace for v in values}),
                         [artifact_figures.trace_folder(artifact), *folders])
    missing = sorted({v.trace for v in values} - set(traces))
    spec = spec_path("n8g8")
    runs = list(dict.fromkeys(v.run for v in values if v.trace in traces))
    tasks = [{"trace_file": str(traces[trace]), "spec_file": str(spec), "policy": policy,
              "preset": "paper", "preset_overrides": {**overrides(themis_solver), **dict(extra)},
              "trace": trace, "run": (trace, policy, extra)} for trace, policy, extra in runs]

    rows = {task["run"]: row for task, row in subrun.run_all(costliest_first(tasks), limit,
                                                             jobs, _progress)}
    return [v for v in values if v.trace in traces], rows, missing


def figures_table(values: list, rows: dict) -> list[str]:
    """One line per published value: ours, the error; then per figure how many are exact
    (1e-6), within 1%, off by more, or not run."""
    lines = [f"{'fig':>3} {'trace':11} {'policy':15} {'setting':18} {'metric':9} "
             f"{'published':>15} {'ours':>15} {'err':>10}"]
    counts: dict[str, list[int]] = {}
    for v in values:
        row = rows.get(v.run, {})
        tally = counts.setdefault(v.figure, [0, 0, 0, 0])
        setting = " ".join(f"{k.removeprefix('muri_')}={x}" for k, x in v.overrides) or "-"
        if "error" in row or v.metric not in row:
            tally[3] += 1
            lines.append(f"{v.figure:>3} {v.trace:11} {v.policy:15} {setting:18} {v.metric:9} "
                         f"{v.value:15.3f} {row.get('error', 'not run'):>15}")
            continue
        err = row[v.metric] / v.value - 1
        tally[0 if abs(err) <= 1e-6 else 1 if abs(err) <= 0.01 else 2] += 1
        lines.append(f"{v.figure:>3} {v.trace:11} {v.policy:15} {setting:18} {v.metric:9} "
                     f"{v.value:15.3f} {row[v.metric]:15.3f} {100 * err:+9.4f}%")
    lines.append("")
    for figure in sorted(counts, key=int):
        exact, close, off, none = counts[figure]
        lines.append(f"Fig. {figure}: {exact + close + off + none} values, {exact} exact (1e-6), "
                     f"{close} within 1%, {off} off by more" + (f", {none} not run" if none else ""))
    return lines


def cpu_seconds(rows: list[dict]) -> float:
    """CPU seconds of all runs: each child's whole (imports and warm-up too) under --all,
    or the simulation's alone in process; a loaded machine inflates wall time, not this."""
    return sum(r.get("child_cpu_s", r.get("cpu_s", 0.0)) for r in rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", help="comma-separated trace names (default trace3,trace3_pr; "
                                     "with --all every one of trace1..4 and _pr present)")
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--all", action="store_true",
                    help="every trace present, in parallel processes")
    ap.add_argument("--trace-dir", type=Path, action="append", default=[],
                    help="another folder to find traces in (repeatable)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="runs at a time (--all)")
    ap.add_argument("--limit", type=float, default=None, help="seconds per run (--all)")
    ap.add_argument("--themis-solver", choices=SOLVERS, default=None,
                    help="Themis's solver (default: the paper preset's, ECOS on the "
                         "artifact's program; bisection: fast, another optimum)")
    ap.add_argument("--artifact", type=Path,
                    help="with --all: every published value of Figs. 9-13, from this checkout "
                         "of the artifact's draw scripts and traces")
    args = ap.parse_args(argv)
    if args.artifact is not None:
        if not args.all:
            ap.error("--artifact goes with --all")
        if not artifact_figures.published(args.artifact):
            ap.error(f"--artifact {args.artifact}: no draw_fig9-10.py or draw_fig11-13.py "
                     "with published values there (or in its simulator/ folder)")
        return figures_main(args)
    policies = [p for p in args.policies.split(",") if p]
    unknown = [p for p in policies if p not in POLICIES]
    if unknown:
        ap.error(f"unknown policies {unknown}; choose from {', '.join(POLICIES)}")
    names = (args.traces.split(",") if args.traces
             else ALL_TRACES if args.all else ["trace3", "trace3_pr"])
    folders = [REFERENCE, *args.trace_dir]
    traces = find_traces(names, folders)
    missing = [n for n in names if n not in traces]
    if missing:
        print(f"not found in {', '.join(map(str, folders))}: {', '.join(missing)}",
              file=sys.stderr)
    if not traces:
        return 1
    published = load_published(REFERENCE / "published_results.csv")
    started = time.perf_counter()
    solver, own = args.themis_solver, get_preset("paper").policies.themis.solver
    if solver not in (None, own) and "themis" in policies:
        print(f"themis: solved by {solver}, not the paper preset's {own}; its rows are not "
              f"the artifact's runs")
    print(HEADER)
    if args.all:
        rows = run_all(traces, policies, args.limit, args.jobs, themis_solver=solver)
        for row in rows:
            print(format_row(row, published.get((row["trace"], row["policy"]))))
    else:
        rows = []
        for row in run_in_process(traces, policies, solver):
            rows.append(row)
            print(format_row(row, published.get((row["trace"], row["policy"]))), flush=True)
    reference = published_lines(rows, published)
    if reference:
        print("\npublished figures (err above is ours / published - 1):")
        print("\n".join(reference))
    capped = [f"{r['trace']} {r['policy']}" for r in rows if r.get("timed_out")]
    print(f"\n{len(rows)} runs, total wall {time.perf_counter() - started:.1f} s"
          + (f"; past the {args.limit:g} s limit: {', '.join(capped)}" if capped else ""))
    cpu = cpu_seconds(rows)
    processes = args.jobs if args.all else 1
    print(f"CPU of the runs {cpu:.1f} s; / {processes} = {cpu / processes:.1f} s, the least "
          f"wall they take in {processes} process(es) on an otherwise idle machine")
    return 1 if any("error" in r and not r.get("timed_out") for r in rows) else 0


def figures_main(args: argparse.Namespace) -> int:
    """--all --artifact: Figs. 9-13, every published value against our run."""
    policies = [p for p in args.policies.split(",") if p]
    if "muri-l" in policies:  # Fig. 11's ablations of it
        policies += ["muri-l-worst", "muri-l-nomatch"]
    started = time.perf_counter()
    values, rows, missing = run_figures(args.artifact, [REFERENCE, *args.trace_dir], policies,
                                        args.limit, args.jobs, args.themis_solver)
    if missing:
        print(f"traces not found (their figures are left out): {', '.join(missing)}",
              file=sys.stderr)
    print("\n".join(figures_table(values, rows)))
    print(f"\n{len(rows)} runs, total wall {time.perf_counter() - started:.1f} s; CPU of the "
          f"runs {cpu_seconds(list(rows.values())):.1f} s")
    return 1 if any("error" in r and not r.get("timed_out") for r in rows.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
