"""Churn per arrival: how many running jobs one single arrival stops, moves or regroups.

The case of bench_service.py (N nodes of 8 GPUs, a backlog of long jobs submitted at t=0,
then single arrivals, one round each) run on the core alone, so that what is counted is
what the policy decides, not what the machine's load does to a live round. Each arrival's
round is compared with what ran before it by the core's own plan comparison (`Plan.changes`):

* restarts: the running jobs whose trainers stop (stopped, moved, or restarted in another
  group) plus those regrouped (in place for an emulated trainer, a restart for a torch one);
* starts: jobs that start.

Run from the repository root:
    python bench/churn.py [--nodes 256] [--jobs 5000] [--arrivals 60] [--policy muri-s]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scheduler.core.engine import Core  # noqa: E402
from scheduler.core.plan_changes import Change  # noqa: E402
from scheduler.plugins import make_policy  # noqa: E402
from scheduler.presets import get_preset  # noqa: E402
from specs.spec import load_spec  # noqa: E402
from traces.generate import generate  # noqa: E402

GPUS_PER_NODE = 8
STOPPING = (Change.STOP, Change.MOVE, Change.RESTART)


def restarts(plan) -> dict:
    """The changes of one round that restart or start jobs, by kind."""
    kinds = plan.changes.kinds
    return {"stopped": sum(1 for k in kinds.values() if k in STOPPING),
            "regrouped": sum(1 for k in kinds.values() if k is Change.REGROUP),
            "started": sum(1 for k in kinds.values() if k is Change.START)}


def run(nodes: int, jobs: int, arrivals: int, policy: str, preset: str, spec_dir: Path,
        gap: float, settle: int = 0, cpus: int = 32, window: int | None = None) -> dict:
    spec_file = spec_dir / "spec.csv"
    spec_file.write_text("num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\n"
                         f"1,{nodes},{GPUS_PER_NODE},{cpus},256\n")
    chosen = get_preset(preset, **({} if window is None else {"muri_matching_window": window}))
    core = Core(load_spec(spec_file), make_policy(policy, chosen), chosen.model)
    records = generate(jobs + arrivals, seed=11, max_gpus=8, backlog=True,
                       median_duration=10 * 86400.0, min_duration=86400.0)
    for rec in records[:jobs]:
        core.submit(rec, 0.0)
    core.round(0.0)
    now, settling = 0.0, []
    for _ in range(settle):  # rounds without arrivals: what the first plan still moves
        now += gap
        core.advance(now)
        settling.append(sum(restarts(core.round(now)).values()))
    rows, planning = [], []
    for rec in records[jobs:]:
        now += gap
        core.advance(now)
        core.submit(rec, now)
        began = time.perf_counter()
        plan = core.round(now)
        planning.append((time.perf_counter() - began) * 1000.0)
        rows.append(restarts(plan))
        print(f"arrival {len(rows)}: {rows[-1]}, {planning[-1]:.0f} ms", file=sys.stderr)
    per = {key: statistics.mean(r[key] for r in rows) for key in rows[0]}
    windowed = "" if window is None else f", matching window {window}"
    return {"case": f"{policy} ({preset}{windowed}), {nodes} nodes x {GPUS_PER_NODE} GPUs x "
                    f"{cpus} CPUs, {jobs} queued, "
                    f"{arrivals} arrivals {gap:g} s apart after {settle} rounds without",
            "settling_changes": settling,
            "restarts_per_arrival": round(per["stopped"] + per["regrouped"], 2),
            "stopped_per_arrival": round(per["stopped"], 2),
            "regrouped_per_arrival": round(per["regrouped"], 2),
            "started_per_arrival": round(per["started"], 2),
            "largest": max(r["stopped"] + r["regrouped"] for r in rows),
            "planning_median_ms": round(statistics.median(planning), 1),
            "planning_max_ms": round(max(planning), 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=256)
    ap.add_argument("--jobs", type=int, default=5000, help="backlog submitted at t=0")
    ap.add_argument("--arrivals", type=int, default=60)
    ap.add_argument("--policy", default="muri-s")
    ap.add_argument("--preset", default="default")
    ap.add_argument("--gap", type=float, default=1.0, help="seconds between arrivals")
    ap.add_argument("--settle", type=int, default=0,
                    help="rounds without arrivals before the first (the backlog's first plan "
                         "settling is not counted against an arrival)")
    ap.add_argument("--cpus", type=int, default=32,
                    help="CPUs a node (default 32, the tables' case: its 8-GPU jobs, asking "
                         "48, never run; 92 as the project's 8-GPU specs runs them)")
    ap.add_argument("--window", type=int, default=None,
                    help="Muri's matching window (candidates of a class matched together; "
                         "default: the preset's)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        print(json.dumps(run(args.nodes, args.jobs, args.arrivals, args.policy, args.preset,
                             Path(tmp), args.gap, args.settle, args.cpus, args.window)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
