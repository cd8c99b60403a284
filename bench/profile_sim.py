"""Where a simulation's time goes: cProfile of one scaling-benchmark run, top functions.

Run from the repository root:
    python bench/profile_sim.py [--jobs 10000] [--policy muri-s] [--preset default]
                                [--seconds S] [--top 25] [--save FILE]
The trace and cluster are the scaling benchmark's for that many jobs (bench/scaling.py). With
--seconds the run is stopped there and the profile covers what ran so far, so a run too long
to finish still shows where its time goes.
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import signal
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))
sys.path.insert(0, str(BENCH))

from scheduler.core.presets import get_preset  # noqa: E402
from scheduler.sim.simulator import Simulator  # noqa: E402
from traces import generate  # noqa: E402

import scaling  # noqa: E402


class _Stop(Exception):
    """Raised by the alarm to end a capped run."""


def _alarm(signum, frame):
    raise _Stop


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--policy", default="muri-s")
    ap.add_argument("--preset", default="default")
    ap.add_argument("--seconds", type=int, default=0, help="stop the run after this long")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--save", help="also write the raw profile here (for snakeviz, pstats)")
    args = ap.parse_args()
    records = generate(**scaling.trace_args(args.jobs))
    sim = Simulator(records, scaling.cluster_for(args.jobs), args.policy,
                    get_preset(args.preset))
    rounds = []
    sim.progress = lambda finished, n: rounds.append(finished)
    profile = cProfile.Profile()
    if args.seconds:
        signal.signal(signal.SIGALRM, _alarm)
        signal.alarm(args.seconds)
    started = time.perf_counter()
    profile.enable()
    try:
        sim.run()
        state = "finished"
    except _Stop:
        state = f"stopped at {args.seconds} s"
    finally:
        profile.disable()
        signal.alarm(0)
    wall = time.perf_counter() - started
    print(f"{args.policy} {args.preset}, {args.jobs} jobs on "
          f"{scaling.cluster_for(args.jobs).total_gpus} GPUs: {state}, {len(rounds)} events "
          f"({rounds[-1] if rounds else 0} jobs done) in {wall:.1f} s under the profiler")
    stats = pstats.Stats(profile)
    if args.save:
        stats.dump_stats(args.save)
    stats.sort_stats("tottime").print_stats(args.top)
    stats.sort_stats("cumulative").print_stats(args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
