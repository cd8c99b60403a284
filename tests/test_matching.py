"""Both matching backends against the exhaustive oracle (scheduler.matching)."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers import graphs
from scheduler.matching import (
    BACKENDS,
    brute_force_pairs,
    matching_weight,
    max_weight_pairs,
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
