"""The compiled matcher (scheduler.core._blossom) against its pure-Python reference: the same
pairs on every input, ties and near-ties included, and the fallback when it is absent."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core import blossom
from scheduler.core.blossom import blossom_pairs, blossom_pairs_flat, blossom_pairs_indexed
from tests.core.test_blossom import ARTIFACT_TIE_CASES, COUNTER1_WEIGHTS, weight_fn

compiled_only = pytest.mark.skipif(
    blossom._compiled is None,
    reason="scheduler.core._blossom not built (python setup.py build_ext --inplace)")

# A few values that tie exactly, their neighbours in the last bit, values within the
# 1e-5 relative tolerance of the stop test, and plain random ones: ties are where two
# implementations that differ in any float operation or traversal step part ways.
BASE = [0.2261, 0.2350, 0.3409, 0.3536, 0.5, 1.0]


def nudged(x, kind):
    if kind == "ulp+":
        return x * (1 + 2 ** -52)
    if kind == "ulp-":
        return x * (1 - 2 ** -53)
    if kind == "near":
        return x * (1 + 3e-6)
    return x


weight_value = st.one_of(
    st.just(0.0),
    st.builds(nudged, st.sampled_from(BASE), st.sampled_from(["", "", "ulp+", "ulp-", "near"])),
    st.floats(min_value=1e-6, max_value=1.0, allow_nan=False),
)


@st.composite
def directed_matrices(draw, max_nodes=60):
    """(n, flat n*n weights) where weight(j, i) is weight(i, j) or a last-bit neighbour,
    as Muri's sums over "i's jobs then j's" give."""
    n = draw(st.integers(0, max_nodes))
    palette = draw(st.lists(weight_value, min_size=1, max_size=8))
    density = draw(st.sampled_from([0.1, 0.5, 1.0]))
    rnd = draw(st.randoms(use_true_random=False))
    flat = [0.0] * (n * n)
    for i in range(n):
        for j in range(i + 1, n):
            if rnd.random() < density:
                w = rnd.choice(palette)
                flat[i * n + j] = w
                flat[j * n + i] = nudged(w, rnd.choice(["", "", "ulp+", "ulp-"]))
    return n, flat


@compiled_only
@settings(max_examples=200, deadline=None)
@given(directed_matrices())
def test_compiled_equals_reference(matrix):
    n, flat = matrix
    assert blossom_pairs_flat(n, flat, compiled=True) == blossom_pairs_flat(n, flat, compiled=False)


@compiled_only
def test_compiled_equals_reference_on_many_ties():
    """Dense graphs drawn from four tie values (the Muri weights of one job mix): the
    matchings of equal weight are many, and only the traversal order picks one."""
    rng = random.Random(3)
    for _ in range(150):
        n = rng.randint(2, 60)
        values = rng.sample(BASE, 4)
        flat = [0.0] * (n * n)
        for i in range(n):
            for j in range(i + 1, n):
                if rng.random() < 0.8:
                    flat[i * n + j] = flat[j * n + i] = rng.choice(values)
        reference = blossom_pairs_flat(n, flat, compiled=False)
        assert blossom_pairs_flat(n, flat, compiled=True) == reference


@compiled_only
@pytest.mark.parametrize("n, table, expected", ARTIFACT_TIE_CASES)
def test_compiled_artifact_tie_breaking(n, table, expected):
    assert blossom_pairs(n, weight_fn(table), compiled=True) == expected


@pytest.mark.parametrize("n, table, expected", ARTIFACT_TIE_CASES)
def test_reference_artifact_tie_breaking(n, table, expected):
    assert blossom_pairs(n, weight_fn(table), compiled=False) == expected


@pytest.mark.parametrize("compiled", [
    False, pytest.param(True, marks=compiled_only)])
def test_real_matrix_with_last_bit_asymmetry_both_ways(compiled):
    w = COUNTER1_WEIGHTS
    pairs = blossom_pairs(11, lambda i, j: w[i][j], compiled=compiled)
    assert pairs == [(0, 3), (1, 8), (2, 9), (4, 7), (6, 10)]


@compiled_only
def test_compiled_on_matrices_recorded_from_real_rounds(monkeypatch):
    """Every matrix Muri's paper preset matches in a short simulation, solved both ways."""
    from scheduler.core.policies import muri_pairs
    from scheduler.presets import get_preset
    from scheduler.sim.simulator import simulate
    from tests.helpers import spec

    recorded = []

    def record(kinds, m, table, **kwargs):
        recorded.append((list(kinds), m, list(table)))
        return blossom_pairs_indexed(kinds, m, table, **kwargs)

    monkeypatch.setattr(muri_pairs, "blossom_pairs_indexed", record)
    records = _contended_trace(random.Random(7), 80)
    simulate(records, spec(2, 8), "muri-s", get_preset("paper"))
    assert len(recorded) > 10 and max(len(kinds) for kinds, _, _ in recorded) >= 8
    for kinds, m, table in recorded:
        n = len(kinds)
        flat = [table[x * m + y] for x in kinds for y in kinds]
        expected = blossom_pairs_flat(n, flat, compiled=False)
        assert blossom_pairs_flat(n, flat, compiled=True) == expected
        assert blossom_pairs_indexed(kinds, m, table, compiled=True) == expected


def _contended_trace(rng, count):
    """Jobs of a few profiles arriving together on a small cluster: rounds with many
    candidates of one GPU count, so the matcher has work and ties."""
    from tests.helpers import job

    profiles = [(0.5, 0.2, 0.1), (0.1, 0.6, 0.1), (0.2, 0.2, 0.4), (0.3, 0.1, 0.3)]
    return [job(i, num_gpu=rng.choice([1, 2, 4]), submit=float(rng.randint(0, 50)),
                stages=rng.choice(profiles), iterations=rng.randint(200, 2000))
            for i in range(count)]


def test_pure_path_when_the_extension_is_absent(monkeypatch):
    """Without the compiled module the default runs the reference; asking for the
    compiled one then says what is missing."""
    table = {(0, 1): 0.5, (1, 2): 0.5, (0, 2): 0.5}
    expected = blossom_pairs(3, weight_fn(table), compiled=False)
    monkeypatch.setattr(blossom, "_compiled", None)
    assert blossom_pairs(3, weight_fn(table)) == expected
    with pytest.raises(ImportError):
        blossom_pairs(3, weight_fn(table), compiled=True)


@pytest.mark.parametrize("compiled", [
    False, pytest.param(True, marks=compiled_only)])
def test_flat_input_checked(compiled):
    with pytest.raises(ValueError):
        blossom_pairs_flat(3, [0.0] * 8, compiled=compiled)
    with pytest.raises(ValueError):
        blossom_pairs_flat(-1, [], compiled=compiled)
    assert blossom_pairs_flat(0, [], compiled=compiled) == []
    # the diagonal is ignored, an edge needs a weight > 0 in the direction read
    assert blossom_pairs_flat(2, [9.0, 0.0, 0.0, 9.0], compiled=compiled) == []
    assert blossom_pairs_flat(2, [0.0, 0.5, 0.5, 0.0], compiled=compiled) == [(0, 1)]


@pytest.mark.parametrize("compiled", [
    False, pytest.param(True, marks=compiled_only)])
def test_indexed_equals_the_expanded_table(compiled):
    """Nodes of a few kinds (weights by kind pair, directed): the same pairs as the table
    expanded to n x n by hand, with kinds repeated and in any order."""
    rng = random.Random(9)
    for _ in range(60):
        m = rng.randint(1, 6)
        table = [rng.choice([0.0, 0.2261, 0.235, 0.3536, rng.uniform(0.1, 0.5)])
                 for _ in range(m * m)]
        kinds = [rng.randrange(m) for _ in range(rng.randint(0, 40))]
        n = len(kinds)
        flat = [table[x * m + y] for x in kinds for y in kinds]
        expected = blossom_pairs_flat(n, flat, compiled=False)
        assert blossom_pairs_indexed(kinds, m, table, compiled=compiled) == expected


@pytest.mark.parametrize("compiled", [
    False, pytest.param(True, marks=compiled_only)])
def test_indexed_input_checked(compiled):
    with pytest.raises(ValueError):
        blossom_pairs_indexed([0, 2], 2, [0.5] * 4, compiled=compiled)
    with pytest.raises(ValueError):
        blossom_pairs_indexed([0, 1], 2, [0.5] * 3, compiled=compiled)
