"""The compiled matcher against the pure-Python reference on Muri-shaped inputs: many
candidates of a few kinds (every weight a function of the two kinds), weights that tie
exactly, in the last bit, or within the stop test's tolerance.

Why a separate file: those inputs are what Muri's rounds feed the matcher, and they build
deep nested blossoms, blossoms grown and shrunk while a vertex's neighbours are being
scanned, and contractions into any free slot.  The compiled matcher takes shortcuts on
exactly those paths (a packed edge table, a per-scan memo of edges into blossoms that a
grow, shrink or augment must reset), and a shortcut that is wrong only after such a step
shows up as a different choice among tied matchings on a few of these inputs.
"""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core import blossom
from scheduler.core.blossom import blossom_pairs_flat, blossom_pairs_indexed

compiled_only = pytest.mark.skipif(
    blossom._compiled is None,
    reason="scheduler.core._blossom not built (python setup.py build_ext --inplace)")

# efficiencies of a few real merged groups; ties come from reusing them
BASE = [0.2261, 0.2350, 0.3409, 0.3536, 0.5, 1.0]
NUDGES = [1.0, 1.0, 1.0, 1 + 2 ** -52, 1 - 2 ** -53, 1 + 3e-6]


@st.composite
def kind_tables(draw, max_kinds=6, max_nodes=90):
    """(kinds, m, table): n candidates of m kinds, table[x * m + y] the weight of x then y
    (0 now and then: a pair that cannot merge)."""
    m = draw(st.integers(1, max_kinds))
    n = draw(st.integers(0, max_nodes))
    rnd = draw(st.randoms(use_true_random=False))
    table = [rnd.choice(BASE) * rnd.choice(NUDGES) if rnd.random() < 0.9 else 0.0
             for _ in range(m * m)]
    kinds = [rnd.randrange(m) for _ in range(n)]
    return kinds, m, table


@compiled_only
@settings(max_examples=300, deadline=None)
@given(kind_tables())
def test_compiled_equals_reference_on_kind_tables(case):
    kinds, m, table = case
    expected = blossom_pairs_indexed(kinds, m, table, compiled=False)
    assert blossom_pairs_indexed(kinds, m, table, compiled=True) == expected


def seeded_kind_table(seed):
    """One Muri-shaped input from a seed (10..50 candidates of 2..6 kinds)."""
    rnd = random.Random(seed)
    m = rnd.randint(2, 6)
    n = rnd.randint(10, 50)
    table = [rnd.choice(BASE) * rnd.choice(NUDGES) if rnd.random() < 0.9 else 0.0
             for _ in range(m * m)]
    kinds = [rnd.randrange(m) for _ in range(n)]
    return kinds, m, table


# Seeds whose inputs told apart a compiled matcher that kept its memo of edges into blossoms
# across a grow (found by a search over 20,000 seeds: such inputs are rare, so they are
# named here rather than left to chance), then a plain run of consecutive seeds.
DISCRIMINATING_SEEDS = [709, 7695, 10766, 12714, 13040, 16830, 19332]


@compiled_only
@pytest.mark.parametrize("seed", DISCRIMINATING_SEEDS + list(range(150)))
def test_compiled_equals_reference_on_seeded_kind_tables(seed):
    kinds, m, table = seeded_kind_table(seed)
    expected = blossom_pairs_indexed(kinds, m, table, compiled=False)
    assert blossom_pairs_indexed(kinds, m, table, compiled=True) == expected


@compiled_only
def test_matching_is_a_valid_maximum_on_kind_tables():
    """Independent of the reference: every node in at most one pair, and no single
    augmenting swap of two pairs raises the total (a weak optimality check that does not
    rely on either implementation)."""
    rnd = random.Random(7)
    for _ in range(100):
        m = rnd.randint(2, 5)
        n = rnd.randint(4, 40)
        table = [rnd.choice(BASE) for _ in range(m * m)]
        for x in range(m):  # symmetric: "maximum" is only defined for undirected weights
            for y in range(x):
                table[x * m + y] = table[y * m + x]
        kinds = [rnd.randrange(m) for _ in range(n)]
        pairs = blossom_pairs_indexed(kinds, m, table, compiled=True)
        used = [i for pair in pairs for i in pair]
        assert len(used) == len(set(used))
        assert all(i < j for i, j in pairs)

        def w(i, j):
            return table[kinds[i] * m + kinds[j]]

        # with every weight positive, a maximum-weight matching leaves at most one node out
        assert n - len(used) <= 1
        for a in range(len(pairs)):
            for b in range(a + 1, len(pairs)):
                (i, j), (k, l) = pairs[a], pairs[b]
                now = w(i, j) + w(k, l)
                for other in (w(i, k) + w(j, l), w(i, l) + w(j, k)):
                    assert other <= now * (1 + 1e-4)


@compiled_only
def test_flat_entry_point_agrees_on_kind_tables():
    rnd = random.Random(3)
    for _ in range(50):
        m = rnd.randint(2, 5)
        n = rnd.randint(10, 60)
        table = [rnd.choice(BASE) * rnd.choice(NUDGES) for _ in range(m * m)]
        kinds = [rnd.randrange(m) for _ in range(n)]
        flat = [table[x * m + y] for x in kinds for y in kinds]
        assert blossom_pairs_flat(n, flat, compiled=True) == blossom_pairs_flat(
            n, flat, compiled=False)
