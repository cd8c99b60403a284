"""Muri's remembered matchings (Muri._pairs) against the matching computed from scratch.

Why: _pairs keys what it remembers by the candidates themselves (the Job objects of each
packing, in order) and reuses the pairs on a hit.  A key that lost the packing boundaries
or the order would hand one round's pairs to another round whose candidates read the same
jobs differently; the tests feed it sequences built to collide under such a key, with many
tied weights, and compare every answer with a fresh computation on the same candidates.
"""

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core.blossom import blossom_pairs_flat
from scheduler.plugins import make_policy
from scheduler.presets import get_preset
from scheduler.core.state import Job
from tests.helpers import job

# few profiles, so that many candidates weigh the same (ties decide the pairs)
PROFILES = [(0.5, 0.2, 0.1), (0.1, 0.6, 0.1), (0.2, 0.2, 0.4), (0.3, 0.1, 0.3)]


def make_jobs(rnd, count):
    jobs = []
    for i in range(count):
        p = rnd.choice(PROFILES)
        rec = job(i, stages=p, iteration_time=sum(p))
        jobs.append(Job(record=rec, solo_time=sum(p), profile=p, remaining=100.0,
                        remaining_estimate=100.0 * sum(p)))
    return jobs


def split(rnd, jobs):
    """The jobs, in this order, cut into packings of one or two."""
    nodes, rest = [], list(jobs)
    while rest:
        size = min(len(rest), rnd.choice([1, 1, 2]))
        nodes.append(rest[:size])
        rest = rest[size:]
    return nodes


def from_scratch(policy, nodes):
    """The pairs, with every weight computed afresh for this sequence (no rows, no memo)."""
    n = len(nodes)
    flat = [0.0] * (n * n)
    for i in range(n):
        for j in range(n):
            if i != j and len(nodes[i]) + len(nodes[j]) <= policy.k:
                flat[i * n + j] = policy.pairing.merged_efficiency(nodes[i] + nodes[j])
    partner = {}
    for i, j in blossom_pairs_flat(n, flat, compiled=False):
        partner[i], partner[j] = j, i
    return partner


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 16), st.randoms(use_true_random=False))
def test_remembered_pairs_equal_a_fresh_matching(count, rnd):
    """One policy sees the same jobs again and again, cut and ordered differently (and
    sometimes exactly as before, a hit): each answer is the fresh matching's."""
    policy = make_policy("muri-s", get_preset("paper"))
    jobs = make_jobs(rnd, count)
    seen = []
    for _ in range(6):
        if seen and rnd.random() < 0.3:
            nodes = [list(node) for node in rnd.choice(seen)]  # the same candidates again
        else:
            order = list(jobs)
            if rnd.random() < 0.5:
                rnd.shuffle(order)
            nodes = split(rnd, order)
        seen.append(nodes)
        assert policy.pairing.pairs(nodes) == from_scratch(policy, nodes)


def test_same_jobs_in_other_packings_are_not_a_hit():
    """[a, b], [c] and [a], [b, c] list the same jobs in the same order: only the packing
    boundaries tell them apart, and their matchings differ (seed 3: profiles for which
    they do)."""
    rnd = random.Random(3)
    policy = make_policy("muri-s", get_preset("paper"))
    jobs = make_jobs(rnd, 6)
    first = [jobs[0:2], [jobs[2]], [jobs[3]], jobs[4:6]]
    second = [[jobs[0]], jobs[1:3], jobs[3:5], [jobs[5]]]
    assert policy.pairing.pairs(first) == from_scratch(policy, first)
    assert policy.pairing.pairs(second) == from_scratch(policy, second)
    assert from_scratch(policy, first) != from_scratch(policy, second)
