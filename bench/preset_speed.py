"""Muri under the `default` preset against the `paper` preset, side by side in one run.

Run from the repository root:
    python bench/preset_speed.py --trace FILE[,FILE...] [--spec n8g8] [--repeat 3]
        [--policies muri-s,muri-l]

Each (trace, policy) runs under both presets in fresh processes (bench/sim_child.py),
alternating, --repeat times each; the figure is the simulation's CPU seconds, the fastest of
the repeats, so that the machine's load hits both alike. A trace may carry its own spec as
FILE:SPEC (a spec file or a packaged name). The budget (decided): default at most 3x paper.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from specs import spec_path  # noqa: E402


def child(task: dict, limit: float) -> dict:
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "sim_child.py"),
                           json.dumps(task)], cwd=ROOT, capture_output=True, text=True,
                          timeout=limit, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin",
                                              "OMP_NUM_THREADS": "1"})
    if proc.returncode != 0:
        raise SystemExit(f"preset_speed: {task['trace_file']} {task['policy']} "
                         f"{task['preset']}: {proc.stderr.strip()[-300:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trace", required=True, help="trace file(s), comma-separated; FILE:SPEC")
    p.add_argument("--spec", default="n8g8", help="cluster spec file or packaged name")
    p.add_argument("--policies", default="muri-s,muri-l")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--limit", type=float, default=1800.0, help="seconds per run at most")
    args = p.parse_args(argv)
    print(f"{'trace':24} {'policy':8} {'paper s':>8} {'default s':>9} {'default/paper':>13}")
    worst = 0.0
    for item in args.trace.split(","):
        trace, _, spec = item.partition(":")
        spec = spec or args.spec
        spec_file = spec if Path(spec).is_file() else str(spec_path(spec))
        for policy in args.policies.split(","):
            best = {"paper": float("inf"), "default": float("inf")}
            for _ in range(args.repeat):
                for preset in best:
                    run = child({"trace_file": trace, "spec_file": spec_file, "policy": policy,
                                 "preset": preset}, args.limit)
                    best[preset] = min(best[preset], run["cpu_s"])
            ratio = best["default"] / best["paper"]
            worst = max(worst, ratio)
            print(f"{Path(trace).stem + ' ' + Path(spec_file).stem:24} {policy:8} "
                  f"{best['paper']:>8.2f} {best['default']:>9.2f} {ratio:>12.2f}x", flush=True)
    print(f"worst default/paper: {worst:.2f}x (budget: at most 3x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
