"""Where interleaving pays: SRSF, Muri-S, Tiresias and Muri-L against offered load.

Run from the repository root:
    python bench/load_sweep.py [--openb FILE] [--trace-dir DIR] [--families ...]
        [--workers N] [--plot FILE.png] [--json FILE] [--jobs N]

Families of points, each a trace on a cluster, from light to heavy load:

* `generated`: interlace-trace generate's Philly-like jobs (--jobs, seed 7) on 64 GPUs at
  mean inter-arrival times from 4,800 s down to 600 s;
* `philly`: the packaged philly_1k with its submit times compressed or stretched, on 64 GPUs;
* `openb`: the Alibaba openb 2023 pod list (--openb: the pod list CSV or a trace imported
  from it, never part of this repository) on 64, 32 and 16 GPUs;
* `paper`: the artifact's trace1-4 and their _pr variants on 64 GPUs, where found (in
  ../shared/reference and --trace-dir).

Every point runs under the `default` preset: SRSF, Muri-S, Tiresias and Muri-L as shipped
(the completion rule), and Muri-S and Muri-L with every merge the matching offers (the
paper's efficiency rule) to show where interleaving without the rule would hurt. Offered
load is GPU-seconds asked over GPU-seconds the cluster has while jobs arrive. For each run
the table gives average and p99 JCT and where the time goes (per job: waiting, running
slower than alone, restarting). Runs go in parallel processes, --workers at a time.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scheduler.presets import get_preset  # noqa: E402
from scheduler.sim.explain import job_parts  # noqa: E402
from scheduler.sim.simulator import simulate  # noqa: E402
from specs.spec import ClusterSpec  # noqa: E402
from traces import default_trace_path, read_trace  # noqa: E402
from traces.generate import generate  # noqa: E402

REFERENCE = ROOT.parent / "shared" / "reference"
FAMILIES = ("generated", "philly", "openb", "paper")
#: (label, policy, preset overrides): the shipped rule and every merge, side by side
RUNS = (("srsf", "srsf", {}), ("muri-s", "muri-s", {}),
        ("muri-s every merge", "muri-s", {"muri_merge_rule": "efficiency"}),
        ("tiresias", "tiresias", {}), ("muri-l", "muri-l", {}),
        ("muri-l every merge", "muri-l", {"muri_merge_rule": "efficiency"}))
PAIRS = (("muri-s", "srsf"), ("muri-l", "tiresias"))


def cluster(gpus: int) -> ClusterSpec:
    """`gpus` GPUs as nodes of 8 (the packaged specs' node)."""
    return ClusterSpec(1, gpus // 8, 8, 92, 520)


def offered_load(records, gpus: int) -> float:
    """GPU-seconds asked over GPU-seconds the cluster has from the first to the last
    submission (a backlog, all at one time: infinite)."""
    work = sum(r.num_gpu * r.duration for r in records)
    span = max(r.submit_time for r in records) - min(r.submit_time for r in records)
    return work / (span * gpus) if span > 0 else float("inf")


def _scaled(records, factor: float):
    return [replace(r, submit_time=r.submit_time * factor) for r in records]


def points(families, openb: str | None, trace_dirs: list[Path], jobs: int):
    """(family, point name, records, cluster GPUs) for each point of the chosen families."""
    out = []
    if "generated" in families:
        for gap in (4800, 2400, 1200, 800, 600):
            out.append(("generated", f"gap {gap} s", generate(jobs, 7, mean_interarrival=gap), 64))
    if "philly" in families:
        base = read_trace(default_trace_path("philly_1k"))
        for factor in (4.0, 2.0, 1.0, 0.5, 0.25):
            out.append(("philly", f"times x{factor:g}", _scaled(base, factor), 64))
    if "openb" in families and openb:
        records = _openb(openb)
        for gpus in (64, 32, 16):
            out.append(("openb", f"{gpus} GPUs", records, gpus))
    if "paper" in families:
        for name in [f"trace{i}{pr}" for pr in ("", "_pr") for i in range(1, 5)]:
            for folder in [REFERENCE, *trace_dirs]:
                if (folder / f"{name}.csv").is_file():
                    out.append(("paper", name, read_trace(folder / f"{name}.csv"), 64))
                    break
    return out


def _openb(path: str):
    """The openb trace: read as a trace if it is one, else imported from the pod list."""
    with open(path) as fh:
        header = fh.readline()
    if header.startswith("job_id"):
        return read_trace(path)
    from traces.cli import main as trace_tool

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "openb.csv"
        if trace_tool(["import", "openb", path, "--spec", "n2g8", "--out", str(out)]) != 0:
            raise SystemExit(f"load_sweep: --openb {path}: could not import it")
        return read_trace(out)


def run_one(family: str, point: str, label: str, policy: str, overrides: dict, records,
            gpus: int) -> dict:
    preset = get_preset("default", **overrides)
    result = simulate(records, cluster(gpus), policy, preset)
    done = [o for o in result.outcomes if o.end is not None]
    parts = [job_parts(o) for o in done]
    n = max(len(parts), 1)
    s = result.summary
    return {"family": family, "point": point, "run": label, "gpus": gpus,
            "load": offered_load(records, gpus), "jobs": s.jobs, "avg_jct": s.avg_jct,
            "p99_jct": s.p99_jct, "wait_s": sum(p[0] for p in parts) / n,
            "slower_s": sum(p[2] for p in parts) / n,
            "restart_s": sum(p[3] for p in parts) / n, "wall_s": result.wall_s}


def table(rows: list[dict]) -> str:
    by_point: dict[tuple, dict[str, dict]] = {}
    for r in rows:
        by_point.setdefault((r["family"], r["point"], r["gpus"], r["load"]), {})[r["run"]] = r
    lines = [f"{'family':10} {'point':14} {'load':>6} | {'run':19} {'avg JCT h':>10} "
             f"{'p99 JCT h':>10} {'vs base':>8} {'wait s':>9} {'slower s':>9} "
             f"{'restart s':>9} {'wall s':>7}"]
    for (family, point, gpus, load), runs in by_point.items():
        for label, _, _ in RUNS:
            r = runs.get(label)
            if r is None:
                continue
            base = next((runs.get(b) for m, b in PAIRS if label.startswith(m)), None)
            ratio = f"{r['avg_jct'] / base['avg_jct']:.3f}x" if base else ""
            lines.append(f"{family:10} {point:14} {load:>6.2f} | {label:19} "
                         f"{r['avg_jct'] / 3600:>10.2f} {r['p99_jct'] / 3600:>10.2f} "
                         f"{ratio:>8} {r['wait_s']:>9,.0f} {r['slower_s']:>9,.0f} "
                         f"{r['restart_s']:>9,.0f} {r['wall_s']:>7.1f}")
    return "\n".join(lines)


def plot(rows: list[dict], path: Path) -> None:
    """Per family, average JCT of each Muri against its base policy over offered load: below
    1 interleaving pays; the shipped rule against every merge."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    families = [f for f in FAMILIES if any(r["family"] == f for r in rows)]
    fig, axes = plt.subplots(2, len(families), figsize=(4 * len(families), 6.5), squeeze=False)
    for col, family in enumerate(families):
        mine = [r for r in rows if r["family"] == family]
        keyed = {(r["point"], r["run"]): r for r in mine}
        names = list(dict.fromkeys(r["point"] for r in mine))
        for row, metric in enumerate(("avg_jct", "p99_jct")):
            ax = axes[row][col]
            for muri, base in PAIRS:
                for label, style in ((muri, "-o"), (f"{muri} every merge", ":x")):
                    xs, ys = [], []
                    for i, name in enumerate(names):
                        r, b = keyed.get((name, label)), keyed.get((name, base))
                        if r and b and b[metric] > 0:
                            xs.append(i)
                            ys.append(r[metric] / b[metric])
                    ax.plot(xs, ys, style, label=f"{label} / {base}")
            ax.axhline(1.0, color="grey", lw=0.8)
            ax.set_xticks(range(len(names)))
            ax.set_xticklabels([f"{n}\n{keyed[(n, 'srsf')]['load']:.2f}"
                                if (n, "srsf") in keyed else n for n in names],
                               fontsize=6, rotation=30)
            ax.set_yscale("log")
            ax.set_title(f"{family}: {'average' if metric == 'avg_jct' else 'p99'} JCT",
                         fontsize=9)
            if col == 0:
                ax.set_ylabel("JCT against the base policy")
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=6)
    fig.suptitle("default preset; x: point and offered load; below 1: interleaving pays",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--families", default=",".join(FAMILIES))
    p.add_argument("--openb", help="openb pod list CSV, or a trace imported from it")
    p.add_argument("--trace-dir", action="append", default=[], type=Path,
                   help="where else the artifact's traces lie (its simulator/trace-data)")
    p.add_argument("--jobs", type=int, default=2000, help="jobs per generated trace")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    p.add_argument("--plot", type=Path)
    p.add_argument("--json", type=Path, help="write every run as one JSON object per line")
    args = p.parse_args(argv)
    families = [f.strip() for f in args.families.split(",") if f.strip()]
    unknown = set(families) - set(FAMILIES)
    if unknown:
        p.error(f"--families: unknown {', '.join(sorted(unknown))}; choose from "
                f"{', '.join(FAMILIES)}")
    if "openb" in families and not args.openb:
        print("load_sweep: openb: skipped (no --openb file given)", file=sys.stderr)
    todo = [(family, point, label, policy, overrides, records, gpus)
            for family, point, records, gpus in points(families, args.openb, args.trace_dir,
                                                       args.jobs)
            for label, policy, overrides in RUNS]
    # the costliest first (many jobs, Muri), so the workers finish close together
    todo.sort(key=lambda t: -len(t[5]) * (8 if t[3].startswith("muri") else 1))
    rows, started = [], time.monotonic()
    with ProcessPoolExecutor(max_workers=max(args.workers, 1)) as pool:
        futures = [pool.submit(run_one, *t) for t in todo]
        for done, future in enumerate(as_completed(futures), 1):
            rows.append(future.result())
            print(f"\rload_sweep: {done}/{len(todo)} runs, {time.monotonic() - started:.0f} s",
                  end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    rows.sort(key=lambda r: (FAMILIES.index(r["family"]), r["load"], r["point"]))
    print(table(rows))
    if args.json:
        args.json.write_text("".join(json.dumps(r) + "\n" for r in rows))
    if args.plot:
        plot(rows, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
