"""GPU memory that co-located jobs share: no plan puts more on a GPU than it holds less the
reserve, whatever the policy proposes; a cluster that states no GPU memory bounds nothing."""
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
@given(trace=traces(), shares=st.lists(st.sampled_from([0.0, 0.1, 0.3, 0.48, 0.49, 0.5, 0.7,
                                                        0.98]), min_size=25, max_size=25),
       shape=st.sampled_from([(1, 1), (1, 4), (2, 4), (2, 8), (3, 2)]),
       gpu_mem=st.sampled_from([16.0, 40.0, 80.0, 141.0]),
       policy=st.sampled_from(["muri-s", "muri-l", "antman"]),
       preset=st.sampled_from(["default", "paper"]))
def test_no_gpu_ever_holds_more_than_its_memory_less_the_reserve(trace, shares, shape, gpu_mem,
                                                                  policy, preset):
    """Random clusters, traces and memory (each job a share of a GPU's): at every round of
    every policy that shares GPUs, the jobs on each GPU fit its memory less the reserve."""
    cluster = with_memory(spec(nodes=shape[0], gpus=shape[1]), gpu_mem)
    trace = [dataclasses.replace(r, gpu_mem_gb=gpu_mem * share)
             for r, share in zip(trace, shares) if r.num_gpu <= cluster.total_gpus]
    need = {r.job_id: r.gpu_mem_gb for r in trace}
    budget = gpu_mem - get_preset(preset).model.group_mem_reserve_gb
    worst = []

    def look(now, plan, core):
        for members in per_gpu_memory(plan, core.jobs).values():
            if len(members) > 1:
                worst.append(sum(need[j] for j in members))

    result = simulate(trace, cluster, policy, get_preset(preset), on_round=look)
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


def _running_pair(gb: float):
    """A core running jobs 0 and 1 (complementary stages, `gb` each) as one group on the one
    GPU of an 80 GB cluster, under Muri-L."""
    from scheduler.sim.simulator import make_core

    core = make_core(with_memory(spec(nodes=1, gpus=1)), "muri-l", get_preset("paper"))
    for i, stages in enumerate([(0.3, 0.05, 0.05), (0.05, 0.3, 0.05)]):
        core.submit(dataclasses.replace(job(i, stages=stages, iterations=10**6),
                                        gpu_mem_gb=gb), 0.0)
    assert [g.jobs for g in core.round(0.0).groups] in ([(0, 1)], [(1, 0)])
    return core


def test_a_measured_figure_replaces_the_declared_one_and_says_when_it_no_longer_fits():
    core = _running_pair(10.0)
    assert core.note_gpu_memory(0, 60.0) is False  # 70 GB: still fits 78
    assert core.jobs[0].gpu_mem_gb == 60.0
    assert core.note_gpu_memory(0, 75.0) is True  # 85 GB: stop it, it runs alone
    for bad in (-1.0, float("nan"), float("inf"), 1e9):
        with pytest.raises(SchedulingError, match="GPU memory must be a finite number"):
            core.note_gpu_memory(0, bad)
    assert core.jobs[0].gpu_mem_gb == 75.0


def test_a_job_that_must_run_alone_shares_no_gpu_whatever_its_memory():
    core = _running_pair(10.0)
    core.stop(0, 1.0)
    core.run_alone(0)
    core.note_gpu_memory(0, 1.0)  # even at 1 GB
    for t in (2.0, 3.0, 4.0):
        assert all(len(g.jobs) == 1 for g in core.round(t).groups)
    # and the core refuses a plan that groups it, on a cluster that states no memory too
    model = get_preset("default").model
    plain = Core(spec(nodes=1, gpus=1), _Crowd(model), model)
    for i in range(2):
        plain.submit(job(i), 0.0)
    plain.run_alone(1)
    with pytest.raises(PlanError, match="holds job 1, which must run alone"):
        plain.round(0.0)


def test_a_calibrated_slowdown_times_the_next_groups_and_bad_ones_are_refused():
    from scheduler.core import interleave

    core = _running_pair(10.0)
    assert core.model.slowdown(2) == get_preset("paper").model.slowdown(2)
    core.calibrate_slowdown(2, 1.8)
    assert core.model.slowdown(2) == 1.8 and core.policy.model.slowdown(2) == 1.8
    group = core.round(1.0).groups[0]
    jobs = [core.jobs[j] for j in group.jobs]
    cyclic, _ = interleave.best_order_indices(tuple(j.profile for j in jobs))
    assert group.tt == pytest.approx(cyclic * 1.8)
    for members, factor in ((1, 1.2), (5, 1.2), (2, 0.1), (2, 9.0), (2, float("nan"))):
        with pytest.raises(SchedulingError):
            core.calibrate_slowdown(members, factor)
    assert core.model.slowdown(2) == 1.8
    for members in (3, 4):  # Muri groups up to 4: each size has its factor
        core.calibrate_slowdown(members, 1.5 + members / 10)
        assert core.model.slowdown(members) == 1.5 + members / 10
