"""GPU memory that co-located jobs share: no plan puts more on a GPU than it holds less the
reserve, whatever the policy proposes; a cluster that states no GPU memory bounds nothing."""
from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings, strategies as st

from scheduler.core.engine import Core
from scheduler.core.plan_check import PlanError
from scheduler.core.policies.base import Policy
from scheduler.core.state import Group, NodeSlice, Plan
from scheduler.presets import get_preset
from scheduler.sim.simulator import simulate
from tests.helpers import job, spec, traces

GPU_MEM = 80.0
RESERVE = get_preset("default").model.group_mem_reserve_gb


def with_memory(cluster, gb=GPU_MEM):
    return dataclasses.replace(cluster, gpu_mem_gb=gb)


def per_gpu_memory(plan: Plan, jobs) -> dict[tuple[int, int], list[int]]:
    """The jobs on each GPU of a plan (an oracle of its own: plain loops over the plan)."""
    on: dict[tuple[int, int], list[int]] = {}
    for group in plan.groups:
        for piece in group.placement:
            for gpu in piece.gpus:
                on.setdefault((piece.node, gpu), []).extend(group.jobs)
    return on


@settings(max_examples=40, deadline=None)
@given(trace=traces(), memory=st.lists(st.sampled_from([0.0, 10.0, 30.0, 39.0, 40.0, 50.0,
                                                        78.0]), min_size=25, max_size=25),
       policy=st.sampled_from(["muri-s", "muri-l", "antman"]),
       preset=st.sampled_from(["default", "paper"]))
def test_no_gpu_ever_holds_more_than_its_memory_less_the_reserve(trace, memory, policy,
                                                                  preset):
    trace = [dataclasses.replace(r, gpu_mem_gb=m) for r, m in zip(trace, memory)]
    need = {r.job_id: r.gpu_mem_gb for r in trace}
    budget = GPU_MEM - get_preset(preset).model.group_mem_reserve_gb
    worst = []

    def look(now, plan, core):
        for members in per_gpu_memory(plan, core.jobs).values():
            if len(members) > 1:
                worst.append(sum(need[j] for j in members))

    result = simulate(trace, with_memory(spec(nodes=2, gpus=4)), policy, get_preset(preset),
                      on_round=look)
    assert all(o.end is not None for o in result.outcomes)
    assert all(total <= budget + 1e-9 for total in worst), max(worst)


def _overlap(outcomes) -> bool:
    a, b = sorted(outcomes, key=lambda o: o.start)
    return b.start < a.end


@pytest.mark.parametrize("policy", ["muri-s", "muri-l"])
def test_two_jobs_that_do_not_fit_together_run_one_after_the_other(policy):
    """Two 1-GPU jobs of complementary stages on one GPU share it while memory is not
    stated, or while both fit; at 41 GB each on an 80 GB GPU (2 GB reserved) they do not."""
    cluster = spec(nodes=1, gpus=1)
    records = [job(0, stages=(0.3, 0.05, 0.05), iterations=2000),
               job(1, stages=(0.05, 0.3, 0.05), iterations=2000)]
    default = get_preset("default")
    shared = simulate(records, cluster, policy, default).outcomes
    assert _overlap(shared)
    fit = [dataclasses.replace(r, gpu_mem_gb=(80.0 - RESERVE) / 2) for r in records]
    assert _overlap(simulate(fit, with_memory(cluster), policy, default).outcomes)
    big = [dataclasses.replace(r, gpu_mem_gb=41.0) for r in records]
    apart = simulate(big, with_memory(cluster), policy, default).outcomes
    assert not _overlap(apart) and all(o.end is not None for o in apart)


def test_antman_puts_no_guest_where_its_memory_does_not_fit():
    """An opportunistic job shares a GPU with a guaranteed one only where both fit."""
    cluster = spec(nodes=1, gpus=1)
    records = [job(0, stages=(0.3, 0.05, 0.05), iterations=2000),
               job(1, stages=(0.05, 0.3, 0.05), iterations=2000, priority=1)]
    default = get_preset("default")
    assert _overlap(simulate(records, with_memory(cluster), "antman", default).outcomes)
    big = [dataclasses.replace(r, gpu_mem_gb=50.0) for r in records]
    assert not _overlap(simulate(big, with_memory(cluster), "antman", default).outcomes)


class _Crowd(Policy):
    """A policy that groups every queued job on GPU 0 (what no memory allows)."""

    name = "crowd"
    interleaves = True

    def plan(self, ctx):
        ids = tuple(j.id for j in ctx.queue)
        return Plan((Group(ids, 1, 1.0, (NodeSlice(0, (0,)),)),))


def test_the_core_refuses_a_group_past_the_memory_of_its_gpus():
    model = get_preset("default").model
    for gb, refused in ((39.0, False), (41.0, True)):
        core = Core(with_memory(spec(nodes=1, gpus=1)), _Crowd(model), model)
        for i in range(2):
            core.submit(dataclasses.replace(job(i), gpu_mem_gb=gb), 0.0)
        if refused:
            with pytest.raises(PlanError, match="holds 82 GB on each GPU; at most 78 GB"):
                core.round(0.0)
        else:
            assert core.round(0.0).groups[0].jobs == (0, 1)
    # a cluster that states no GPU memory bounds no group
    core = Core(spec(nodes=1, gpus=1), _Crowd(model), model)
    for i in range(2):
        core.submit(dataclasses.replace(job(i), gpu_mem_gb=500.0), 0.0)
    assert core.round(0.0).groups[0].jobs == (0, 1)
