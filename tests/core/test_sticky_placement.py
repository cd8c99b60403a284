"""Sticky placement keeps running jobs where they are, but never at the cost of a job the
policy chose: whatever fits an empty cluster in the policy's order is placed."""
from __future__ import annotations

import random

from hypothesis import given, settings, strategies as st

from scheduler.core.placement import ClusterState
from scheduler.core.policies.base import RoundContext, place_units
from scheduler.core.state import Job, NodeSlice
from scheduler.presets import get_preset
from tests.helpers import job as record, spec


def make_job(job_id: int, num_gpu: int) -> Job:
    return Job(record=record(job_id, num_gpu=num_gpu), solo_time=1.0, profile=(1.0,),
               remaining=1.0, remaining_estimate=1.0)


def context(cluster_spec, previous) -> RoundContext:
    return RoundContext(0.0, [], ClusterState(cluster_spec), get_preset("default").model,
                        previous)


def test_a_whole_node_job_is_placed_beside_scattered_running_jobs():
    # eight 1-GPU jobs run four on each node; an 8-GPU job comes first in the policy's order
    small = [make_job(i, 1) for i in range(8)]
    previous = {j.id: (NodeSlice(j.id % 2, (j.id // 2,)),) for j in small}
    big = make_job(100, 8)
    units = [(8, (big,))] + [(1, (j,)) for j in small]
    placements = place_units(context(spec(nodes=2, gpus=8), previous), units)
    assert all(p is not None for p in placements)
    assert len(placements[0]) == 1 and len(placements[0][0].gpus) == 8  # one whole node
    node = placements[0][0].node
    others = [(j, p) for j, p in zip(small, placements[1:]) if previous[j.id][0].node != node]
    assert len(others) == 4 and all(p == previous[j.id] for j, p in others)  # they stay put


def test_running_jobs_keep_their_gpus_when_everything_fits():
    small = [make_job(i, 1) for i in range(4)]
    previous = {j.id: (NodeSlice(1, (j.id,)),) for j in small}  # all on node 1
    units = [(4, (make_job(100, 4),))] + [(1, (j,)) for j in small]
    placements = place_units(context(spec(nodes=2, gpus=8), previous), units)
    assert placements[1:] == [previous[j.id] for j in small]
    assert placements[0] is not None


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([1, 1, 2, 3, 4, 8]), min_size=1, max_size=24),
       st.integers(1, 4), st.sampled_from([4, 8]), st.integers(0, 2**16))
def test_what_fits_an_empty_cluster_in_order_is_placed_wherever_jobs_ran(sizes, nodes, gpus,
                                                                          seed):
    cluster_spec = spec(nodes=nodes, gpus=gpus)
    jobs = [make_job(i, n) for i, n in enumerate(sizes)]
    # the oracle: the policy's order on an empty cluster, no one running anywhere
    plain = ClusterState(cluster_spec)
    fits = [plain.place(j.num_gpu) is not None for j in jobs]
    # where some ran last round: scattered, each on random free GPUs of a random node
    rng = random.Random(seed)
    previous: dict[int, tuple] = {}
    free = {node: set(range(gpus)) for node in range(nodes)}
    for job in rng.sample(jobs, len(jobs)):
        room = [node for node, left in free.items() if len(left) >= job.num_gpu]
        if job.num_gpu > gpus or not room or rng.random() < 0.3:
            continue
        node = rng.choice(room)
        taken = tuple(sorted(rng.sample(sorted(free[node]), job.num_gpu)))
        free[node] -= set(taken)
        previous[job.id] = (NodeSlice(node, taken),)
    units = [(j.num_gpu, (j,)) for j in jobs]
    placements = place_units(context(cluster_spec, previous), units)
    if all(fits):
        assert all(p is not None for p in placements)
    taken = [(s.node, g) for p in placements if p for s in p for g in s.gpus]
    assert len(taken) == len(set(taken))  # no GPU handed out twice
    assert sum(len(s.gpus) for p, j in zip(placements, jobs) if p for s in p) == \
        sum(j.num_gpu for p, j in zip(placements, jobs) if p)
