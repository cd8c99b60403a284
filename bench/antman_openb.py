"""AntMan's simulation time on an openb-sized cluster, as a ratio to other policies' in one run.

Run from the repository root:
    python bench/antman_openb.py [--nodes openb_node_list_all_node.csv --pods POD_LIST.csv]
        [--policies srsf,tiresias] [--best-effort 0.1] [--scale 1] [--limit 3600] [--work DIR]

With Alibaba's files (cluster-trace-gpu-v2023), the cluster and the jobs are theirs; without
them, a seeded synthetic node list and pod list of the same shape are written first: 1,523
nodes of seven GPU types in 27 pools (6,212 GPUs; an eighth of the nodes CPU-only) and about
6,200 GPU pods over two months, most of them one GPU or a share of one, a third naming GPU
types, --best-effort of them best effort (AntMan's opportunistic jobs), run times
heavy-tailed. Either way both go through the project's own importers (`interlace-spec
import openb`, `interlace-trace import openb`), and --scale N keeps every Nth node per pool
and every Nth pod, for a quick look.

Each policy runs in a fresh process (bench/sim_child.py) one after another; the figure is
the simulation's CPU seconds, and the verdict AntMan's against the slowest other policy's.
The target: AntMan within 2x.
"""
from __future__ import annotations

import argparse
import csv
import math
import random
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from openb_memory import run  # noqa: E402  (one of the project's commands, or one line)
from preset_speed import child  # noqa: E402  (a simulation in a child process, timed)

# (GPUs per node, type, CPU milli, memory MiB, nodes): the synthetic node list, 27 shapes
NODE_SHAPES = (
    (8, "G2", 96000, 786432, 160), (8, "G2", 96000, 393216, 60), (8, "G2", 128000, 786432, 40),
    (8, "G3", 96000, 786432, 60), (8, "G3", 64000, 393216, 40),
    (8, "V100M16", 96000, 393216, 70), (8, "V100M16", 64000, 262144, 30),
    (8, "V100M32", 96000, 786432, 50), (8, "V100M32", 96000, 393216, 40),
    (4, "V100M16", 64000, 262144, 60), (4, "V100M32", 64000, 262144, 52),
    (4, "P100", 64000, 262144, 30), (2, "P100", 32000, 131072, 40),
    (2, "T4", 104000, 524288, 150), (2, "T4", 96000, 393216, 150),
    (2, "T4", 64000, 262144, 100), (1, "T4", 32000, 131072, 46),
    (1, "T4", 16000, 65536, 60), (4, "T4", 96000, 393216, 40),
    (1, "A10", 32000, 131072, 4), (2, "A10", 64000, 262144, 10),
    (4, "G2", 64000, 262144, 10), (2, "G3", 32000, 131072, 17),
    (0, "", 32000, 262144, 54), (0, "", 64000, 262144, 80), (0, "", 96000, 393216, 50),
    (0, "", 16000, 65536, 20),
)
TYPES = ("G2", "G3", "V100M16", "V100M32", "P100", "T4", "A10")


def synthetic_nodes(path: Path) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["sn", "cpu_milli", "memory_mib", "gpu", "model"])
        n = 0
        for gpus, kind, cpu, mem, count in NODE_SHAPES:
            for _ in range(count):
                n += 1
                w.writerow([f"openb-node-{n:04d}", cpu, mem, gpus, kind])


def synthetic_pods(path: Path, count: int = 6200, seed: int = 52,
                   best_effort: float = 0.1) -> None:
    """Pods over 60 days: 70% one GPU (half of them a share of it), the rest 2, 4 or 8; a
    third name GPU types (any of the seven; A10, with 24 GPUs, is scarce); `best_effort` of
    them best effort; run times lognormal around two hours, at most 90 days."""
    rng = random.Random(seed)
    span = 60 * 86400
    times = sorted(rng.uniform(0, span) for _ in range(count))
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec",
                    "qos", "pod_phase", "creation_time", "deletion_time", "scheduled_time"])
        for i, created in enumerate(times):
            gpus = rng.choices((1, 2, 4, 8), weights=(70, 12, 10, 8))[0]
            milli = rng.choice((250, 500)) if gpus == 1 and rng.random() < 0.5 else 1000
            spec = ""
            if rng.random() < 0.33:
                spec = "|".join(sorted(rng.sample(TYPES, rng.choice((1, 2)))))
            qos = ("BE" if rng.random() < best_effort
                   else rng.choice(("LS", "Guaranteed", "Burstable")))
            run = min(math.exp(rng.gauss(math.log(7200), 2.0)), 90 * 86400)
            start = int(created) + rng.randint(0, 30)
            w.writerow([f"openb-pod-{i:05d}", 4000 * gpus, 16384 * gpus, gpus, milli, spec,
                        qos, "Succeeded", int(created), start + max(int(run), 1), start])


def thinned(src: Path, dst: Path, every: int, key: str | None) -> Path:
    """Every `every`th row of a CSV (per value of column `key`, so each pool keeps nodes)."""
    if every == 1:
        return src
    with open(src, newline="") as fh, open(dst, "w", newline="") as out:
        rows = csv.DictReader(fh)
        w = csv.DictWriter(out, rows.fieldnames)
        w.writeheader()
        seen: dict = {}
        for row in rows:
            k = row[key] if key else None
            seen[k] = seen.get(k, -1) + 1
            if seen[k] % every == 0:
                w.writerow(row)
    return dst


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", help="openb_node_list_all_node.csv (default: synthetic)")
    p.add_argument("--pods", help="an openb_pod_list_*.csv (default: synthetic)")
    p.add_argument("--policies", default="srsf,tiresias", help="the others, comma-separated")
    p.add_argument("--best-effort", type=float, default=0.1,
                   help="the synthetic pods' share of best effort (opportunistic) jobs")
    p.add_argument("--scale", type=int, default=1, help="keep every Nth node and pod")
    p.add_argument("--limit", type=float, default=3600.0, help="seconds per run at most")
    p.add_argument("--work", help="keep the spec and trace here (default: a temporary folder)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.work or tmp)
        work.mkdir(parents=True, exist_ok=True)
        nodes, pods = Path(args.nodes or work / "nodes.csv"), Path(args.pods or work / "pods.csv")
        if args.nodes is None:
            synthetic_nodes(nodes)
        if args.pods is None:
            synthetic_pods(pods, best_effort=args.best_effort)
        nodes = thinned(nodes, work / "nodes-thinned.csv", args.scale, "model")
        pods = thinned(pods, work / "pods-thinned.csv", args.scale, None)
        spec, trace = work / "openb-spec.csv", work / "openb-trace.csv"
        run(["specs.cli", "import", "openb", str(nodes), "--out", str(spec), "--force"])
        run(["traces.cli", "import", "openb", str(pods), "--out", str(trace), "--spec",
             str(spec)])
        seconds = {}
        for policy in ["antman", *args.policies.split(",")]:
            out = child({"trace_file": str(trace), "spec_file": str(spec), "policy": policy,
                         "preset": "default"}, args.limit)
            seconds[policy] = out["cpu_s"]
            print(f"{policy:10} {out['jobs']:6} jobs {out['rounds']:7} rounds "
                  f"{out['cpu_s']:9.1f} CPU s  (avg JCT {out['avg_jct']:.6f} s, makespan "
                  f"{out['makespan']:.6f} s)", flush=True)
    slowest = max(v for k, v in seconds.items() if k != "antman")
    ratio = seconds["antman"] / slowest
    print(f"antman / slowest other: {ratio:.2f}x (target: at most 2x)")
    return 0 if ratio <= 2.0 else 1


if __name__ == "__main__":
    sys.exit(main())
