"""Muri's carried order kept between rounds (muri_order.MuriOrder) is the order the plain rule
gives (the artifact's: sort the carried list by priority, then by #GPUs for placement, the
next round starting from that), on random rounds with ties everywhere; and a Muri round
reads only as much of it as admission uses, however long the backlog."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from scheduler.core.engine import Core
from scheduler.core.policies import make_policy
from scheduler.core.policies.muri_order import Classes, MuriOrder
from scheduler.core.presets import get_preset
from scheduler.core.state import Job
from tests.helpers import job as record, spec


def make_job(job_id: int, num_gpu: int, key: float) -> Job:
    return Job(record=record(job_id, num_gpu=num_gpu), solo_time=1.0, profile=(1.0,),
               remaining=key, remaining_estimate=key)


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
        for gpus, key in arrivals:
            job = make_job(next_id, gpus, key)
            next_id += 1
            queue.append(job)
            kept.add(job)
        for pick in finishing:
            if queue:
                job = queue.pop(pick % len(queue))
                kept.remove(job)
        for pick, key in changes:  # a job's key changes, told or not yet synced (new ones)
            if queue:
                job = queue[pick % len(queue)]
                job.remaining_estimate = key
                kept.touch(job)
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
    """A cluster of 8 GPUs, 2,000 one- and two-GPU jobs waiting: admission stops once the
    cluster is full, so a round reads a few dozen jobs of the order, not 2,000; and the
    plan is the one a round that sorts the whole queue makes (the policy in its plain
    form: a Core whose Muri is told of no job, so it rebuilds from the queue)."""
    preset = get_preset("default")
    cluster = spec(nodes=2, gpus=4, cpus=64)
    records = [record(i, num_gpu=1 + i % 2, iterations=100 + (i * 37) % 500,
                      stages=(0.1, 0.2, 0.1)) for i in range(2000)]
    core = Core(cluster, make_policy("muri-s", preset), preset)
    for r in records:
        core.submit(r, 0.0)
    kept = core.policy._kept
    counter = CountingList(kept.sync())
    kept.sync = lambda: counter
    plan = core.round(0.0)
    assert plan.groups
    assert 0 < counter.read < 100

    plain = Core(cluster, make_policy("muri-s", preset), preset)
    for r in records:
        plain.submit(r, 0.0)
    plain.policy._kept = MuriOrder(plain.policy._rank)  # forgets them: rebuilt from the queue
    assert plain.round(0.0).groups == plan.groups
