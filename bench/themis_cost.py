"""Where a Themis `paper` run's time goes: ECOS's solves, the SCS fallback, the rest.

Run from the repository root:
    python bench/themis_cost.py TRACE.csv [--spec n8g8] [--seconds S]
Under `paper` every scheduling event solves the artifact's fairness program with ECOS (SCS
through cvxpy where ECOS fails, as the artifact does), so a run's cost is set by how many
programs it solves, their size (the queue: one job, one column pair and a cone each) and
ECOS's iterations. This prints those, and the CPU seconds inside ECOS, inside the fallback and
elsewhere, so a claim about what a faster Themis could gain can be checked against them. With
--seconds the run stops after that much CPU and the figures cover what ran (a partial run of
the largest traces). Times are this process's CPU seconds, which load inflates less than wall.
"""
from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))
sys.path.insert(0, str(BENCH))

import ecos  # noqa: E402

from scheduler.core.policies import themis  # noqa: E402
from scheduler.core.policies.themis_ecos import SOLVED_FLAGS  # noqa: E402
from scheduler.presets import get_preset  # noqa: E402
from scheduler.sim.simulator import simulate  # noqa: E402
from specs import load_spec, spec_path  # noqa: E402
from traces import read_trace  # noqa: E402

ITERATION_CAP = 100  # ECOS's default max_iters, the one cvxpy (and so the artifact) uses


class _Stop(Exception):
    """Raised by the CPU timer to end a capped run."""


def _alarm(signum, frame):
    raise _Stop


@contextlib.contextmanager
def timed_solvers(solves: list, fallbacks: list):
    """Record each ECOS call as (jobs, CPU s, iterations) and, for each allocation where ECOS
    failed, the CPU s of the rest of it (the SCS fallback); the originals are restored on
    exit."""
    solve, allocate = ecos.solve, themis.ftf_allocation_artifact
    failed: list = []

    def timed_solve(c, G, h, dims, **kwargs):
        started = time.process_time()
        out = solve(c, G, h, dims, **kwargs)
        solves.append((len(dims["q"]), time.process_time() - started, out["info"]["iter"]))
        failed.append(out["info"]["exitFlag"] not in SOLVED_FLAGS)
        return out

    def timed_allocate(*args):
        before, started = len(solves), time.process_time()
        x = allocate(*args)
        if failed[-1]:
            fallbacks.append(time.process_time() - started
                             - sum(s[1] for s in solves[before:]))
        return x

    ecos.solve, themis.ftf_allocation_artifact = timed_solve, timed_allocate
    try:
        yield
    finally:
        ecos.solve, themis.ftf_allocation_artifact = solve, allocate


def summary(solves: list, fallbacks: list, total: float) -> dict:
    """The figures printed: counts, sizes, iterations, CPU split."""
    jobs = sum(s[0] for s in solves)
    ecos_cpu = sum(s[1] for s in solves)
    capped = [s for s in solves if s[2] >= ITERATION_CAP]
    return {
        "programs": len(solves), "job_columns": jobs,
        "mean_jobs": jobs / max(len(solves), 1),
        "mean_iterations": sum(s[2] for s in solves) / max(len(solves), 1),
        "at_iteration_cap": len(capped), "cpu_at_cap": sum(s[1] for s in capped),
        "ecos_cpu": ecos_cpu,
        "us_per_job_iteration": 1e6 * ecos_cpu / max(sum(s[0] * s[2] for s in solves), 1),
        "fallbacks": len(fallbacks), "fallback_cpu": sum(fallbacks),
        "rest_cpu": total - ecos_cpu - sum(fallbacks), "total_cpu": total,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--spec", default="n8g8")
    ap.add_argument("--seconds", type=int, default=0, help="stop after this many CPU seconds")
    args = ap.parse_args()
    records, spec = read_trace(args.trace), load_spec(spec_path(args.spec))
    solves: list = []
    fallbacks: list = []
    result = None
    if args.seconds:
        signal.signal(signal.SIGPROF, _alarm)
        signal.setitimer(signal.ITIMER_PROF, args.seconds)
    started = time.process_time()
    with timed_solvers(solves, fallbacks):
        try:
            result = simulate(records, spec, "themis", get_preset("paper"))
        except _Stop:
            pass
    signal.setitimer(signal.ITIMER_PROF, 0)
    total = time.process_time() - started
    figures = summary(solves, fallbacks, total)
    print(f"{args.trace.name}: " + ("complete, avg JCT " + repr(result.summary.avg_jct)
                                   if result else f"stopped after {args.seconds} CPU s"))
    for key, value in figures.items():
        print(f"  {key:22} {value:.6g}" if isinstance(value, float) else f"  {key:22} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
