"""Which merges Muri should take: the shipped gain rule against the alternatives the
literature offers, on the load sweep's points.

Run from the repository root:
    python bench/merge_rules.py [--openb FILE] [--trace-dir DIR] [--families ...]
        [--workers N] [--json FILE]

Rules, each deciding per prospective merge of two packings a (earlier expected start) and b
from the planner's own figures (muri_outlook.packing_stats: iteration time, expected start,
remaining iterations, jobs waiting behind):

* `gain 10%`: shipped under `default` (muri_outlook.gain_pays): every merge whose group does
  at least 10% more work per second than its two packings alone; `gain 20%` likewise;
* `completion`: muri_outlook.merge_pays, each merge weighed by the expected completions over
  the merged group's life (until its first member ends);
* `whole life`: the same, with each member slowed until its own end (a long member's
  slowdown over its whole remaining life counts against the merge);
* `every merge`: the paper's efficiency rule (any merge while demand exceeds the cluster);
* `fairness guard`: every merge, unless it slows the higher-priority packing (the earlier
  start) by more than GUARD (its iteration time in the group over alone);
* `queued with long`: only a waiting packing with one that starts now and has at least
  LONG times its remaining time left (the long job absorbs the slowdown);
* `load adaptive`: every merge, but only while at least the cluster's GPUs' worth of jobs
  wait behind the pair (a threshold on the queue, not on the pair).

Each rule runs with Muri-S and Muri-L under `default` (the alternatives replace the rule's
test in a worker process of their own); the table gives the average and p99 JCT against
SRSF and Tiresias at each point, and the worst over all points.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from load_sweep import cluster, points  # noqa: E402
from scheduler.presets import get_preset  # noqa: E402
from scheduler.sim.simulator import simulate  # noqa: E402

GUARD = 1.25  # the fairness guard's largest slowdown of the higher-priority packing
LONG = 2.0  # how much longer the running packing must have left than the waiting one
POINTS = {"generated": ("gap 2400 s", "gap 1200 s", "gap 600 s"),
          "philly": ("times x1", "times x0.25"), "openb": ("32 GPUs", "16 GPUs"),
          "paper": ("trace1", "trace3_pr")}
RULES = ("gain 10%", "completion", "whole life", "every merge", "gain 20%",
         "fairness guard", "queued with long", "load adaptive")


def _columns(stats: np.ndarray) -> tuple[np.ndarray, ...]:
    return tuple(stats.T)  # tt, start, members, sum n, max n, behind, min n


def fairness_guard(a, b, tt_ab, gpus, total_gpus):
    tt_a, w_a, *_ = _columns(a)
    tt_b, w_b, *_ = _columns(b)
    first = np.where(w_a <= w_b, tt_a, tt_b)
    return tt_ab <= GUARD * first


def queued_with_long(a, b, tt_ab, gpus, total_gpus):
    tt_a, w_a, _, _, max_a, *_ = _columns(a)
    tt_b, w_b, _, _, max_b, *_ = _columns(b)
    left_a, left_b = tt_a * max_a, tt_b * max_b
    return (((w_a == 0) & (w_b > 0) & (left_a >= LONG * left_b))
            | ((w_b == 0) & (w_a > 0) & (left_b >= LONG * left_a)))


def whole_life(a, b, tt_ab, gpus, total_gpus):
    """The completion rule with each member slowed until its own end, not the pair's: a
    long member's slowdown over its whole remaining life counts against the merge."""
    tt_a, w_a, count_a, sum_a, max_a, behind_a, _ = _columns(a)
    tt_b, w_b, count_b, sum_b, max_b, behind_b, _ = _columns(b)
    later = np.where(w_b >= w_a, count_b, count_a)
    waited = np.abs(w_b - w_a)
    waited = np.where(np.isfinite(waited), waited, 0.0)
    saved = tt_a * max_a + tt_b * max_b - tt_ab * np.maximum(max_a, max_b)
    delta = (sum_a * (tt_ab - tt_a) + sum_b * (tt_ab - tt_b) - later * waited
             - np.minimum(behind_a, behind_b) * gpus / total_gpus * saved)
    return delta < 0


def load_adaptive(a, b, tt_ab, gpus, total_gpus):
    behind = np.minimum(_columns(a)[5], _columns(b)[5])
    return behind * gpus >= total_gpus


def by_index(rule):
    """`rule` over the packings' own rows as the planner calls a merge rule: with the
    window's stats and the merges' row and column indices (muri_outlook.merge_pays)."""
    def pays(stats, rows, cols, tt_ab, gpus, total_gpus):
        return rule(stats[rows], stats[cols], tt_ab, gpus, total_gpus)
    return pays


ALTERNATIVES = {"whole life": whole_life, "fairness guard": fairness_guard, "queued with long": queued_with_long,
                "load adaptive": load_adaptive}


def run_one(task: tuple) -> dict:
    family, point, records, gpus, policy, rule = task
    overrides = {}
    if rule == "every merge":
        overrides["muri_merge_rule"] = "efficiency"
    elif rule == "gain 20%":
        overrides["muri_merge_gain"] = 0.2
    elif rule == "completion":
        overrides["muri_merge_rule"] = "completion"
    elif rule in ALTERNATIVES:  # in the completion rule's place
        overrides["muri_merge_rule"] = "completion"
        import scheduler.core.policies.muri_pairs as muri_pairs

        muri_pairs.merge_pays = by_index(ALTERNATIVES[rule])  # a worker runs one task (see main)
    result = simulate(records, cluster(gpus), policy, get_preset("default", **overrides))
    s = result.summary
    return {"family": family, "point": point, "policy": policy, "rule": rule,
            "avg_jct": s.avg_jct, "p99_jct": s.p99_jct, "wall_s": result.wall_s}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--families", default=",".join(POINTS))
    p.add_argument("--openb", help="openb pod list CSV, or a trace imported from it")
    p.add_argument("--trace-dir", action="append", default=[], type=Path)
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    p.add_argument("--jobs", type=int, default=2000, help="jobs per generated trace")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    families = tuple(args.families.split(","))
    chosen = [pt for pt in points(families, args.openb, args.trace_dir, args.jobs)
              if pt[1] in POINTS[pt[0]]]
    tasks = []
    for family, point, records, gpus in chosen:
        tasks += [(family, point, records, gpus, base, "base") for base in ("srsf", "tiresias")]
        tasks += [(family, point, records, gpus, policy, rule)
                  for policy in ("muri-s", "muri-l") for rule in RULES]
    with ProcessPoolExecutor(args.workers, max_tasks_per_child=1) as pool:
        rows = list(pool.map(run_one, tasks))
    if args.json:
        args.json.write_text("".join(json.dumps(r) + "\n" for r in rows))
    base = {(r["family"], r["point"], r["policy"]): r for r in rows if r["rule"] == "base"}
    against = {"muri-s": "srsf", "muri-l": "tiresias"}
    print(f"{'point':24} {'policy':7} " + " ".join(f"{rule:>17}" for rule in RULES))
    worst: dict[tuple, float] = {}
    for family, point, *_ in chosen:
        for policy, ref in against.items():
            b = base[(family, point, ref)]
            cells = []
            for rule in RULES:
                r = next(x for x in rows if (x["family"], x["point"], x["policy"],
                                             x["rule"]) == (family, point, policy, rule))
                avg, p99 = r["avg_jct"] / b["avg_jct"], r["p99_jct"] / b["p99_jct"]
                worst[(policy, rule)] = max(worst.get((policy, rule), 0.0), avg)
                cells.append(f"{avg:>8.3f} {p99:>8.3f}")
            print(f"{family + ' ' + point:24} {policy:7} " + " ".join(cells))
    print("(each cell: average, p99 JCT over the base policy's)")
    for policy in against:
        print(f"worst average, {policy}: " + ", ".join(
            f"{rule} {worst[(policy, rule)]:.3f}" for rule in RULES))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
