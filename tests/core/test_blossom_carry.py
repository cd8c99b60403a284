"""The compiled matcher's first search on tight-edge lists (search_tight: quiet scans left
out, their best[] settled afterwards by kind) against the same matcher scanning every stage
in full and against the pure-Python reference: the same pairs, and the short path taken.

Why: search_tight runs only the scans that grow, shrink or augment, on the claim that those
steps depend on nothing the left-out scans write; when a stage goes on to a dual update,
settle_quiet must give best[] exactly what the full scans would have (the first cheapest in
scan order, after each index's last reset).  Any slip shows up as a different choice among
tied matchings on Muri-shaped inputs, which these are.
"""

import pytest
from hypothesis import given, settings

from scheduler.core import blossom
from scheduler.core.blossom import blossom_pairs_indexed
from tests.core.test_blossom_kinds import DISCRIMINATING_SEEDS, kind_tables, seeded_kind_table

compiled = blossom._compiled
compiled_only = pytest.mark.skipif(
    compiled is None,
    reason="scheduler.core._blossom not built (python setup.py build_ext --inplace)")


def both_ways(kinds, m, table):
    """(pairs, counts) with search_tight, pairs without it."""
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
    """On seeded Muri-shaped inputs: equal to the pure-Python twin, and most first-search
    scans are left out (quiet) while some are not, so both paths are covered."""
    totals = [0, 0, 0]
    for seed in DISCRIMINATING_SEEDS + list(range(120)):
        kinds, m, table = seeded_kind_table(seed)
        carried, counts, full = both_ways(kinds, m, table)
        assert carried == full == blossom_pairs_indexed(kinds, m, table, compiled=False)
        totals = [a + b for a, b in zip(totals, counts)]
    stages, scans, quiet = totals
    assert stages > 0 and scans - quiet > 0
    assert quiet > scans // 2


@compiled_only
def test_carry_flag_and_counts_on_trivial_inputs():
    assert compiled.solve(0, [], True, True) == ([], (0, 0, 0))
    assert compiled.solve(2, [0.0, 1.0, 1.0, 0.0], False) == [(0, 1)]
    pairs, (stages, _, _) = compiled.solve(2, [0.0, 1.0, 1.0, 0.0], True, True)
    assert pairs == [(0, 1)] and stages >= 1


@compiled_only
@pytest.mark.parametrize("big", [1e308, float("inf")])
def test_weights_whose_dual_sums_overflow_take_the_plain_lists(big):
    """Skipping a kind by its least dual relies on finite sums of duals; with weights near
    the float limit (or infinite) the lists are built edge by edge, and the pairs are still
    the full scans' and the reference's."""
    kinds = [0, 1, 2, 0, 1, 2, 1]
    table = [0.5, big, 0.25, big, 0.5, 0.75, 0.25, 0.75, 0.0]
    carried, _, full = both_ways(kinds, 3, table)
    assert carried == full == blossom_pairs_indexed(kinds, 3, table, compiled=False)
