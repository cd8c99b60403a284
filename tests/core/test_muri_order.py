"""Muri's carried order kept between rounds (muri_order.MuriOrder) is the order the plain rule
gives (the artifact's: sort the carried list by priority, then by #GPUs for placement, the
next round starting from that), on random rounds with ties everywhere; and a Muri round
reads only as much of it as admission uses, however long the backlog."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from scheduler.core.engine import Core
from scheduler.plugins import make_policy
from scheduler.core.policies.muri import Muri
from scheduler.core.policies.muri_order import Classes, MuriOrder
from scheduler.presets import get_preset
from scheduler.core.state import Job
from tests.helpers import job as record, spec
from tests.core.test_fastpath import make_job, step_queue
from tests.core.test_muri_fastpath import PlainMuri, outcomes, traces


def rank(job: Job) -> float:
    return job.remaining_estimate


class PlainRule:
    """Policy.carried_order then Muri's two stable sorts, from scratch each round."""

    def __init__(self):
        self.order: list[Job] = []

    def round(self, queue: list[Job]) -> tuple[list[Job], list[Job]]:
        """(the admission order, the placement order) of this round."""
        live = {id(j) for j in queue}
        order = [j for j in self.order if id(j) in live]
        known = {id(j) for j in order}
        order += [j for j in queue if id(j) not in known]
        order.sort(key=rank)
        admission = list(order)
        order.sort(key=lambda j: j.num_gpu, reverse=True)
        self.order = order
        return admission, list(order)


KEYS = st.sampled_from([0.0, 1.0, 2.0, 2.5, 3.0])  # few values: ties everywhere
STEP = st.tuples(
    st.lists(st.tuples(st.sampled_from([1, 2, 4, 8]), KEYS), max_size=5),  # arrivals
    st.lists(st.integers(0, 10_000), max_size=3),  # which jobs finish
    st.lists(st.tuples(st.integers(0, 10_000), KEYS), max_size=6),  # new keys (they ran)
    st.booleans(),  # whether a round is planned after this step
    st.lists(st.tuples(st.sampled_from([1, 2, 4, 8, 16]), st.integers(0, 12)), max_size=4),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(STEP, min_size=1, max_size=25))
def test_the_kept_order_is_the_plain_rule(steps):
    kept, plain = MuriOrder(rank), PlainRule()
    queue: list[Job] = []
    next_id = 0
    for arrivals, finishing, changes, planned, asks in steps:
        # a job's key changes, told or not yet synced (new ones)
        next_id = step_queue(kept, queue, arrivals, finishing, changes, next_id)
        assert len(kept) == len(queue)
        if not planned:
            continue
        admission, placing = plain.round(queue)
        assert kept.sync() == admission
        assert kept.sizes == {g: sum(j.num_gpu == g for j in queue) for g in kept.sizes}
        classes = Classes(kept.sync())
        for gpus, n in asks:  # a class's first jobs, asked in any order
            assert classes.first(gpus, n) == [j for j in admission if j.num_gpu == gpus][:n]
        assert kept.placing_order(list(reversed(admission))) == placing
        kept.settle()


def test_rebuild_sorts_the_given_list_stably():
    jobs = [make_job(i, gpus, key) for i, (gpus, key) in
            enumerate([(1, 2.0), (4, 1.0), (1, 1.0), (2, 2.0), (4, 2.0)])]
    kept = MuriOrder(rank)
    given_order = [jobs[4], jobs[0], jobs[2], jobs[3], jobs[1]]
    kept.rebuild(given_order)
    assert kept.sync() == sorted(given_order, key=rank)


class CountingList(list):
    """The order as a round reads it, counting the jobs read."""

    read = 0

    def __iter__(self):
        for job in super().__iter__():
            self.read += 1
            yield job

    def __getitem__(self, i):
        self.read += 1
        return super().__getitem__(i)


def test_a_round_reads_what_admission_uses_not_the_backlog():
    """A cluster of 8 GPUs, 2,000 one- and two-GPU jobs waiting: the first round sorts them
    and then keeps the order; admission stops once the cluster is full, so the next round
    reads a few dozen jobs of the order, not 2,000; and its plan is the one a Muri that
    sorts the whole queue every round makes."""
    preset = get_preset("default")
    cluster = spec(nodes=2, gpus=4, cpus=64)
    records = [record(i, num_gpu=1 + i % 2, iterations=100 + (i * 37) % 500,
                      stages=(0.1, 0.2, 0.1)) for i in range(2000)]
    cores = []
    for keep_min in (256, 10**9):  # the second never keeps the order
        core = Core(cluster, make_policy("muri-s", preset), preset.model)
        core.policy.KEEP_MIN = keep_min
        for r in records:
            core.submit(r, 0.0)
        core.round(0.0)
        core.advance(60.0)
        cores.append(core)
    kept = cores[0].policy._kept
    assert kept is not None and cores[1].policy._kept is None
    counter = CountingList(kept.sync())
    kept.sync = lambda: counter
    plan = cores[0].round(60.0)
    assert plan.groups
    assert 0 < counter.read < 100
    assert cores[1].round(60.0).groups == plan.groups


class Alternating(Muri):
    """Muri switching between a kept and a fresh order every round: each switch carries the
    order over, so the plans are those of either way throughout."""

    def _keeps(self, queued: int, read: int) -> bool:
        return self._kept is None


class AlwaysKept(Muri):
    """Muri that keeps its order from the first round on."""

    def _keeps(self, queued: int, read: int) -> bool:
        return True


@settings(max_examples=400, deadline=None)
@given(traces(), st.sampled_from(["muri-s", "muri-l", "muri-l-worst", "muri-l-nomatch"]),
       st.sampled_from(["paper", "default"]),
       st.sampled_from([(2, 4, 64, 1), (4, 4, 24, 2), (3, 8, 40, 1)]))
def test_a_kept_order_plans_what_a_fresh_sort_plans(records, policy, preset, shape):
    """Whole simulations on random traces with many ties: Muri with its order kept from the
    first round, and switching every round, against the plain round that sorts the whole
    queue every round (test_muri_fastpath.PlainMuri)."""
    nodes, gpus, cpus, switches = shape
    cluster_spec = spec(nodes=nodes, gpus=gpus, cpus=cpus, switches=switches)
    records = [r for r in records if r.num_gpu <= cluster_spec.total_gpus]
    p = get_preset(preset)
    plain = outcomes(records, cluster_spec, policy, p, PlainMuri)
    assert outcomes(records, cluster_spec, policy, p, AlwaysKept) == plain
    assert outcomes(records, cluster_spec, policy, p, Alternating) == plain
