"""Sticky placement keeps running jobs where they are. A job the policy chose that they leave
no room gets it by moving the fewest running jobs ranked after it; where only moving many
would make room, it waits until its wait has paid for their restarts."""
from __future__ import annotations

import random

from hypothesis import given, settings, strategies as st

from scheduler.core.placement import ClusterState
from scheduler.core.policies.base import RoundContext, place_units
from scheduler.core.state import Job, NodeSlice
from scheduler.presets import get_preset
from tests.helpers import job as record, spec


def make_job(job_id: int, num_gpu: int, overhead: float = 0.0, submit: float = 0.0) -> Job:
    return Job(record=record(job_id, num_gpu=num_gpu, submit=submit), solo_time=1.0,
               profile=(1.0,), remaining=1.0, remaining_estimate=1.0,
               restart_overhead=overhead)


def context(cluster_spec, previous, now: float = 0.0) -> RoundContext:
    return RoundContext(now, [], ClusterState(cluster_spec), get_preset("default").model,
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


def test_a_newcomer_gets_the_node_whose_room_moves_fewest_running_jobs():
    # two 4-GPU nodes: node 0 runs two 1-GPU jobs, node 1 one; a 4-GPU job ranked first
    small = [make_job(i, 1, overhead=30.0) for i in range(3)]
    previous = {0: (NodeSlice(0, (0,)),), 1: (NodeSlice(0, (2,)),), 2: (NodeSlice(1, (3,)),)}
    units = [(4, (make_job(100, 4),))] + [(1, (j,)) for j in small]
    placements = place_units(context(spec(nodes=2, gpus=4), previous), units)
    assert placements[0] == (NodeSlice(1, (0, 1, 2, 3)),)
    assert placements[1:3] == [previous[0], previous[1]]  # node 0's jobs stay put
    assert placements[3] is not None and placements[3][0].node == 0  # one job moved


def test_a_job_only_many_moves_would_place_waits_until_its_wait_pays_for_them():
    # four 2-GPU nodes, a 1-GPU job on GPU 1 of each, all four ranked before a 2-GPU job:
    # no repair may move them (they outrank it); only placing every job afresh in order
    # makes room, and that moves all four (400 s of restarts)
    small = [make_job(i, 1, overhead=100.0) for i in range(4)]
    previous = {j.id: (NodeSlice(j.id, (1,)),) for j in small}
    for now, placed in ((150.0, False), (250.0, True)):  # 300 or 500 GPU-seconds
        big = make_job(100, 2, submit=0.0)  # it has waited `now` seconds
        units = [(1, (j,)) for j in small] + [(2, (big,))]
        placements = place_units(context(spec(nodes=4, gpus=2), previous, now), units)
        moved = [j.id for j, p in zip(small, placements) if p != previous[j.id]]
        if placed:
            assert placements[4] is not None and len(moved) == 4
        else:
            assert placements[4] is None and moved == []


def test_running_jobs_keep_their_gpus_when_everything_fits():
    small = [make_job(i, 1) for i in range(4)]
    previous = {j.id: (NodeSlice(1, (j.id,)),) for j in small}  # all on node 1
    units = [(4, (make_job(100, 4),))] + [(1, (j,)) for j in small]
    placements = place_units(context(spec(nodes=2, gpus=8), previous), units)
    assert placements[1:] == [previous[j.id] for j in small]
    assert placements[0] is not None


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([1, 1, 2, 3, 4, 8]), min_size=1, max_size=24),
       st.integers(1, 4), st.sampled_from([4, 8]), st.integers(0, 2**16),
       st.sampled_from([0.0, 1e6]))
def test_chosen_jobs_are_placed_once_waited_and_running_jobs_move_only_for_a_newcomer(
        sizes, nodes, gpus, seed, now):
    cluster_spec = spec(nodes=nodes, gpus=gpus)
    rng = random.Random(seed)
    jobs = [make_job(i, n, overhead=rng.uniform(1.0, 100.0)) for i, n in enumerate(sizes)]
    # the oracle: the policy's order on an empty cluster, no one running anywhere
    plain = ClusterState(cluster_spec)
    fits = [plain.place(j.num_gpu) is not None for j in jobs]
    # where some ran last round: scattered, each on random free GPUs of a random node
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
    placements = place_units(context(cluster_spec, previous, now), units)
    if all(fits) and now > sum(j.restart_overhead for j in jobs):  # waited past any moves
        assert all(p is not None for p in placements)
    if now == 0.0:  # nobody has waited: a running job moves only for a newcomer before it
        newcomers = [i for i, j in enumerate(jobs) if j.id not in previous]
        for i, (job, p) in enumerate(zip(jobs, placements)):
            if job.id in previous and p != previous[job.id]:
                assert newcomers and newcomers[0] < i
    taken = [(s.node, g) for p in placements if p for s in p for g in s.gpus]
    assert len(taken) == len(set(taken))  # no GPU handed out twice
    assert sum(len(s.gpus) for p, j in zip(placements, jobs) if p for s in p) == \
        sum(j.num_gpu for p, j in zip(placements, jobs) if p)
