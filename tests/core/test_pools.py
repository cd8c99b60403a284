"""Clusters of node pools: a job runs only on GPU types it accepts, its GPUs lie in one pool,
and no GPU holds more memory than its pool's GPUs do (less the reserve where jobs share it),
whatever the policy; a Muri-form spec and the same cluster as one pool give equal runs."""
from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings, strategies as st

from scheduler.core.engine import Core, SchedulingError
from scheduler.core.plan_check import PlanError
from scheduler.core.policies.base import Policy
from scheduler.core.state import Group, NodeSlice, Plan
from scheduler.presets import get_preset
from scheduler.sim.simulator import simulate
from specs.spec import ClusterSpec, Pool
from tests.helpers import job, spec, traces

POLICIES = ["fifo", "srtf", "srsf", "tiresias", "themis", "antman", "muri-s", "muri-l"]
TYPES = ["A", "B", ""]


@st.composite
def pooled_specs(draw):
    """One to three pools of 1-3 nodes of 1, 2, 4 or 8 GPUs, each of type A, B or unstated,
    with 16 or 40 GB per GPU or memory unstated."""
    pools = []
    for i in range(draw(st.integers(1, 3))):
        pools.append(Pool(f"p{i}", nodes=draw(st.integers(1, 3)),
                          gpus_per_node=draw(st.sampled_from([1, 2, 4, 8])),
                          cpus_per_node=64, mem_per_node=256,
                          gpu_type=draw(st.sampled_from(TYPES)),
                          gpu_mem_gb=draw(st.sampled_from([0.0, 16.0, 40.0]))))
    return ClusterSpec.of_pools(tuple(pools))


def may_run(record, pool: Pool) -> bool:
    """The rule, written out for the test: the pool's type is one the job accepts (a pool of
    unstated type holds any), its GPUs enough, its GPUs' memory enough for the job."""
    return (pool.gpus >= record.num_gpu
            and (not pool.gpu_type or not record.gpu_types or pool.gpu_type in record.gpu_types)
            and (not pool.gpu_mem_gb or record.gpu_mem_gb <= pool.gpu_mem_gb))


@settings(max_examples=60, deadline=None)
@given(cluster=pooled_specs(), trace=traces(),
       types=st.lists(st.sampled_from([(), ("A",), ("B",), ("A", "B")]), min_size=25,
                      max_size=25),
       memory=st.lists(st.sampled_from([0.0, 6.0, 12.0, 20.0, 30.0]), min_size=25,
                       max_size=25),
       policy=st.sampled_from(POLICIES), preset=st.sampled_from(["default", "paper"]))
def test_no_job_runs_on_a_type_it_excludes_nor_past_its_gpus_memory(cluster, trace, types,
                                                                    memory, policy, preset):
    """Random pooled clusters, traces, types and memory, every policy and preset: at every
    round each group's GPUs lie in one pool, of a type every member accepts, and the jobs on
    each GPU fit its memory (less the reserve when they are several); every job ends."""
    layout = cluster.layout
    trace = [dataclasses.replace(r, gpu_types=t, gpu_mem_gb=m)
             for r, t, m in zip(trace, types, memory)]
    trace = [r for r in trace if any(may_run(r, p) for p in layout)]
    by_id = {r.job_id: r for r in trace}
    pool_of = [i for i, p in enumerate(layout) for _ in range(p.nodes)]
    reserve = get_preset(preset).model.group_mem_reserve_gb
    broken: list[str] = []

    def look(now, plan, core):
        on: dict[tuple[int, int], list[int]] = {}
        for group in plan.groups:
            pools = {pool_of[piece.node] for piece in group.placement}
            if len(pools) > 1:
                broken.append(f"group {group.jobs} spans pools {pools}")
            for p in pools:
                for j in group.jobs:
                    if not may_run(by_id[j], layout[p]):
                        broken.append(f"job {j} on pool {layout[p]}")
            for piece in group.placement:
                for gpu in piece.gpus:
                    on.setdefault((piece.node, gpu), []).extend(group.jobs)
        for (node, _), members in on.items():
            limit = layout[pool_of[node]].gpu_mem_gb
            if limit and len(members) > 1 and \
                    sum(by_id[j].gpu_mem_gb for j in members) > limit - reserve + 1e-9:
                broken.append(f"jobs {members} past {limit} GB on node {node}")

    result = simulate(trace, cluster, policy, get_preset(preset), on_round=look)
    assert not broken, broken[:3]
    assert all(o.end is not None for o in result.outcomes)


@settings(max_examples=25, deadline=None)
@given(trace=traces(), shape=st.sampled_from([(1, 4), (2, 4), (2, 8), (3, 2)]),
       policy=st.sampled_from(POLICIES), preset=st.sampled_from(["default", "paper"]))
def test_a_muri_spec_and_the_same_cluster_as_one_pool_run_alike(trace, shape, policy, preset):
    """The pooled form of a one-shape cluster is the same cluster: every job starts and ends
    at the same times (the pooled code paths against the one-shape ones)."""
    muri = spec(nodes=shape[0], gpus=shape[1])
    pooled = ClusterSpec.of_pools(muri.layout)
    trace = [r for r in trace if r.num_gpu <= muri.total_gpus]
    runs = [[(o.job_id, o.start, o.end) for o in simulate(trace, s, policy,
                                                          get_preset(preset)).outcomes]
            for s in (muri, pooled)]
    assert runs[0] == runs[1]


def two_pools() -> ClusterSpec:
    return ClusterSpec.of_pools((
        Pool("small", 1, 2, 64, 256, "T4", 16.0), Pool("big", 2, 4, 64, 256, "V100M32", 32.0)))


def test_a_job_runs_only_on_the_type_it_asks_for_and_the_out_rows_name_it():
    cluster = two_pools()
    trace = [dataclasses.replace(job(0, num_gpu=2), gpu_types=("T4",)),
             dataclasses.replace(job(1, num_gpu=2), gpu_types=("V100M32",)),
             job(2, num_gpu=8)]  # 8 GPUs: only the big pool's two nodes together hold it
    result = simulate(trace, cluster, "srtf", get_preset("default"))
    ran = {o.job_id: o.gpu_type for o in result.outcomes}
    assert ran == {0: "T4", 1: "V100M32", 2: "V100M32"}


def test_a_job_no_pool_holds_is_refused_with_its_reason():
    core = Core(two_pools(), Policy(get_preset("default").model), get_preset("default").model)
    with pytest.raises(SchedulingError, match="needs 4 GPUs of type T4 but the largest pool"):
        core.submit(dataclasses.replace(job(0, num_gpu=4), gpu_types=("T4",)), 0.0)
    with pytest.raises(SchedulingError, match="asks for 'A100'"):
        core.submit(dataclasses.replace(job(1), gpu_types=("A100",)), 0.0)
    core.submit(dataclasses.replace(job(2, num_gpu=4), gpu_types=("T4", "V100M32")), 0.0)


class Misplacing(Policy):
    """A plug-in that puts a job on a type it excludes (a test double of a buggy policy)."""

    name = "misplacing"

    def plan(self, ctx):
        job = ctx.queue[0]
        return Plan((Group((job.id,), job.num_gpu, job.solo_time, (NodeSlice(0, (0,)),)),))


def test_the_core_refuses_a_plan_that_puts_a_job_on_a_type_it_excludes():
    model = get_preset("default").model
    core = Core(two_pools(), Misplacing(model), model)
    core.submit(dataclasses.replace(job(0), gpu_types=("V100M32",)), 0.0)
    with pytest.raises(PlanError, match="pool 'small' \\(T4\\), a type not every member"):
        core.round(0.0)
