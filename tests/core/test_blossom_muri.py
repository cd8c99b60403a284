"""Muri's weight rows for the artifact-compatible matcher: every ordered pair's weight as
the pair-by-pair path gives it, bit for bit, however the rows are shared and reused."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core.matching import max_weight_pairs
from scheduler.plugins import make_policy
from scheduler.core.policies.muri_pairs import _together
from scheduler.presets import get_preset
from scheduler.core.state import Job
from tests.helpers import job

# few distinct profiles, as in a trace (rows are shared by profile); one unmeasured
PROFILES = [(0.5, 0.2, 0.1), (0.1, 0.6, 0.1), (0.2, 0.2, 0.4), (0.0, 0.0, 0.0),
            (0.3, 0.1, 0.3)]


def make_nodes(rnd, count, together):
    """Packings of one to three jobs (later matching rounds see merged ones), some whose
    members run together now."""
    jobs = []
    for i in range(count):
        p = rnd.choice(PROFILES)
        rec = job(i, stages=p, iteration_time=sum(p) or 1.0)
        jobs.append(Job(record=rec, solo_time=sum(p) or 1.0, profile=p, remaining=100.0,
                        remaining_estimate=100.0 * (sum(p) or 1.0)))
    nodes, rest = [], list(jobs)
    while rest:
        size = min(len(rest), rnd.choice([1, 1, 2, 3]))
        node, rest = rest[:size], rest[size:]
        if together and rnd.random() < 0.5:
            key = tuple(j.id for j in node)
            for j in node:
                j.group_key = key
        nodes.append(node)
    return nodes


def pairwise(policy, nodes, bonus):
    """The pair-by-pair weight of scheduler.core.policies.muri before rows existed."""
    def weight(i, j):
        if len(nodes[i]) + len(nodes[j]) > policy.k:
            return 0.0
        value = policy.pairing.efficiency(nodes[i], nodes[j], ("x", i, j))
        if bonus is not None and _together(nodes[i], nodes[j]):
            value *= 1.0 + max(bonus[i], bonus[j])
        return value
    return weight


@settings(max_examples=100, deadline=None)
@given(st.integers(2, 14), st.randoms(use_true_random=False), st.sampled_from([0.0, 0.1]))
def test_rows_equal_pairwise_weights_in_both_directions(count, rnd, hysteresis):
    policy = make_policy("muri-s", get_preset("paper", muri_regroup_hysteresis=hysteresis))
    for _ in range(3):  # later calls read rows remembered by earlier ones, in other orders
        nodes = make_nodes(rnd, count, together=bool(hysteresis))
        rnd.shuffle(nodes)
        n = len(nodes)
        bonus = [policy.pairing.keep_bonus(node) for node in nodes] if hysteresis else None
        flat = policy.pairing.weight_rows(nodes, bonus)
        weight = pairwise(policy, nodes, bonus)
        assert len(flat) == n * n
        for i in range(n):
            for j in range(n):
                if i != j:
                    assert flat[i * n + j] == weight(i, j), (i, j)


def test_rows_keep_the_last_bit_of_each_direction():
    """Two jobs of different profiles merged in either order: the weight is the sum in
    member order, and the rows keep both (the matcher reads both)."""
    rnd = random.Random(4)
    policy = make_policy("muri-s", get_preset("paper"))
    for _ in range(200):
        nodes = make_nodes(rnd, 8, together=False)
        n = len(nodes)
        flat = policy.pairing.weight_rows(nodes, None)
        weight = pairwise(policy, nodes, None)
        assert all(flat[i * n + j] == weight(i, j) for i in range(n) for j in range(n) if i != j)


@pytest.mark.parametrize("seed", range(5))
def test_pairs_match_the_pair_by_pair_blossom_path(seed):
    rnd = random.Random(seed)
    policy = make_policy("muri-s", get_preset("paper"))
    assert policy.backend == "blossom"
    nodes = make_nodes(rnd, 30, together=False)
    partner = policy.pairing.pairs(nodes)
    pairs = max_weight_pairs(len(nodes), pairwise(policy, nodes, None), backend="blossom")
    expected = {}
    for i, j in pairs:
        expected[i], expected[j] = j, i
    assert partner == expected
