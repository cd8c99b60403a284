"""Micro-benchmark of the scheduler's inner loops: order search and max-weight matching.

Run from the repository root:  python bench/bench_matching.py [--sizes 32 64 128 256]
                               python bench/bench_matching.py --replay TRACE.csv [--spec n8g8]

Why: a simulated round evaluates thousands of candidate groups and matches graphs of up to a
few hundred nodes, millions of times per trace, so these figures bound simulation speed.
"""

from __future__ import annotations

import argparse
import itertools
import platform
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scheduler.core import interleave  # noqa: E402
from scheduler.core.matching import max_weight_pairs, matching_weight  # noqa: E402


def per_call(fn, items, min_seconds=0.3):
    """Seconds per call of fn over items, repeated until min_seconds have passed."""
    calls, start = 0, time.perf_counter()
    while True:
        for item in items:
            fn(item)
        calls += len(items)
        elapsed = time.perf_counter() - start
        if elapsed >= min_seconds:
            return elapsed / calls


def random_groups(rng, stages, members, count):
    return [
        tuple(tuple(rng.choice([0.0, 0.0005, rng.uniform(0, 3)]) for _ in range(stages))
              for _ in range(members))
        for _ in range(count)
    ]


def reference_best(group):
    """The straightforward way: every permutation through the readable reference loop."""
    ref = interleave._pipeline_tt_reference if len(group[0]) == 3 else interleave._cyclic_tt_reference
    return min(ref(p) for p in itertools.permutations(group))


def bench_orders(rng):
    print("order search, 4 members (us per call)")
    print(f"  {'model':<22}{'reference':>11}{'uncached':>11}{'cached':>11}{'group_tt':>11}")
    for stages, name in ((3, "pipeline (3-stage)"), (4, "cyclic (4-stage)")):
        groups = random_groups(rng, stages, 4, 2000)
        uncached = interleave.best_order_indices.__wrapped__
        ref = per_call(reference_best, groups[:200])
        raw = per_call(uncached, groups)
        for g in groups:  # warm the cache, then time hits only
            interleave.best_order(g)
        hit = per_call(interleave.best_order, groups)
        one = per_call(interleave.group_tt, groups)
        print(f"  {name:<22}{ref * 1e6:>11.1f}{raw * 1e6:>11.1f}{hit * 1e6:>11.2f}{one * 1e6:>11.2f}")


def bench_matching(rng, sizes, backends, budget):
    print("max_weight_pairs, complete graph, weights in (0.25, 1] (ms per call)")
    print(f"  {'nodes':>6}" + "".join(f"{b:>12}" for b in backends) + "   same optimum")
    for n in sizes:
        table = [[0.0] * n for _ in range(n)]
        for i in range(n):
            for j in range(i + 1, n):
                table[i][j] = rng.uniform(0.25, 1.0)

        def weight(i, j, table=table):
            return table[i][j]

        row, totals = [], []
        for backend in backends:
            start = time.perf_counter()
            pairs = max_weight_pairs(n, weight, backend=backend)
            first = time.perf_counter() - start
            runs, elapsed = 1, first
            while elapsed < budget and runs < 50:
                start = time.perf_counter()
                max_weight_pairs(n, weight, backend=backend)
                elapsed += time.perf_counter() - start
                runs += 1
            row.append(elapsed / runs)
            totals.append(matching_weight(pairs, weight))
        same = all(abs(t - totals[0]) <= 1e-9 * totals[0] for t in totals)
        print(f"  {n:>6}" + "".join(f"{t * 1e3:>12.2f}" for t in row) + f"   {same}")


def profile_like_matrix(rng, n, kinds=40):
    """Directed weights of n candidates drawn from `kinds` job profiles: the tie-heavy
    matrices Muri's paper preset matches (one value per pair of kinds)."""
    kind = [rng.randrange(kinds) for _ in range(n)]
    value = {(a, b): rng.uniform(0.2, 0.5) for a in range(kinds) for b in range(a, kinds)}
    return [0.0 if i == j else value[min(kind[i], kind[j]), max(kind[i], kind[j])]
            for i in range(n) for j in range(n)]


def bench_blossom(rng, sizes, budget):
    """The artifact-compatible matcher: pure Python reference versus the compiled twin."""
    from scheduler.core.blossom import _compiled, blossom_pairs_flat

    print("blossom_pairs_flat, 40 job kinds (ms per call)")
    if _compiled is None:
        print("  scheduler.core._blossom not built: python setup.py build_ext --inplace")
        return
    print(f"  {'nodes':>6}{'python':>12}{'compiled':>12}{'ratio':>8}   same pairs")
    for n in sizes:
        flat = profile_like_matrix(rng, n)
        times, found = [], []
        for compiled in (False, True):
            runs, elapsed = 0, 0.0
            while runs < 1 or (elapsed < budget and runs < 50):
                start = time.perf_counter()
                pairs = blossom_pairs_flat(n, flat, compiled=compiled)
                elapsed += time.perf_counter() - start
                runs += 1
            times.append(elapsed / runs)
            found.append(pairs)
        print(f"  {n:>6}{times[0] * 1e3:>12.2f}{times[1] * 1e3:>12.2f}"
              f"{times[0] / times[1]:>8.1f}   {found[0] == found[1]}")


def record_matchings(trace: str, spec: str, policy: str) -> tuple[list[tuple], float, float]:
    """Every (kinds, m, table, pairs) the paper preset's matcher is asked during one simulation
    of `trace`, that run's CPU seconds (recording included) and its average JCT."""
    from scheduler.core.policies import muri_pairs
    from scheduler.presets import get_preset
    from scheduler.sim.simulator import simulate
    from specs import load_spec, spec_path
    from traces import read_trace

    cluster = load_spec(spec if spec.endswith(".csv") else spec_path(spec))
    records = read_trace(trace, spec=cluster)
    calls: list[tuple] = []
    solve = muri_pairs.blossom_pairs_indexed

    def recording(kinds, m, table):
        pairs = solve(kinds, m, table)
        calls.append((list(kinds), m, list(table), pairs))
        return pairs

    muri_pairs.blossom_pairs_indexed = recording
    try:
        started = time.process_time()
        result = simulate(records, cluster, policy, get_preset("paper"))
        cpu = time.process_time() - started
    finally:
        muri_pairs.blossom_pairs_indexed = solve
    return calls, cpu, result.summary.avg_jct


def bench_replay(trace: str, spec: str, policy: str, sample: int) -> None:
    """Where a Muri paper-preset simulation's matching time goes: how many matchings, of
    what size, how many repeat an earlier one's input exactly, the compiled matcher's CPU
    time on all of them, and the pure-Python twin's on a sample (same pairs checked)."""
    from scheduler.core.blossom import blossom_pairs_indexed

    calls, cpu, avg_jct = record_matchings(trace, spec, policy)
    if not calls:
        print("no matching was run")
        return
    sizes = sorted(len(c[0]) for c in calls)
    print(f"{policy} paper on {Path(trace).name}: {len(calls)} matchings in a {cpu:.1f} CPU s run; "
          f"nodes median {sizes[len(sizes) // 2]}, p90 {sizes[len(sizes) * 9 // 10]}, "
          f"max {sizes[-1]}; kinds max {max(c[1] for c in calls)}; avg JCT {avg_jct!r}")
    seen, repeats, total, repeated = set(), 0, 0.0, 0.0
    for kinds, m, table, pairs in calls:
        start = time.process_time()
        got = blossom_pairs_indexed(kinds, m, table)
        spent = time.process_time() - start
        if got != pairs:
            raise AssertionError("the compiled matcher is not deterministic")
        key = (tuple(kinds), m, tuple(table))
        if key in seen:
            repeats += 1
            repeated += spent
        seen.add(key)
        total += spent
    print(f"  compiled: {total:.2f} CPU s for all; {repeats} repeat an earlier input exactly "
          f"({repeated:.2f} s of it)")
    compare_full_scans(calls)
    step = max(1, len(calls) // sample) if sample else 0
    if step:
        chosen = calls[::step][:sample]
        start = time.process_time()
        same = all(blossom_pairs_indexed(k, m, t, compiled=False) == p for k, m, t, p in chosen)
        slow = time.process_time() - start
        fast = 0.0
        for k, m, t, _ in chosen:
            start = time.process_time()
            blossom_pairs_indexed(k, m, t)
            fast += time.process_time() - start
        print(f"  pure Python on every {step}th ({len(chosen)}): {slow:.2f} CPU s, "
              f"compiled {fast:.2f} s, same pairs: {same}")


def compare_full_scans(calls: list[tuple]) -> None:
    """The compiled matcher as it runs (first searches on tight-edge lists, quiet scans
    settled by kind) against itself scanning every stage in full, on the same inputs:
    CPU seconds of each, alternated twice, and whether every pair list is the same."""
    from scheduler.core.blossom import _compiled

    if _compiled is None:
        return
    spent = {True: 0.0, False: 0.0}
    same = True
    for _ in range(2):
        for carry in (False, True):
            start = time.process_time()
            got = [_compiled.solve_indexed(k, m, t, carry) for k, m, t, _ in calls]
            spent[carry] += time.process_time() - start
            same = same and all(g == c[3] for g, c in zip(got, calls))
    print(f"  compiled, full scans: {spent[False] / 2:.2f} CPU s; on tight lists: "
          f"{spent[True] / 2:.2f} CPU s ({spent[True] / spent[False]:.2f}x); same pairs: {same}")


def bench_whole_graph(sizes, budget):
    """Where pricing pays: max_weight_pairs_dense (assignment prices, then the cheapest
    edges) against matching the whole graph, on near-tie weights as profiles give, sparse
    and full; the dense matcher matches graphs up to WHOLE_GRAPH_EDGES edges whole."""
    import numpy as np

    from scheduler.core import matching

    rng = np.random.default_rng(1)
    print(f"\nwhole graph vs pruned (near-tie weights; whole up to "
          f"{matching.WHOLE_GRAPH_EDGES} edges)")
    print(f"{'n':>5} {'density':>8} {'edges':>7} {'pruned ms':>10} {'whole ms':>9}")
    for n in sizes:
        for density in (0.3, 1.0):
            w = (0.5 + 0.02 * rng.random((n, n))) * (rng.random((n, n)) < density)
            w = np.triu(w, 1)
            w = w + w.T
            rows, cols = np.nonzero(np.triu(w, 1))
            values = w[rows, cols]
            pruned = matching._assignment_prices(w) is not None and per_call(
                lambda _: _pruned(matching, w), [None], budget)
            whole = per_call(lambda _: matching._match_edges(n, rows, cols, values, "auto"),
                             [None], budget)
            print(f"{n:>5} {density:>8} {len(rows):>7} {pruned * 1e3:>10.2f} "
                  f"{whole * 1e3:>9.2f}")


def _pruned(matching, w):
    """max_weight_pairs_dense with the whole-graph shortcut off: the pruned search always."""
    saved, matching.WHOLE_GRAPH_EDGES = matching.WHOLE_GRAPH_EDGES, 0
    try:
        return matching.max_weight_pairs_dense(w, rel_gap=5e-3)
    finally:
        matching.WHOLE_GRAPH_EDGES = saved


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[32, 64, 128, 256])
    parser.add_argument("--backends", nargs="+", default=["rustworkx", "networkx"])
    parser.add_argument("--budget", type=float, default=1.0,
                        help="seconds to spend per (size, backend) after the first run")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--replay", metavar="TRACE.csv",
                        help="instead: record a paper-preset Muri run's matchings and time them")
    parser.add_argument("--spec", default="n8g8", help="cluster for --replay (name or CSV)")
    parser.add_argument("--policy", default="muri-s", help="policy for --replay")
    parser.add_argument("--sample", type=int, default=200,
                        help="matchings the pure-Python twin replays (0: none)")
    parser.add_argument("--whole", action="store_true",
                        help="instead: pruned search against matching the whole graph")
    args = parser.parse_args(argv)
    if args.replay:
        bench_replay(args.replay, args.spec, args.policy, args.sample)
        return
    if args.whole:
        bench_whole_graph(args.sizes, args.budget)
        return
    rng = random.Random(args.seed)
    print(f"python {platform.python_version()} on {platform.machine()}")
    bench_orders(rng)
    bench_matching(rng, args.sizes, args.backends, args.budget)
    bench_blossom(rng, args.sizes, args.budget)


if __name__ == "__main__":
    main()
