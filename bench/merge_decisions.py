"""Which merges Muri makes and declines on the paper's testbed trace, and what the testbed's
own logs say of them.

Run from the repository root:
    python bench/merge_decisions.py [--testbed DIR] [--round-interval S] [--json FILE]

For each variant (the model and rule `default` shipped before calibration; today's model
with the completion rule, with every merge (the paper's rule) and with today's gain rule), Muri-S and Muri-L replay the testbed's trace on its cluster at its round period;
every merge the matching offers the rule is counted as made or declined. Against the
testbed's logs (DIR/<Policy>-job.csv): how long each job held its GPUs over its time alone
(the testbed's median says how much of their lives its jobs spent interleaved), and the
average JCT. Nothing here is a test: the figures go to EXPERIMENTS.md#calibration.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from types import MappingProxyType

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import scheduler.core.policies.muri_pairs as muri_pairs  # noqa: E402
from merge_rules import by_index, whole_life  # noqa: E402
from scheduler.core.model import RESTART_OVERHEAD  # noqa: E402
from scheduler.presets import get_preset  # noqa: E402
from scheduler.sim.simulator import simulate  # noqa: E402
from scheduler.tools.runlogs import find_testbed, read_testbed_jobs  # noqa: E402
from specs.spec import load_spec  # noqa: E402
from traces.muri_csv import read_trace  # noqa: E402

REFERENCE = ROOT.parent / "shared" / "reference" / "testbed"
#: the model `default` shipped before calibration: the artifact's factors on the cyclic
#: model, the per-model overhead table, and the rule that charged a member's slowdown over
#: its whole remaining life
BEFORE = {"group_slowdown": MappingProxyType({2: 1.33, 3: 1.5, 4: 1.37}),
          "overhead_table": RESTART_OVERHEAD, "overhead_default": 10.0}


class Counting:
    """A merge rule that counts what the rule it wraps decides (in the completion rule's
    place; the gain rule's verdicts are counted by wrapping gain_pays the same way)."""

    def __init__(self, rule):
        self.rule, self.made, self.declined = rule, 0, 0

    def __call__(self, stats, rows, cols, tt_ab, gpus, total_gpus, *gain):
        pays = self.rule(stats, rows, cols, tt_ab, gpus, total_gpus, *gain)
        self.made += int(pays.sum())
        self.declined += int(pays.size - pays.sum())
        return pays


def replay(records, spec, policy, preset, rule, period):
    counting = Counting(rule)
    muri_pairs.merge_pays = counting
    muri_pairs.gain_pays = Counting(GAIN)
    gain = muri_pairs.gain_pays
    groups: set[tuple[int, ...]] = set()

    def note(now, plan, core):
        groups.update(tuple(sorted(g.jobs)) for g in plan.groups if len(g.jobs) > 1)

    try:
        result = simulate(records, spec, policy, preset, on_round=note, round_interval=period)
    finally:
        muri_pairs.merge_pays, muri_pairs.gain_pays = ORIGINAL, GAIN
    counting.made += gain.made
    counting.declined += gain.declined
    return result, counting, groups


ORIGINAL, GAIN = muri_pairs.merge_pays, muri_pairs.gain_pays


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--testbed", type=Path, default=REFERENCE)
    p.add_argument("--round-interval", type=float, default=360.0)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    trace, spec_file, files = find_testbed(args.testbed)
    records, spec = read_trace(trace), load_spec(spec_file)
    completion = {"muri_merge_rule": "completion"}
    variants = {"before": (get_preset("default", **BEFORE, **completion), by_index(whole_life)),
                "completion": (get_preset("default", **completion), ORIGINAL),
                "every merge": (get_preset("default", muri_merge_rule="efficiency"), ORIGINAL),
                "now": (get_preset("default"), ORIGINAL)}
    rows = []
    for policy in ("muri-s", "muri-l"):
        log = read_testbed_jobs(files[policy], policy)
        real_stretch = float(np.median([j.running / j.alone for j in log.jobs.values()
                                        if j.alone > 0]))
        real_avg = float(np.mean([j.jct for j in log.jobs.values()]))
        for name, (preset, rule) in variants.items():
            result, counted, groups = replay(records, spec, policy, preset, rule,
                                             args.round_interval)
            stretch = float(np.median([o.running / o.alone for o in result.outcomes
                                       if o.alone and o.running is not None]))
            grouped = len({j for g in groups for j in g})
            rows.append({"policy": policy, "variant": name, "offered": counted.made
                         + counted.declined, "made": counted.made,
                         "declined": counted.declined, "groups": len(groups),
                         "jobs_grouped": grouped, "stretch_median": stretch,
                         "testbed_stretch_median": real_stretch,
                         "avg_jct_vs_testbed": result.summary.avg_jct / real_avg})
    print(f"{'policy':7} {'variant':11} {'offered':>8} {'made':>7} {'declined':>8} "
          f"{'groups':>6} {'jobs':>5} {'held/alone':>10} {'testbed':>7} {'avg JCT':>8}")
    for r in rows:
        print(f"{r['policy']:7} {r['variant']:11} {r['offered']:>8} {r['made']:>7} "
              f"{r['declined']:>8} {r['groups']:>6} {r['jobs_grouped']:>5} "
              f"{r['stretch_median']:>10.2f} {r['testbed_stretch_median']:>7.2f} "
              f"{r['avg_jct_vs_testbed']:>7.2f}x")
    print("(offered: merges the matching put to the rule, summed over rounds; groups: distinct "
          "groups of 2+ jobs the plans ran; jobs: jobs that ran in one; held/alone: median "
          "over jobs of the seconds each held GPUs over its time alone; avg JCT: against the "
          "testbed's)")
    if args.json:
        args.json.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
