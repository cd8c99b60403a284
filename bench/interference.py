"""What the interference term changes: Muri-S/SRSF and Muri-L/Tiresias on the artifact's traces,
under the `default` preset without group slowdown, with the shipped factors, and under `paper`.

Run from the repository root:
    python bench/interference.py [--trace-dir DIR] [--workers N] [--json FILE]

The traces are the artifact's trace1-4 and their _pr variants (found in ../shared/reference
and --trace-dir; never part of this repository) on the 64-GPU `n8g8`. Each row gives average
JCT ratios, Muri-S over SRSF and Muri-L over Tiresias (below 1: interleaving pays), for three
models: `default` with no group slowdown (the cyclic model's pace), `default` with the
interference factors it ships (scheduler/core/model.py INTERFERENCE), and `paper` (the
artifact's). SRSF and Tiresias form no groups, so the factors leave them as they are.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from fidelity import find_traces  # noqa: E402
from scheduler.core.model import INTERFERENCE  # noqa: E402
from scheduler.presets import get_preset  # noqa: E402
from scheduler.sim.simulator import simulate  # noqa: E402
from specs import load_spec, spec_path  # noqa: E402
from traces import read_trace  # noqa: E402

REFERENCE = ROOT.parent / "shared" / "reference"
TRACES = [f"trace{i}{s}" for s in ("", "_pr") for i in range(1, 5)]
#: (label, preset, overrides)
MODELS = (("default, no slowdown", "default", {"group_slowdown": {}}),
          ("default, shipped factors", "default", {"group_slowdown": dict(INTERFERENCE)}),
          ("paper", "paper", {}))
PAIRS = (("muri-s", "srsf"), ("muri-l", "tiresias"))


def run_one(trace: str, path: str, label: str, preset: str, overrides: dict,
            policy: str) -> dict:
    started = time.process_time()
    result = simulate(read_trace(path), load_spec(spec_path("n8g8")), policy,
                      get_preset(preset, **overrides))
    return {"trace": trace, "model": label, "policy": policy,
            "avg_jct": result.summary.avg_jct, "cpu_s": time.process_time() - started}


def tasks(found: dict[str, Path]) -> list[tuple]:
    out = []
    for trace, path in found.items():
        for label, preset, overrides in MODELS:
            for policy in ("muri-s", "srsf", "muri-l", "tiresias"):
                if label == "default, shipped factors" and policy in ("srsf", "tiresias"):
                    continue  # no groups: the same run as without slowdown
                out.append((trace, str(path), label, preset, overrides, policy))
    return out


def ratios(rows: list[dict]) -> list[dict]:
    """Per trace and model, Muri-S/SRSF and Muri-L/Tiresias average JCT."""
    jct = {(r["trace"], r["model"], r["policy"]): r["avg_jct"] for r in rows}
    out = []
    for trace in sorted({r["trace"] for r in rows}, key=TRACES.index):
        for label, _, _ in MODELS:
            baseline = "default, no slowdown" if label.startswith("default") else label
            row = {"trace": trace, "model": label}
            for muri, other in PAIRS:
                row[f"{muri}/{other}"] = jct[(trace, label, muri)] / jct[(trace, baseline, other)]
            out.append(row)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace-dir", type=Path, action="append", default=[])
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--json", type=Path, help="write the runs and the ratios here")
    args = ap.parse_args(argv)
    dirs = [*args.trace_dir, REFERENCE]
    found = find_traces(TRACES, dirs)
    if not found:
        ap.error(f"none of {', '.join(TRACES)} in {', '.join(map(str, dirs))}")
    started, rows = time.perf_counter(), []
    todo = tasks(found)
    with ProcessPoolExecutor(max_workers=max(args.workers, 1)) as pool:
        futures = [pool.submit(run_one, *t) for t in todo]
        for done, future in enumerate(as_completed(futures), start=1):
            rows.append(future.result())
            print(f"[{done}/{len(todo)}] {rows[-1]['trace']} {rows[-1]['model']} "
                  f"{rows[-1]['policy']}: {rows[-1]['cpu_s']:.1f} CPU s", file=sys.stderr,
                  flush=True)
    table = ratios(rows)
    print(f"{'trace':10} {'model':26} {'Muri-S/SRSF':>12} {'Muri-L/Tiresias':>16}")
    for r in table:
        print(f"{r['trace']:10} {r['model']:26} {r['muri-s/srsf']:12.3f} "
              f"{r['muri-l/tiresias']:16.3f}")
    print(f"{len(rows)} runs in {time.perf_counter() - started:.0f} s wall; factors "
          f"{dict(INTERFERENCE)}")
    if args.json:
        args.json.write_text(json.dumps({"runs": rows, "ratios": table}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
