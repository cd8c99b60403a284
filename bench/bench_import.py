"""Import speed and memory: a generated 3,000,000-row Helios-schema log through
`interlace-trace import`, then a window of it simulated.

Run from the repository root:  python bench/bench_import.py [--rows 3000000] [--sim-jobs 5000]
    [--spec n64g8] [--policies muri-s,srsf] [--keep DIR]

1. writes a Helios `cluster_log.csv` of --rows jobs (seeded; ~1 job per 15 s, median run 10 min, 20% CPU jobs, and odd rows: 0.5% with no end, 0.1% negative, 0.1% repeated
   ids, 0.05% unreadable) to a temporary directory (never to the repository);
2. imports all of it in a child process (`python -m traces.cli import helios ...`), and
   reads that child's own peak RSS (os.wait4) and wall time: rows/s and MB;
3. imports again with --limit --sim-jobs (the same streaming path) and checks its rows are
   the first rows of the full import; runs `interlace-sim --trace` on it with --policies.
Prints one JSON line per step and a short table; --keep DIR keeps the files there.
"""
from __future__ import annotations

import argparse
import csv
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
import subrun  # noqa: E402

HEADER = "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue"
GPUS = (0, 1, 2, 4, 8, 16, 32)
GPU_SHARE = (0.20, 0.48, 0.08, 0.08, 0.12, 0.03, 0.01)
STATES = ("COMPLETED", "COMPLETED", "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")
BLOCK = 100_000
MEAN_GAP_S = 15.0  # about 65% of n64g8's GPUs busy on average
MEDIAN_RUN_S, RUN_SIGMA = 600.0, 1.5


def write_helios(path: Path, rows: int, seed: int = 0) -> dict:
    """The log, written block by block (the generator's memory stays small too); returns
    how many odd rows of each kind went in, so a reader can compare with the summary."""
    import numpy as np  # here only: the parent that starts the measured children stays small

    rng = np.random.default_rng(seed)
    epoch = np.datetime64("2020-03-01T00:00:00", "s")
    clock = 0.0
    odd = {"no_end": 0, "negative": 0, "repeat": 0, "unreadable": 0, "cpu": 0}
    with open(path, "w", encoding="utf-8") as out:
        out.write(HEADER + "\n")
        for first in range(0, rows, BLOCK):
            n = min(BLOCK, rows - first)
            submit = clock + np.cumsum(rng.exponential(MEAN_GAP_S, n))
            clock = float(submit[-1])
            queue = np.floor(rng.exponential(120.0, n))
            duration = np.clip(np.floor(rng.lognormal(np.log(MEDIAN_RUN_S), RUN_SIGMA, n)), 1, 30 * 86400)
            gpus = rng.choice(np.array(GPUS), n, p=np.array(GPU_SHARE))
            kind = rng.random(n)
            negative = kind < 0.001
            no_end = (kind >= 0.001) & (kind < 0.006)
            repeat = (kind >= 0.006) & (kind < 0.007) & (first + np.arange(n) > 0)
            broken = (kind >= 0.007) & (kind < 0.0075)
            duration = np.where(negative, -duration, duration)
            start = np.floor(submit) + queue
            sub_s = (epoch + np.floor(submit).astype("timedelta64[s]")).astype(str)
            start_s = (epoch + start.astype("timedelta64[s]")).astype(str)
            end_s = (epoch + (start + duration).astype("timedelta64[s]")).astype(str)
            ids = first + np.arange(n)
            ids = np.where(repeat, np.maximum(ids - 1 - rng.integers(0, 1000, n), 0), ids)
            users = rng.integers(0, 2000, n)
            vcs = rng.integers(0, 24, n)
            states = np.array(STATES)[rng.integers(0, len(STATES), n)]
            lines = []
            for i in range(n):
                g = int(gpus[i])
                end, dur, state = end_s[i].replace("T", " "), int(duration[i]), states[i]
                if no_end[i]:
                    end, dur, state = "", "", "RUNNING"
                gpu_cell = "n/a?" if broken[i] else g
                lines.append(
                    f"job{ids[i]},u{users[i]},vc{vcs[i]},{gpu_cell},{max(1, 6 * g)},"
                    f"{max(1, g // 8)},{state},{sub_s[i].replace('T', ' ')},"
                    f"{start_s[i].replace('T', ' ')},{end},{dur},{int(queue[i])}")
            out.write("\n".join(lines) + "\n")
            odd["no_end"] += int(no_end.sum())
            odd["negative"] += int(negative.sum())
            odd["repeat"] += int(repeat.sum())
            odd["unreadable"] += int(broken.sum())
            odd["cpu"] += int(((gpus == 0) & ~broken & ~no_end & ~negative).sum())
    return odd


def import_child(src: Path, out: Path, spec: str, extra: list[str]) -> dict:
    cmd = [sys.executable, "-m", "traces.cli", "import", "helios", str(src), "--out", str(out),
           "--spec", spec, *extra]
    run = subrun.run_capped(cmd, None, cwd=str(ROOT))
    if run.returncode != 0:
        raise SystemExit(f"import failed ({run.returncode}): {run.stderr.strip()[-500:]}")
    summary = json.loads(Path(str(out) + ".summary.json").read_text())
    return {"wall_s": round(run.wall_s, 2), "cpu_s": round(run.cpu_s, 2),
            "peak_rss_mb": round(run.peak_rss_bytes / 2**20, 1),
            "rows_per_s": round(summary["rows_read"] / run.wall_s),
            "rows_read": summary["rows_read"], "kept": summary["kept"],
            "dropped": {k: v for k, v in summary["dropped"].items() if v}}


def first_ids(path: Path, count: int) -> list[str]:
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        return [row["source_id"] for _, row in zip(range(count), reader)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=3_000_000)
    p.add_argument("--sim-jobs", type=int, default=5000)
    p.add_argument("--spec", default="n64g8")
    p.add_argument("--policies", default="muri-s,srsf")
    p.add_argument("--keep", type=Path, help="keep the generated and imported files here")
    p.add_argument("--generate", type=Path, help=argparse.SUPPRESS)  # the generating child
    args = p.parse_args(argv)
    if args.generate:
        print(json.dumps(write_helios(args.generate, args.rows)))
        return 0
    work = Path(tempfile.mkdtemp(prefix="bench-import-"))
    try:
        src = work / "cluster_log.csv"
        start = time.perf_counter()
        # generated in a child too: on Linux a child's peak RSS starts from its parent's size
        # at the fork, so the parent must stay small for the import's figure to be its own
        run = subrun.run_capped([sys.executable, __file__, "--generate", str(src),
                                 "--rows", str(args.rows)], None, cwd=str(ROOT))
        if run.returncode != 0:
            raise SystemExit(f"generate failed: {run.stderr.strip()[-500:]}")
        odd = json.loads(run.stdout)
        gen = {"step": "generate", "rows": args.rows, "mb": round(src.stat().st_size / 1e6, 1),
               "wall_s": round(time.perf_counter() - start, 1), "odd_rows": odd}
        print(json.dumps(gen), flush=True)
        full = {"step": "import", **import_child(src, work / "full.csv", args.spec, [])}
        print(json.dumps(full), flush=True)
        window = {"step": "import --limit",
                  **import_child(src, work / "window.csv", args.spec,
                                 ["--limit", str(args.sim_jobs)])}
        same = first_ids(work / "window.csv", args.sim_jobs) == first_ids(work / "full.csv",
                                                                          args.sim_jobs)
        window["same_as_full_prefix"] = same
        print(json.dumps(window), flush=True)
        cmd = [sys.executable, "-m", "scheduler.sim.cli", "--trace", str(work / "window.csv"),
               "--spec", args.spec, "--policy", args.policies, "--json"]
        run = subrun.run_capped(cmd, None, cwd=str(ROOT))
        if run.returncode != 0:
            raise SystemExit(f"simulation failed: {run.stderr.strip()[-500:]}")
        for line in run.stdout.splitlines():
            if line.startswith("{"):
                row = json.loads(line)
                print(json.dumps({"step": "simulate", **{k: row[k] for k in (
                    "policy", "jobs", "avg_jct", "p99_jct", "makespan", "wall_s")}}), flush=True)
        print(f"\n{args.rows:,} Helios rows ({gen['mb']:,} MB): imported in {full['wall_s']} s "
              f"({full['rows_per_s']:,} rows/s), peak RSS {full['peak_rss_mb']} MB, "
              f"kept {full['kept']:,}; first {args.sim_jobs} simulated "
              f"(prefix identical: {same})")
        if args.keep:
            args.keep.mkdir(parents=True, exist_ok=True)
            for f in work.iterdir():
                shutil.move(str(f), args.keep / f.name)
        return 0 if same and full["peak_rss_mb"] < 500 else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
