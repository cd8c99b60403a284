"""Our `paper` preset against the published Muri numbers, as a table.

Run from the repository root:  python bench/fidelity.py [--traces trace3,trace3_pr]

Reads the artifact's traces and published figures from ../shared/reference/ (never part of
this repository) and prints, per trace and policy, our avg / p99 JCT and makespan, the
published ones, the relative errors and our wall time.
"""
from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scheduler.presets import get_preset  # noqa: E402
from scheduler.simulator import simulate  # noqa: E402
from specs import load_spec  # noqa: E402
from traces import read_trace  # noqa: E402

REFERENCE = ROOT.parent / "shared" / "reference"
POLICIES = ["srtf", "srsf", "tiresias", "themis", "antman", "muri-s", "muri-l"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", default="trace3,trace3_pr")
    ap.add_argument("--policies", default=",".join(POLICIES))
    args = ap.parse_args()
    published_file = REFERENCE / "published_results.csv"
    if not published_file.is_file():
        print(f"no reference data at {REFERENCE}", file=sys.stderr)
        return 1
    with open(published_file) as fh:
        published = {(r["trace"], r["policy"]): r for r in csv.DictReader(fh)}
    spec = load_spec(REFERENCE / "n8g8.csv")
    print(f"{'trace':10} {'policy':9} {'avg JCT s':>12} {'err':>10} {'p99 JCT s':>12} {'err':>10} "
          f"{'makespan s':>12} {'err':>10} {'wall s':>7}")
    for trace in args.traces.split(","):
        records = read_trace(REFERENCE / f"{trace}.csv")
        for policy in args.policies.split(","):
            result = simulate(records, spec, policy, get_preset("paper"))
            s, ref = result.summary, published.get((trace, policy))

            def err(ours: float, key: str) -> str:
                return f"{100 * (ours / float(ref[key]) - 1):+9.4f}%" if ref else "       n/a"

            print(f"{trace:10} {policy:9} {s.avg_jct:12.0f} {err(s.avg_jct, 'avg_jct_s')} "
                  f"{s.p99_jct:12.0f} {err(s.p99_jct, 'p99_jct_s')} {s.makespan:12.0f} "
                  f"{err(s.makespan, 'makespan_s')} {result.wall_s:7.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
