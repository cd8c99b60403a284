"""How much of interleaving's gain survives the GPU memory limit, on Alibaba's openb trace.

Run from the repository root (the inputs are Alibaba's public files, never part of this
repository):
    python bench/openb_memory.py --nodes openb_node_list_all_node.csv \
        --pods openb_pod_list_default.csv,openb_pod_list_gpuspec33.csv --out DIR \
        [--scale 16] [--last 2000] [--load 5] [--jobs 2] [--plot FILE.png] [--table FILE.md]

What it does, each step with the project's own commands:

1. `interlace-spec import openb` turns the node list into a pooled spec (27 pools, 6,212 GPUs
   of seven types, GPU memory by type: specs/gpu_types.py);
2. `interlace-trace import openb` turns each pod list into a trace against it (GPU types a
   pod accepts from `gpu_spec`; a GPU-sharing pod's memory as its share of its type's);
3. the cluster is taken at 1/--scale of its nodes, pool by pool (each GPU pool keeps at least
   one node; CPU-only pools are left out): the same mix of node shapes, types and memory; the
   trace keeps its --last pods (by creation time, the most recent) with their arrivals brought
   closer until they offer --load times the cluster's GPU-seconds (each pod's first day
   counted: a few run for months). At full size and real times the pods never queue (every
   policy gives the same JCTs), and a run with thousands of jobs running or queued costs many
   minutes a policy; this keeps the whole run under 30 minutes on 2 cores. The GPU memory is
   then as shipped, halved, or not stated (unlimited). Halved, a pod that needs more than
   the halved GPUs of its types hold is taken to need all of it (it then runs alone): the
   question is what co-location keeps, not which pods stop fitting at all;
4. `interlace-sweep` runs SRSF, Muri-S, Tiresias, Muri-L and AntMan (default preset) on each
   memory variant, --jobs processes at a time;
5. the table gives average JCT per trace, policy and memory variant, and interleaving's gain
   (Muri-S against SRSF, Muri-L against Tiresias: 1 - ratio of average JCTs) per variant.
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from specs import load_spec  # noqa: E402
from specs.fit import pools_for  # noqa: E402
from specs.pools import spec_text  # noqa: E402
from specs.spec import ClusterSpec  # noqa: E402
from traces import read_trace  # noqa: E402
from traces.muri_csv import write_trace  # noqa: E402

POLICIES = ("srsf", "muri-s", "tiresias", "muri-l", "antman")
VARIANTS = (("shipped", 1.0), ("halved", 0.5), ("unlimited", 0.0))
PAIRS = (("muri-s", "srsf"), ("muri-l", "tiresias"))


def run(argv: list[str]) -> None:
    """One of the project's commands, its output kept to the lines that say what it did."""
    done = subprocess.run([sys.executable, "-m", *argv], cwd=ROOT, capture_output=True,
                          text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:3])}: exit {done.returncode}: "
                         f"{(done.stderr or done.stdout).strip()[-2000:]}")


def scaled(spec: ClusterSpec, scale: int, memory: float) -> ClusterSpec:
    """`spec` at 1/`scale` of its nodes per GPU pool (at least one), GPU memory times
    `memory` (0: not stated)."""
    pools = tuple(dataclasses.replace(p, nodes=max(1, round(p.nodes / scale)),
                                      gpu_mem_gb=p.gpu_mem_gb * memory)
                  for p in spec.layout if p.gpus_per_node)
    return ClusterSpec.of_pools(pools)


def clipped(records, spec: ClusterSpec) -> list:
    """Each record's memory at most what the smallest GPUs of the pools that may hold it
    hold (specs.fit's rule, memory aside)."""
    out = []
    for r in records:
        room = [spec.layout[p].gpu_mem_gb for p in pools_for(r.num_gpu, r.gpu_types, 0.0, spec)
                if spec.layout[p].gpu_mem_gb]
        out.append(dataclasses.replace(r, gpu_mem_gb=min([r.gpu_mem_gb, *room])))
    return out


def prepare(args, work: Path) -> tuple[dict[str, list[Path]], dict[str, Path], dict]:
    """The traces (its last pods, brought to --load) for each memory variant, and a spec
    per variant."""
    full = work / "openb-spec.csv"
    run(["specs.cli", "import", "openb", args.nodes, "--out", str(full), "--force"])
    spec = load_spec(full)
    specs = {}
    for name, factor in VARIANTS:
        specs[name] = work / f"spec-{name}.csv"
        specs[name].write_text(spec_text(scaled(spec, args.scale, factor)))
    shape = scaled(spec, args.scale, 1.0)
    traces: dict[str, list[Path]] = {name: [] for name, _ in VARIANTS}
    facts = {"full_gpus": spec.total_gpus, "gpus": shape.total_gpus,
             "nodes": shape.num_nodes, "traces": {}}
    for pods in args.pods.split(","):
        name = Path(pods).stem.replace("openb_pod_list_", "openb-")
        imported = work / f"{name}-imported.csv"
        run(["traces.cli", "import", "openb", pods, "--out", str(imported), "--spec",
             str(full)])
        records = sorted(read_trace(imported, spec=shape), key=lambda r: r.submit_time)
        records = records[-args.last:]
        start = records[0].submit_time
        # GPU-seconds asked (each pod's first day; a few run for months) over those the
        # cluster has while the pods arrive
        work_gpu_s = sum(r.num_gpu * min(r.duration, 86400.0) for r in records)
        span = records[-1].submit_time - start
        speedup = args.load * span * shape.total_gpus / work_gpu_s
        records = [dataclasses.replace(r, submit_time=(r.submit_time - start) / speedup)
                   for r in records]
        stem = f"{name}-last{args.last}-load{args.load:g}"
        for variant, _ in VARIANTS:
            out = work / variant / f"{stem}.csv"
            out.parent.mkdir(exist_ok=True)
            write_trace(out, clipped(records, load_spec(specs[variant])))
            traces[variant].append(out)
        facts["traces"][stem] = {
            "jobs": len(records), "typed": sum(1 for r in records if r.gpu_types),
            "with_memory": sum(1 for r in records if r.gpu_mem_gb),
            "clipped_when_halved": sum(
                1 for a, b in zip(records, clipped(records, load_spec(specs["halved"])))
                if a.gpu_mem_gb != b.gpu_mem_gb),
            "speedup": speedup, "offered_load": args.load}
    return traces, specs, facts


def sweep(args, traces: dict[str, list[Path]], specs: dict[str, Path], work: Path
          ) -> list[dict]:
    rows = []
    for name, spec in specs.items():
        out = work / f"sweep-{name}"
        started = time.perf_counter()
        run(["scheduler.tools.sweep", "--traces", ",".join(map(str, traces[name])), "--policies",
             ",".join(POLICIES), "--spec", str(spec), "--out", str(out), "--jobs",
             str(args.jobs), "--no-report"])
        print(f"memory {name}: sweep of {len(traces[name]) * len(POLICIES)} runs in "
              f"{time.perf_counter() - started:.0f} s", flush=True)
        with open(out / "runs.csv", newline="") as fh:
            rows.extend(dict(row, memory=name, trace=Path(row["trace"]).stem)
                        for row in csv.DictReader(fh))
    return rows


def table(rows: list[dict]) -> str:
    """Average JCT (h) per trace and policy, a column per memory variant; then the gains."""
    avg = {(r["trace"], r["policy"], r["memory"]): float(r["avg_jct_s"]) / 3600 for r in rows}
    names = [n for n, _ in VARIANTS]
    lines = ["| trace | policy | " + " | ".join(f"avg JCT h, memory {n}" for n in names) + " |",
             "|---|---|" + "---|" * len(names)]
    traces = sorted({r["trace"] for r in rows})
    for trace in traces:
        for policy in POLICIES:
            cells = [f"{avg[(trace, policy, n)]:.2f}" if (trace, policy, n) in avg else "-"
                     for n in names]
            lines.append(f"| {trace} | {policy} | " + " | ".join(cells) + " |")
    lines += ["", "| trace | gain | " + " | ".join(f"memory {n}" for n in names) + " |",
              "|---|---|" + "---|" * len(names)]
    for trace in traces:
        for a, b in PAIRS:
            cells = [f"{100 * (1 - avg[(trace, a, n)] / avg[(trace, b, n)]):.1f}%"
                     if (trace, a, n) in avg and (trace, b, n) in avg else "-" for n in names]
            lines.append(f"| {trace} | {a} vs {b} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    avg = {(r["trace"], r["policy"], r["memory"]): float(r["avg_jct_s"]) / 3600 for r in rows}
    traces = sorted({r["trace"] for r in rows})
    names = [n for n, _ in VARIANTS]
    fig, axes = plt.subplots(1, len(traces), figsize=(6 * len(traces), 4), squeeze=False)
    width = 0.8 / len(names)
    for ax, trace in zip(axes[0], traces):
        for i, name in enumerate(names):
            ax.bar([p + i * width for p in range(len(POLICIES))],
                   [avg.get((trace, pol, name), 0.0) for pol in POLICIES], width,
                   label=f"GPU memory {name}")
        ax.set_xticks([p + width for p in range(len(POLICIES))], POLICIES)
        ax.set_ylabel("average JCT (h)")
        ax.set_title(trace)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", required=True, help="openb_node_list_all_node.csv")
    p.add_argument("--pods", required=True, help="pod lists, comma-separated")
    p.add_argument("--out", required=True, help="work folder (specs, traces, sweeps)")
    p.add_argument("--scale", type=int, default=16, help="cluster at 1/SCALE of its nodes")
    p.add_argument("--last", type=int, default=2000, help="the trace's most recent N pods")
    p.add_argument("--load", type=float, default=5.0, help="offered load to bring them to")
    p.add_argument("--jobs", type=int, default=2, help="sweep processes")
    p.add_argument("--plot", help="bar chart PNG")
    p.add_argument("--table", help="write the markdown table here too")
    p.add_argument("--json", help="write rows and facts here")
    args = p.parse_args(argv)
    if args.scale < 1 or args.last < 2 or not 0 < args.load <= 100 or args.jobs < 1:
        p.error("--scale and --jobs must be at least 1, --last 2, --load in (0, 100]")
    work = Path(args.out)
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    traces, specs, facts = prepare(args, work)
    print(f"cluster: {facts['gpus']} GPUs on {facts['nodes']} nodes (1/{args.scale} of "
          f"{facts['full_gpus']}); traces: {json.dumps(facts['traces'])}", flush=True)
    rows = sweep(args, traces, specs, work)
    text = table(rows)
    print(text)
    print(f"whole run: {time.perf_counter() - started:.0f} s")
    if args.table:
        Path(args.table).write_text(text + "\n")
    if args.plot:
        plot(rows, Path(args.plot))
    if args.json:
        Path(args.json).write_text(json.dumps({"facts": facts, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
