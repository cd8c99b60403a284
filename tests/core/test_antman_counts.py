"""AntMan on a cluster of many pools: what a round costs must not grow with every GPU of the
cluster times every pool. The GPUs it counts as unowned and open to guests, kept as slots
change, are checked against a count over every GPU after each round; a GPU's room is tested
against its own pool only (one pool's test, whatever the number of pools)."""
from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

import specs.fit
from scheduler.core import memory
from scheduler.core.policies.antman import LOAD_CAP
from scheduler.presets import get_preset
from scheduler.sim.simulator import simulate
from specs.spec import ClusterSpec, Pool
from tests.helpers import job
from traces.generate import generate

POOLS = 12


def _cluster() -> ClusterSpec:
    """Pools of three types and two memories, 1-8 GPUs a node."""
    kinds = [("T4", 16.0), ("V100M32", 32.0), ("G2", 24.0)]
    return ClusterSpec.of_pools(tuple(
        Pool(f"p{i}", nodes=1 + i % 3, gpus_per_node=(1, 2, 4, 8)[i % 4], cpus_per_node=96,
             mem_per_node=512, gpu_type=kinds[i % 3][0], gpu_mem_gb=kinds[i % 3][1])
        for i in range(POOLS)))


def _trace():
    """Guaranteed and opportunistic jobs (a third best effort), some naming types, some
    with a memory need, arriving faster than they finish."""
    records = generate(120, seed=5, max_gpus=4, median_duration=1200, mean_interarrival=30.0)
    types = ((), ("T4",), ("V100M32", "G2"))
    return [replace(r, priority=1 if i % 3 == 0 else 0, gpu_types=types[i % 3],
                    gpu_mem_gb=(0.0, 6.0)[i % 2]) for i, r in enumerate(records)]


def test_the_counted_room_matches_a_count_of_every_gpu_after_each_round():
    seen = []

    def check(now, plan, core):
        policy = core.policy
        if policy.gpus is None:
            return
        slots = [slot for row in policy.gpus for slot in row]
        scanned = (sum(s.owner is None for s in slots), sum(s.load < LOAD_CAP for s in slots))
        assert policy._room() == scanned, now
        seen.append(scanned)

    simulate(_trace(), _cluster(), "antman", get_preset("default"), on_round=check)
    assert len(seen) > 50
    assert min(u for u, _ in seen) < sum(_cluster().node_gpus())  # GPUs were taken
    assert any(o < u for u, o in seen) or any(o > u for u, o in seen)


@pytest.mark.parametrize("members", [1, 2])
def test_a_gpus_room_is_one_pools_test_however_many_pools(monkeypatch, members):
    spec = _cluster()
    room = memory.Room.of(spec, get_preset("default").model)
    jobs = [SimpleNamespace(num_gpu=1, record=job(j), gpu_mem_gb=4.0, alone=False)
            for j in range(members)]
    calls = []
    real = specs.fit.holds

    def counted(*args):
        calls.append(args)
        return real(*args)

    monkeypatch.setattr(memory, "holds", counted)
    answers = [room.fits_in(jobs, p) for p in range(POOLS)]
    assert len(calls) == POOLS  # one test per pool asked of, not one per pool per ask
    # the same answers as the pools where the jobs may run, found over all pools
    assert answers == [p in room.pools_for(jobs) for p in range(POOLS)]


def test_a_guest_on_an_idle_cluster_tests_each_pools_room_once(monkeypatch):
    from scheduler.core.policies.antman import AntMan

    calls = []
    real = AntMan._room_for

    def counted(self, slot, job, node):
        calls.append(node)
        return real(self, slot, job, node)

    monkeypatch.setattr(AntMan, "_room_for", counted)
    guest = replace(generate(1, seed=1, max_gpus=1)[0], priority=1)
    result = simulate([guest], _cluster(), "antman", get_preset("default"))
    assert result.outcomes[0].end is not None
    gpus = sum(_cluster().node_gpus())
    # every GPU is idle: one test per pool (its idle GPUs are alike), not one per GPU
    assert 0 < len(calls) <= POOLS < gpus
