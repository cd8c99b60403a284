"""The compiled matcher's carried scan (tight-edge lists kept from stage to stage while the
vertex duals stand still) against the same matcher scanning every stage in full and against
the pure-Python reference: the same pairs, and the carried path really taken.

Why: the carried scan visits only tight edges and leaves best[] as it was, on the claim that
a stage's grows, shrinks and augmentation depend on nothing else; a stage that ends up
needing best[] must get it exactly as the full scan leaves it.  Any slip shows up as a
different choice among tied matchings on Muri-shaped inputs, which these are.
"""

import pytest
from hypothesis import given, settings

from scheduler.core import blossom
from scheduler.core.blossom import blossom_pairs_indexed
from tests.test_blossom_kinds import DISCRIMINATING_SEEDS, kind_tables, seeded_kind_table

compiled = blossom._compiled
compiled_only = pytest.mark.skipif(
    compiled is None,
    reason="scheduler.core._blossom not built (python setup.py build_ext --inplace)")


def both_ways(kinds, m, table):
    """(pairs, counts) with the carried scan, pairs without it."""
    carried, counts = compiled.solve_indexed(kinds, m, table, True, True)
    full = compiled.solve_indexed(kinds, m, table, False)
    return carried, counts, full


@compiled_only
@settings(max_examples=300, deadline=None)
@given(kind_tables(max_kinds=8, max_nodes=120))
def test_carried_scan_picks_the_full_scans_pairs(case):
    kinds, m, table = case
    carried, _, full = both_ways(kinds, m, table)
    assert carried == full


@compiled_only
def test_carried_scan_is_taken_and_agrees_with_the_reference():
    """On seeded Muri-shaped inputs: equal to the pure-Python twin, and over the set both
    kinds of carried stage occur (augmenting on the lists; ending in a dual update), so the
    equality above covers them."""
    totals = [0, 0, 0]
    for seed in DISCRIMINATING_SEEDS + list(range(120)):
        kinds, m, table = seeded_kind_table(seed)
        carried, counts, full = both_ways(kinds, m, table)
        assert carried == full == blossom_pairs_indexed(kinds, m, table, compiled=False)
        totals = [a + b for a, b in zip(totals, counts)]
    stages, augmented_on_lists, put_back = totals
    assert augmented_on_lists > stages // 10
    assert put_back > 0


@compiled_only
def test_carry_flag_and_counts_on_trivial_inputs():
    assert compiled.solve(0, [], True, True) == ([], (0, 0, 0))
    assert compiled.solve(2, [0.0, 1.0, 1.0, 0.0], False) == [(0, 1)]
    pairs, (stages, _, _) = compiled.solve(2, [0.0, 1.0, 1.0, 0.0], True, True)
    assert pairs == [(0, 1)] and stages >= 1
