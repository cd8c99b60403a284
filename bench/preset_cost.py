"""What `default`'s Muri costs in CPU against `paper`'s, on the same traces in one run.

Run from the repository root:
    python bench/preset_cost.py [--repeat N]

The budget (decided for the simulator's speed): `default`-preset Muri may take up to 3x the
`paper` preset's CPU seconds. Each trace (the packaged philly_1k on 64 GPUs, a generated
1,000-job trace, and the paper's testbed trace and the artifact's trace3 where
../shared/reference has them) runs Muri-S and Muri-L under both presets, alternating, the
best of N CPU times (time.process_time) kept for each; the table gives the ratio.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scheduler.presets import get_preset  # noqa: E402
from scheduler.sim.simulator import simulate  # noqa: E402
from specs import load_spec, spec_path  # noqa: E402
from specs.spec import ClusterSpec  # noqa: E402
from traces import default_trace_path, read_trace  # noqa: E402
from traces.generate import generate  # noqa: E402

REFERENCE = ROOT.parent / "shared" / "reference"


def cases():
    n64 = ClusterSpec(1, 8, 8, 92, 520)
    out = [("philly_1k, 64 GPUs", read_trace(default_trace_path("philly_1k")), n64),
           ("generated 1,000, gap 600 s", generate(1000, 7, mean_interarrival=600), n64)]
    testbed = REFERENCE / "testbed"
    if (testbed / "cluster_trace.csv").is_file():
        out.append(("testbed trace", read_trace(testbed / "cluster_trace.csv"),
                    load_spec(testbed / "testbed_n8g8.csv")))
    if (REFERENCE / "trace3.csv").is_file():
        out.append(("trace3", read_trace(REFERENCE / "trace3.csv"), load_spec(spec_path("n8g8"))))
    return out


def cpu(records, spec, policy, preset) -> float:
    start = time.process_time()
    simulate(records, spec, policy, preset)
    return time.process_time() - start


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    presets = {name: get_preset(name) for name in ("paper", "default")}
    print(f"{'trace':28} {'policy':7} {'paper s':>8} {'default s':>9} {'ratio':>6}")
    worst = 0.0
    for label, records, spec in cases():
        for policy in ("muri-s", "muri-l"):
            best = {name: float("inf") for name in presets}
            for _ in range(args.repeat):
                for name, preset in presets.items():
                    best[name] = min(best[name], cpu(records, spec, policy, preset))
            ratio = best["default"] / best["paper"]
            worst = max(worst, ratio)
            print(f"{label:28} {policy:7} {best['paper']:>8.2f} {best['default']:>9.2f} "
                  f"{ratio:>5.2f}x")
    print(f"worst ratio {worst:.2f}x (budget 3x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
