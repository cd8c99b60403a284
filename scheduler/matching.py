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

Weight = Callable[[int, int], float]
Pair = tuple[int, int]

BACKENDS = ("auto", "networkx", "rustworkx")
#: rustworkx needs integers: the heaviest edge maps to this, the rest in proportion, so the
#: rounding error stays ~1e-12 of the heaviest edge whatever unit the weights are in.
INT_SCALE = 1e12
#: brute_force_pairs enumerates every matching; beyond this it would take too long.
BRUTE_FORCE_MAX_NODES = 10


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


def _match_rustworkx(n: int, edges: list) -> set:
    import rustworkx as rx

    scale = INT_SCALE / max(w for _, _, w in edges)
    graph = rx.PyGraph(multigraph=False)
    graph.add_nodes_from(range(n))
    graph.add_edges_from([(i, j, round(w * scale)) for i, j, w in edges])
    return rx.max_weight_matching(graph, max_cardinality=False, weight_fn=int)


def max_weight_pairs(n: int, weight: Weight, *, backend: str = "auto") -> list[Pair]:
    """Pairs (i, j), i < j, sorted by i, of a maximum-weight matching on nodes 0..n-1.

    An edge exists iff weight(i, j) > 0; weight must be symmetric and is called for i < j only
    (the "blossom" backend asks both directions, as the artifact did: its float weights differ
    in the last bit between directions, and that decides between tied matchings).
    ``backend`` is "networkx", "rustworkx", or "auto" (rustworkx when installed); or
    "blossom", the pure-Python matcher of scheduler.blossom that breaks ties (and treats
    weights within a relative 1e-5 as tied) exactly as the Muri artifact does.
    """
    if backend == "blossom":
        from scheduler.blossom import blossom_pairs

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
    matched = _match_rustworkx(n, edges) if backend == "rustworkx" else _match_networkx(n, edges)
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
