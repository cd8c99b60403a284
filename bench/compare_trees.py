"""This tree against another checkout of the project, side by side in one run: the simulator
on bench_sim.py's cases (and a few fast-policy ones), and the live service's round latency
(bench_service.py), each in fresh processes of each tree, alternating, so that a change of
the machine's load hits both alike.

Run from the repository root:
    python bench/compare_trees.py --old DIR [--repeat 3] [--service] [--cases LIST]
DIR is a checkout of the tree to compare with (e.g. `git worktree add DIR main`); its compiled
matcher is built in place when missing. Simulator cases: CPU seconds of the simulation alone
(sim_child.py, after a warm-up), the fastest of --repeat runs of each tree; every case must
give the same average JCT in both trees. The service: bench_service.py's planning and
whole-round medians and p99s (--agents/--jobs/--arrivals passed on). Prints one JSON line
per case with both figures and new/old.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT.parent / "shared" / "reference"
# (trace, policy, preset): bench_sim.py's cases, and fast policies where a round costs least
CASES = ("trace3:srsf:paper,trace3:muri-s:paper,trace3_pr:muri-s:paper,trace3:themis:paper,"
         "trace3:srtf:paper,trace3:tiresias:paper,trace3:srsf:default,trace3:muri-s:default")


def child(tree: Path, task: dict, limit: float) -> dict:
    """bench/sim_child.py of `tree`, on `task`, in a process of its own."""
    proc = subprocess.run([sys.executable, str(tree / "bench" / "sim_child.py"), json.dumps(task)],
                          cwd=tree, env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin",
                                         "OMP_NUM_THREADS": "1"},
                          capture_output=True, text=True, timeout=limit)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip()[-300:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def compare_sim(old: Path, cases: list[str], repeat: int, limit: float) -> list[dict]:
    rows = []
    for case in cases:
        trace, policy, preset = case.split(":")
        path = REFERENCE / f"{trace}.csv"
        if not path.is_file():
            print(f"{case}: no {path}; skipped", file=sys.stderr)
            continue
        task = {"trace_file": str(path), "spec_file": str(REFERENCE / "n8g8.csv"),
                "policy": policy, "preset": preset}
        best: dict[str, dict] = {}
        for _ in range(repeat):
            for name, tree in (("old", old), ("new", ROOT)):
                run = child(tree, task, limit)
                if "error" in run:
                    raise SystemExit(f"{case} in the {name} tree: {run['error']}")
                if name not in best or run["cpu_s"] < best[name]["cpu_s"]:
                    best[name] = run
        row = {"case": case, "old_cpu_s": round(best["old"]["cpu_s"], 4),
               "new_cpu_s": round(best["new"]["cpu_s"], 4),
               "new/old": round(best["new"]["cpu_s"] / best["old"]["cpu_s"], 3),
               "same_result": best["old"]["avg_jct"] == best["new"]["avg_jct"]
               and best["old"]["makespan"] == best["new"]["makespan"]}
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def service(tree: Path, args: argparse.Namespace) -> dict:
    proc = subprocess.run([sys.executable, "bench/bench_service.py", "--agents", str(args.agents),
                           "--jobs", str(args.jobs), "--arrivals", str(args.arrivals)],
                          cwd=tree, env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=args.limit)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"bench_service.py in {tree}: {proc.stderr.strip()[-300:]}")
    return json.loads(lines[-1])


def compare_service(old: Path, args: argparse.Namespace) -> list[dict]:
    runs: dict[str, list[dict]] = {"old": [], "new": []}
    for _ in range(args.repeat):
        for name, tree in (("old", old), ("new", ROOT)):
            runs[name].append(service(tree, args))
    rows = []
    keys = [k for k in runs["old"][0] if k.endswith("_ms") and isinstance(runs["old"][0][k],
                                                                          (int, float))]
    for key in keys:
        low = {name: min(r[key] for r in runs[name]) for name in runs}
        row = {"case": f"service {key}", "old": low["old"], "new": low["new"],
               "new/old": round(low["new"] / low["old"], 3) if low["old"] else None}
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", type=Path, required=True, help="the other checkout")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each tree per case")
    ap.add_argument("--cases", default=CASES, help="trace:policy:preset, comma-separated")
    ap.add_argument("--limit", type=float, default=1800.0, help="seconds per run")
    ap.add_argument("--service", action="store_true", help="also bench_service.py")
    ap.add_argument("--agents", type=int, default=64)
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--arrivals", type=int, default=30)
    args = ap.parse_args()
    old = args.old.resolve()
    if not (old / "bench" / "sim_child.py").is_file():
        ap.error(f"{old} is not a checkout of this project (no bench/sim_child.py)")
    if not list((old / "scheduler" / "core").glob("_blossom*.so")):
        subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace", "-q"], cwd=old,
                       env={"PYTHONPATH": str(old), "PATH": "/usr/bin:/bin"},
                       capture_output=True, check=False)
    rows = compare_sim(old, [c for c in args.cases.split(",") if c], max(args.repeat, 1),
                       args.limit)
    if args.service:
        rows += compare_service(old, args)
    return 0 if all(r.get("same_result", True) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
