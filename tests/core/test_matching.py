"""Both matching backends against the exhaustive oracle (scheduler.core.matching)."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers import graphs
import numpy as np

import scheduler.core.matching as matching
from scheduler.core.matching import (
    BACKENDS,
    brute_force_pairs,
    matching_weight,
    max_weight_pairs,
    max_weight_pairs_dense,
)

BACKEND_NAMES = ["networkx", "rustworkx", "auto"]

def weight_fn(table, calls=None):
    def weight(i, j):
        assert i < j, "weight must be asked for i < j only"
        if calls is not None:
            calls.append((i, j))
        return table[i, j]

    return weight


def assert_valid(pairs, n, table):
    assert pairs == sorted(pairs)
    seen = set()
    for i, j in pairs:
        assert 0 <= i < j < n
        assert table[i, j] > 0, "only existing (positive) edges may be matched"
        assert i not in seen and j not in seen, "a node is matched twice"
        seen.update((i, j))


@settings(max_examples=300, deadline=None)
@given(graphs())
def test_backends_reach_the_brute_force_optimum(graph):
    n, table = graph
    weight = weight_fn(table)
    best = matching_weight(brute_force_pairs(n, weight), weight)
    for backend in BACKEND_NAMES:
        pairs = max_weight_pairs(n, weight, backend=backend)
        assert_valid(pairs, n, table)
        assert matching_weight(pairs, weight) == pytest.approx(best, rel=1e-9, abs=1e-12)


@settings(max_examples=100, deadline=None)
@given(graphs())
def test_brute_force_is_a_valid_matching(graph):
    n, table = graph
    assert_valid(brute_force_pairs(n, weight_fn(table)), n, table)


@given(graphs(max_nodes=8), st.sampled_from(BACKEND_NAMES))
def test_weight_is_asked_once_per_pair(graph, backend):
    n, table = graph
    calls = []
    max_weight_pairs(n, weight_fn(table, calls), backend=backend)
    assert sorted(calls) == sorted(table)


@pytest.mark.parametrize("backend", BACKEND_NAMES)
def test_maximum_weight_not_maximum_cardinality(backend):
    # path 0-1-2-3 weighted 1, 3, 1: two pairs weigh 2, the middle edge alone weighs 3
    table = {(0, 1): 1.0, (1, 2): 3.0, (2, 3): 1.0, (0, 2): 0.0, (0, 3): 0.0, (1, 3): 0.0}
    assert max_weight_pairs(4, weight_fn(table), backend=backend) == [(1, 2)]
    assert brute_force_pairs(4, weight_fn(table)) == [(1, 2)]


@pytest.mark.parametrize("backend", BACKEND_NAMES)
def test_no_edges_no_pairs(backend):
    assert max_weight_pairs(0, lambda i, j: 1.0, backend=backend) == []
    assert max_weight_pairs(1, lambda i, j: 1.0, backend=backend) == []
    assert max_weight_pairs(5, lambda i, j: 0.0, backend=backend) == []
    assert max_weight_pairs(5, lambda i, j: -1.0, backend=backend) == []


@pytest.mark.parametrize("scale", [1e-12, 1e-3, 1.0, 1e6])
def test_integer_scaling_keeps_rustworkx_optimal_at_any_unit(scale):
    rng = random.Random(7)
    n = 9
    table = {(i, j): rng.choice([0.0, rng.random()]) * scale for i in range(n) for j in range(i + 1, n)}
    weight = weight_fn(table)
    best = matching_weight(brute_force_pairs(n, weight), weight)
    got = matching_weight(max_weight_pairs(n, weight, backend="rustworkx"), weight)
    assert got == pytest.approx(best, rel=1e-9)


@pytest.mark.parametrize("n", [17, 40])
def test_backends_agree_on_larger_graphs(n):
    rng = random.Random(n)
    table = {(i, j): rng.choice([0.0, 0.5, rng.random()]) for i in range(n) for j in range(i + 1, n)}
    weight = weight_fn(table)
    totals = []
    for backend in ("networkx", "rustworkx"):
        pairs = max_weight_pairs(n, weight, backend=backend)
        assert_valid(pairs, n, table)
        totals.append(matching_weight(pairs, weight))
    assert totals[0] == pytest.approx(totals[1], rel=1e-9)


def test_bad_arguments_raise():
    with pytest.raises(ValueError):
        max_weight_pairs(3, lambda i, j: 1.0, backend="nope")
    with pytest.raises(ValueError):
        max_weight_pairs(-1, lambda i, j: 1.0)
    with pytest.raises(ValueError):
        brute_force_pairs(11, lambda i, j: 1.0)
    assert set(BACKEND_NAMES) == set(BACKENDS)


# ---------------------------------------------------------------- the dense (pruned) matcher

def as_matrix(n, table):
    w = np.zeros((n, n))
    for (i, j), x in table.items():
        w[i, j] = w[j, i] = max(x, 0.0)
    return w


@st.composite
def dense_graphs(draw, min_nodes=10, max_nodes=36):
    """Big enough that the pruned tries run (4n edges < all edges); ties and holes included."""
    n = draw(st.integers(min_nodes, max_nodes))
    seed = draw(st.integers(0, 2**32 - 1))
    kind = draw(st.sampled_from(["uniform", "ties", "sparse", "near-ties"]))
    rng = np.random.default_rng(seed)
    if kind == "uniform":
        w = rng.random((n, n))
    elif kind == "ties":
        w = rng.choice([0.25, 0.5, 1.0], size=(n, n))
    elif kind == "sparse":
        w = rng.random((n, n)) * (rng.random((n, n)) < 0.2)
    else:  # efficiencies within a few percent of each other, as real profiles give
        w = 0.5 + 0.02 * rng.random((n, n))
    w = np.triu(w, 1)
    return n, w + w.T


@settings(max_examples=200, deadline=None)
@given(graphs())
def test_dense_reaches_the_brute_force_optimum(graph):
    n, table = graph
    w = as_matrix(n, table)
    weight = weight_fn(table)
    best = matching_weight(brute_force_pairs(n, weight), weight)
    pairs = max_weight_pairs_dense(w)
    assert_valid(pairs, n, table)
    assert matching_weight(pairs, weight) == pytest.approx(best, rel=1e-9, abs=1e-12)


@settings(max_examples=60, deadline=None)
@given(dense_graphs())
def test_dense_is_exact_on_larger_graphs(graph):
    n, w = graph
    table = {(i, j): w[i, j] for i in range(n) for j in range(i + 1, n)}
    weight = weight_fn(table)
    best = matching_weight(max_weight_pairs(n, weight, backend="networkx"), weight)
    for backend in ("networkx", "rustworkx"):
        pairs = max_weight_pairs_dense(w, backend=backend)
        assert_valid(pairs, n, table)
        assert matching_weight(pairs, weight) == pytest.approx(best, rel=1e-9, abs=1e-12)


@settings(max_examples=60, deadline=None)
@given(dense_graphs(), st.sampled_from([1e-3, 5e-3, 0.05]))
def test_dense_with_a_gap_stays_within_it(graph, rel_gap):
    n, w = graph
    table = {(i, j): w[i, j] for i in range(n) for j in range(i + 1, n)}
    weight = weight_fn(table)
    best = matching_weight(max_weight_pairs(n, weight, backend="rustworkx"), weight)
    pairs = max_weight_pairs_dense(w, rel_gap=rel_gap)
    assert_valid(pairs, n, table)
    assert matching_weight(pairs, weight) >= (1 - rel_gap) * best - 1e-9


def test_dense_matches_a_small_graph_when_the_bound_is_tight(monkeypatch):
    """Two complementary kinds of job: the assignment bound is exact, so the first try over
    4n edges is proven optimal and the full graph (n^2/2 edges) is never handed over."""
    rng = np.random.default_rng(3)
    n = 120
    kind = np.arange(n) % 2
    w = np.where(kind[:, None] != kind[None, :], 0.9, 0.4) + 0.01 * rng.random((n, n))
    w = np.triu(w, 1)
    w = w + w.T
    sizes = []
    real = matching._match_edges

    def spy(n_, rows, cols, values, backend):
        sizes.append(len(rows))
        return real(n_, rows, cols, values, backend)

    monkeypatch.setattr(matching, "_match_edges", spy)
    pairs = max_weight_pairs_dense(w)
    assert len(pairs) == n // 2
    assert all(kind[i] != kind[j] for i, j in pairs)
    assert sizes and max(sizes) <= 4 * n + 1 < n * (n - 1) // 2


def test_dense_bad_input_raises():
    with pytest.raises(ValueError):
        max_weight_pairs_dense(np.ones((2, 3)))
    with pytest.raises(ValueError):
        max_weight_pairs_dense(np.array([[0.0, 1.0], [2.0, 0.0]]))  # not symmetric
    with pytest.raises(ValueError):
        max_weight_pairs_dense(np.array([[0.0, -1.0], [-1.0, 0.0]]))
    with pytest.raises(ValueError):
        max_weight_pairs_dense(np.array([[0.0, np.nan], [np.nan, 0.0]]))
    with pytest.raises(ValueError):
        max_weight_pairs_dense(np.zeros((3, 3)), rel_gap=1.0)
    with pytest.raises(ValueError):
        max_weight_pairs_dense(np.ones((3, 3)), backend="blossom")
    assert max_weight_pairs_dense(np.zeros((0, 0))) == []
    assert max_weight_pairs_dense(np.zeros((4, 4))) == []
    assert max_weight_pairs_dense(np.eye(3)) == []  # the diagonal is not an edge
