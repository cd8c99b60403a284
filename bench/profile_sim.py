"""Where a simulation's time goes: cProfile of one scaling-benchmark run, top functions.

Run from the repository root:
    python bench/profile_sim.py [--jobs 10000] [--policy muri-s] [--preset default]
                                [--seconds S] [--top 25] [--save FILE]
The trace and cluster are the scaling benchmark's for that many jobs (bench/scaling.py). With
--seconds the run is stopped there and the profile covers what ran so far, so a run too long
to finish still shows where its time goes. Times are CPU seconds of this process (the
profiler's clock and the --seconds cap alike), so a machine busy with other work does not
inflate them.
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

from scheduler.presets import get_preset  # noqa: E402
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
    ap.add_argument("--seconds", type=int, default=0,
                    help="stop the run after this many CPU seconds")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--save", help="also write the raw profile here (for snakeviz, pstats)")
    args = ap.parse_args()
    records = generate(**scaling.trace_args(args.jobs))
    sim = Simulator(records, scaling.cluster_for(args.jobs), args.policy,
                    get_preset(args.preset))
    rounds = []
    sim.progress = lambda finished, n: rounds.append(finished)
    profile = cProfile.Profile(time.process_time)
    if args.seconds:
        signal.signal(signal.SIGPROF, _alarm)
        signal.setitimer(signal.ITIMER_PROF, args.seconds)
    started = time.process_time()
    profile.enable()
    try:
        sim.run()
        state = "finished"
    except _Stop:
        state = f"stopped at {args.seconds} s"
    finally:
        profile.disable()
        signal.setitimer(signal.ITIMER_PROF, 0)
    cpu = time.process_time() - started
    print(f"{args.policy} {args.preset}, {args.jobs} jobs on "
          f"{scaling.cluster_for(args.jobs).total_gpus} GPUs: {state}, {len(rounds)} events "
          f"({rounds[-1] if rounds else 0} jobs done) in {cpu:.1f} CPU s under the profiler")
    stats = pstats.Stats(profile)
    if args.save:
        stats.dump_stats(args.save)
    stats.sort_stats("tottime").print_stats(args.top)
    stats.sort_stats("cumulative").print_stats(args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
