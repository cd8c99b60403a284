"""Maximum-weight matching of jobs (or groups) into pairs: step 3 of DESIGN.md section 1.

Maximum *weight*, not maximum cardinality: leaving a job single is better than pairing it
badly, which is the whole point of weighting edges by the merged group's efficiency.

Two interchangeable backends run the same exact blossom algorithm: networkx (pure Python,
the readable reference) and rustworkx (Rust, about a hundred times faster, but integer
weights only).  ``brute_force_pairs`` is the oracle the tests hold both against.
"""

from __future__ import annotations

import functools
from typing import Callable

import numpy as np

Weight = Callable[[int, int], float]
Pair = tuple[int, int]

BACKENDS = ("auto", "networkx", "rustworkx")
#: rustworkx needs integers: the heaviest edge maps to this, the rest in proportion, so the
#: rounding error stays ~1e-12 of the heaviest edge whatever unit the weights are in.
INT_SCALE = 1e12
#: brute_force_pairs enumerates every matching; beyond this it would take too long.
BRUTE_FORCE_MAX_NODES = 10
#: max_weight_pairs_dense tries graphs of about these many edges per node before the last one.
TRY_EDGES_PER_NODE = (4, 16)
#: ... and matches a graph of at most this many edges whole: below it, pricing the edges
#: costs more than the matching it would prune (bench/bench_matching.py --whole).
WHOLE_GRAPH_EDGES = 1500


def _edges(n: int, weight: Weight) -> list[tuple[int, int, float]]:
    """The graph's edges: every pair i<j with a positive weight (weight is asked once each)."""
    edges = []
    for i in range(n):
        for j in range(i + 1, n):
            w = weight(i, j)
            if w > 0:
                edges.append((i, j, w))
    return edges


@functools.lru_cache(maxsize=1)
def _rustworkx_available() -> bool:
    try:
        import rustworkx  # noqa: F401
    except ImportError:
        return False
    return True


def _match_networkx(n: int, edges: list) -> set:
    import networkx as nx

    graph = nx.Graph()
    graph.add_nodes_from(range(n))
    graph.add_weighted_edges_from(edges)
    return nx.max_weight_matching(graph, maxcardinality=False)


def _match_rustworkx(n: int, rows: np.ndarray, cols: np.ndarray, values: np.ndarray) -> set:
    """Integer weights (rustworkx needs them), scaled in one numpy pass (see INT_SCALE)."""
    import rustworkx as rx

    scaled = np.rint(values * (INT_SCALE / values.max())).astype(np.int64)
    graph = rx.PyGraph(multigraph=False)
    graph.add_nodes_from(range(n))
    graph.add_edges_from(list(zip(rows.tolist(), cols.tolist(), scaled.tolist())))
    return rx.max_weight_matching(graph, max_cardinality=False, weight_fn=int)


def max_weight_pairs(n: int, weight: Weight, *, backend: str = "auto") -> list[Pair]:
    """Pairs (i, j), i < j, sorted by i, of a maximum-weight matching on nodes 0..n-1.

    An edge exists iff weight(i, j) > 0; weight must be symmetric and is called for i < j only
    (the "blossom" backend asks both directions, as the artifact did: its float weights differ
    in the last bit between directions, and that decides between tied matchings).
    ``backend`` is "networkx", "rustworkx", or "auto" (rustworkx when installed); or
    "blossom", the pure-Python matcher of scheduler.core.blossom that breaks ties (and treats
    weights within a relative 1e-5 as tied) exactly as the Muri artifact does.
    """
    if backend == "blossom":
        from scheduler.core.blossom import blossom_pairs

        return blossom_pairs(n, weight)
    if backend not in BACKENDS:
        raise ValueError(f"unknown matching backend {backend!r}; choose from {BACKENDS}")
    if n < 0:
        raise ValueError(f"node count must be >= 0, got {n}")
    edges = _edges(n, weight)
    if not edges:
        return []
    if backend == "auto":
        backend = "rustworkx" if _rustworkx_available() else "networkx"
    if backend == "rustworkx":
        rows, cols, values = (np.array(column) for column in zip(*edges))
        matched = _match_rustworkx(n, rows, cols, values.astype(float))
    else:
        matched = _match_networkx(n, edges)
    return sorted((min(u, v), max(u, v)) for u, v in matched)


def brute_force_pairs(n: int, weight: Weight) -> list[Pair]:
    """Exhaustive maximum-weight matching: the obviously-correct oracle for tests (n <= 10)."""
    if not 0 <= n <= BRUTE_FORCE_MAX_NODES:
        raise ValueError(f"brute force takes 0..{BRUTE_FORCE_MAX_NODES} nodes, got {n}")
    w = {(i, j): x for i, j, x in _edges(n, weight)}

    @functools.cache
    def best(free: frozenset) -> tuple[float, tuple]:
        """Heaviest matching among the free nodes: the lowest one stays single or pairs up."""
        if len(free) < 2:
            return 0.0, ()
        i = min(free)
        rest = free - {i}
        top = best(rest)
        for j in sorted(rest):
            if (i, j) in w:
                total, pairs = best(rest - {j})
                if total + w[i, j] > top[0]:
                    top = (total + w[i, j], ((i, j),) + pairs)
        return top

    return sorted(best(frozenset(range(n)))[1])


def matching_weight(pairs: list[Pair], weight: Weight) -> float:
    """Total weight of a matching, for comparing backends and oracles."""
    return sum(weight(i, j) for i, j in pairs)


def max_weight_pairs_dense(weights: np.ndarray, *, backend: str = "auto",
                           rel_gap: float = 0.0) -> list[Pair]:
    """Pairs (i, j), i < j, sorted, of a maximum-weight matching given as a weight matrix.

    The same optimum as max_weight_pairs on the full graph, found on a much smaller one: the
    assignment relaxation (a C solver) gives node prices y with y_i + y_j >= w_ij and sum(y)
    >= the best matching; an edge of any optimal matching has reduced cost y_i + y_j - w_ij
    at most sum(y) minus a matching's weight, so every other edge can be left out without
    changing the optimum. Big rounds match hundreds of candidates; this keeps them fast.
    ``weights`` must be square, symmetric, finite and >= 0 (the diagonal is ignored).

    With ``rel_gap`` > 0 a matching proven within that fraction of the optimum's weight is
    good enough: where the bound is loose (near-ties forming odd cycles) proving exactness
    costs a dense matching, and weights estimated from measured profiles are not that exact.
    """
    if not 0.0 <= rel_gap < 1.0:
        raise ValueError(f"rel_gap must be in [0, 1), got {rel_gap}")
    w = np.array(weights, dtype=float)
    n = len(w)
    if w.ndim != 2 or w.shape != (n, n):
        raise ValueError(f"weights must be a square matrix, got shape {w.shape}")
    if not np.isfinite(w).all() or (w < 0).any() or not np.array_equal(w, w.T):
        raise ValueError("weights must be finite, non-negative and symmetric")
    np.fill_diagonal(w, 0.0)
    rows, cols = np.nonzero(np.triu(w, 1))
    if _whole(n, len(rows)):
        return _match_edges(n, rows, cols, w[rows, cols], backend)
    tol = 1e-9 * (1.0 + float(w.max()))
    prices = _assignment_prices(w)
    if prices is None:  # round-off broke the certificate: fall back to the whole graph
        return _match_edges(n, rows, cols, w[rows, cols], backend)
    bound = float(prices.sum())
    reduced = prices[rows] + prices[cols] - w[rows, cols]
    # Growing graphs of the cheapest edges: each matching's weight proves which edges may
    # matter (reduced cost <= bound - weight); stop once one is proven optimal or, with
    # rel_gap, close enough; the last try takes every edge that may matter, so it is exact.
    pairs: list[Pair] = []
    for per_node in TRY_EDGES_PER_NODE:
        budget = per_node * n
        if budget >= len(reduced):
            break
        cut = np.partition(reduced, budget)[budget]
        keep = reduced <= cut + tol
        pairs = _match_edges(n, rows[keep], cols[keep], w[rows[keep], cols[keep]], backend)
        slack = bound - _weight_of(pairs, w)
        if slack <= cut + tol or slack <= rel_gap * bound:
            return pairs
    slack = bound - _weight_of(pairs, w) if pairs else np.inf
    keep = reduced <= slack + tol
    return _match_edges(n, rows[keep], cols[keep], w[rows[keep], cols[keep]], backend)


def max_weight_pairs_edges(n: int, rows: np.ndarray, cols: np.ndarray, values: np.ndarray, *,
                           backend: str = "auto", rel_gap: float = 0.0) -> list[Pair]:
    """max_weight_pairs_dense for a graph given by its edges (rows[k] < cols[k] < n, in
    row-major order, values[k] > 0): the same pairs, without an n x n matrix where the
    graph is sparse enough to be matched whole (the common case of a few merges that pay)."""
    if _whole(n, len(rows)):
        if len(rows) and not (np.all(rows < cols) and cols.max() < n and rows.min() >= 0
                              and np.isfinite(values).all() and values.min() > 0):
            raise ValueError("edges must be pairs i < j < n with finite positive weights")
        return _match_edges(n, rows, cols, values, backend)
    w = np.zeros((n, n))
    w[rows, cols] = values
    w[cols, rows] = values
    return max_weight_pairs_dense(w, backend=backend, rel_gap=rel_gap)


def _whole(n: int, edges: int) -> bool:
    """Whether a graph is small enough to match whole rather than price and prune."""
    return edges <= max(TRY_EDGES_PER_NODE[0] * n, WHOLE_GRAPH_EDGES)


def _assignment_prices(w: np.ndarray) -> np.ndarray | None:
    """Prices y >= 0 with y_i + y_j >= w_ij and sum(y) = half the best assignment of w (a
    bound on every matching), from the assignment's dual; None if they fail the check."""
    from scipy.optimize import linear_sum_assignment

    n = len(w)
    _, col = linear_sum_assignment(w, maximize=True)
    own = w[np.arange(n), col]
    # Column potentials v of the min-cost dual: v_j <= v[col[i]] + own_i - w_ij for all i, j
    # (shortest paths; Bellman-Ford converges within n sweeps since the assignment is optimal).
    # Round-off can leave a zero-cost cycle a hair negative; changes below `settle` end the
    # loop, and the check below decides whether the prices are good enough.
    step = own[:, None] - w
    tol = 1e-9 * (1.0 + float(w.max()))
    settle = tol / (4 * n)
    v = np.zeros(n)
    for _ in range(n + 1):
        relaxed = np.minimum(v, (v[col][:, None] + step).min(axis=0))
        if not (v - relaxed).max() > settle:
            break
        v = relaxed
    else:
        return None
    prices = (own + v[col] - v) / 2
    slack = prices[:, None] + prices[None, :] - w
    np.fill_diagonal(slack, 0.0)
    if slack.min() < -tol or prices.min() < -tol:
        return None
    return np.maximum(prices, 0.0)


def _match_edges(n: int, r: np.ndarray, c: np.ndarray, values: np.ndarray,
                 backend: str) -> list[Pair]:
    if backend == "auto":
        backend = "rustworkx" if _rustworkx_available() else "networkx"
    if backend not in ("rustworkx", "networkx"):
        raise ValueError(f"max_weight_pairs_dense takes rustworkx, networkx or auto, got {backend!r}")
    if len(r) == 0:
        return []
    if backend == "rustworkx":
        matched = _match_rustworkx(n, r, c, values)
    else:
        matched = _match_networkx(n, list(zip(r.tolist(), c.tolist(), values.tolist())))
    return sorted((min(u, v), max(u, v)) for u, v in matched)


def _weight_of(pairs: list[Pair], w: np.ndarray) -> float:
    return float(sum(w[i, j] for i, j in pairs))
