"""What every plan must respect, whatever the policy: a running job holds exactly its GPUs, a
GPU serves one group (AntMan's documented sharing aside), and the core's queue keeps its own
order whatever a policy sorts."""
from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from scheduler.core.engine import Core
from scheduler.presets import get_preset
from scheduler.sim.simulator import Simulator, make_core
from scheduler.core.state import Plan, Status
from tests.helpers import job, spec

DEFAULT = get_preset("default")
PAPER = get_preset("paper")
# every policy the brief names; the ablations share Muri's planning code
POLICIES = ["fifo", "srtf", "srsf", "tiresias", "themis", "antman", "muri-s", "muri-l"]
MODELS = ["resnet18", "vgg16", "bert", "dqn"]


@st.composite
def scenarios(draw):
    """A small cluster (1-2 switches of 1-3 nodes of 1, 2, 4 or 8 GPUs) and 2-9 jobs that each
    fit one switch, with random sizes, stages, arrival times and AntMan priorities."""
    switches = draw(st.integers(1, 2))
    nodes = draw(st.integers(1, 3))
    gpus = draw(st.sampled_from([1, 2, 4, 8]))
    cluster = spec(nodes=nodes, gpus=gpus, switches=switches)
    per_switch = nodes * gpus
    sizes = [s for s in (1, 2, 3, 4, 8) if s <= per_switch]
    records = []
    for i in range(draw(st.integers(2, 9))):
        stages = tuple(draw(st.sampled_from([0.02, 0.05, 0.1, 0.2])) for _ in range(3))
        records.append(job(i, num_gpu=draw(st.sampled_from(sizes)),
                           submit=float(draw(st.integers(0, 4)) * 20),
                           iterations=draw(st.integers(50, 600)), stages=stages,
                           model=draw(st.sampled_from(MODELS)),
                           priority=draw(st.sampled_from([0, 0, 1]))))
    return cluster, records


def check_plan(core: Core, plan: Plan) -> None:
    """Each RUNNING job is in exactly one group, whose placement names exactly `num_gpu`
    distinct GPUs; no GPU is held by two groups. The one exception is AntMan's, which its plan
    declares with `shared_gpus`: an opportunistic job (priority > 0) may sit on the GPUs of at
    most one guaranteed job (priority 0), so a GPU may then be held by exactly two groups, one
    guaranteed and one opportunistic; never two of a kind, never three."""
    running = {j.id for j in core.running_jobs()}
    in_plan = Counter(j for g in plan.groups for j in g.jobs)
    assert set(in_plan) == running, (sorted(in_plan), sorted(running))
    assert all(n == 1 for n in in_plan.values()), in_plan
    holders: dict[tuple[int, int], list[int]] = {}
    for group in plan.groups:
        cells = [(piece.node, gpu) for piece in group.placement for gpu in piece.gpus]
        assert len(set(cells)) == len(cells), f"group {group.jobs} names a GPU twice: {cells}"
        for job_id in group.jobs:
            assert len(cells) == core.jobs[job_id].num_gpu, \
                f"job {job_id} needs {core.jobs[job_id].num_gpu} GPUs and holds {cells}"
        for cell in cells:
            holders.setdefault(cell, []).append(group.jobs[0])
    for cell, groups in holders.items():
        if len(groups) == 1:
            continue
        assert plan.shared_gpus and len(groups) == 2, f"GPU {cell} held by groups of {groups}"
        kinds = sorted(core.jobs[j].priority > 0 for j in groups)
        assert kinds == [False, True], f"GPU {cell} shared by {groups}: not guaranteed+guest"


class CheckedSimulator(Simulator):
    """The simulator, checking the plan of every round (the loop's round hook)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.rounds_checked = 0
        self.loop.on_round = self._check

    def _check(self, now: float, plan: Plan, core: Core) -> None:
        check_plan(core, plan)
        self.rounds_checked += 1


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.sampled_from(POLICIES))
def test_every_round_gives_each_running_job_exactly_its_own_gpus(scenario, policy):
    cluster, records = scenario
    sim = CheckedSimulator(records, cluster, policy, DEFAULT)
    result = sim.run()
    assert sim.rounds_checked > 0
    assert all(o.end is not None for o in result.outcomes)


@pytest.mark.parametrize("policy", POLICIES)
def test_fragmented_cluster_every_policy_gives_running_jobs_their_gpus(policy):
    """The case of the Tiresias defect, for every policy: 2 nodes of 4 GPUs, two 3-GPU jobs
    running, a 2-GPU job arrives (it fits the free-GPU count, not any node)."""
    records = [job(0, num_gpu=3, iterations=1000), job(1, num_gpu=3, iterations=1000),
               job(2, num_gpu=2, submit=10.0, iterations=100),
               job(3, num_gpu=1, submit=10.0, iterations=100)]
    sim = CheckedSimulator(records, spec(nodes=2, gpus=4), policy, DEFAULT)
    sim.run()
    assert sim.rounds_checked > 0


def _fragmented(preset):
    core = make_core(spec(nodes=2, gpus=4), "tiresias", preset)
    core.submit(job(0, num_gpu=3, iterations=1000), 0.0)
    core.submit(job(1, num_gpu=3, iterations=1000), 0.0)
    core.round(0.0)
    core.submit(job(2, num_gpu=2, submit=10.0, iterations=100), 10.0)
    core.submit(job(3, num_gpu=1, submit=10.0, iterations=100), 10.0)
    core.advance(10.0, {0: 10, 1: 10})
    return core, core.round(10.0)


def test_tiresias_does_not_run_a_job_that_no_node_can_place():
    """Admission respects placement: the 2-GPU job waits (2 free GPUs, one per node) and the
    1-GPU job behind it still runs on one of them."""
    core, plan = _fragmented(DEFAULT)
    assert core.jobs[2].status is Status.PENDING
    assert 2 not in plan.running()
    assert core.jobs[3].status is Status.RUNNING
    assert len(plan.running()[3].placement[0].gpus) == 1
    check_plan(core, plan)
    core.advance(20.0, {0: 10, 1: 10, 3: 10})
    assert core.jobs[2].attained == 0.0  # waiting is not charged as service


def test_paper_tiresias_keeps_the_artifacts_admission_by_gpu_count():
    """The artifact admits by free-GPU count; the paper preset keeps that accounting."""
    assert _fragmented(PAPER)[0].policy.admit_by_gpu_count
    assert not _fragmented(DEFAULT)[0].policy.admit_by_gpu_count
    core, plan = _fragmented(PAPER)
    assert core.jobs[2].status is Status.RUNNING
    assert plan.running()[2].placement == ()


@pytest.mark.parametrize("policy", POLICIES + ["muri-l-worst", "muri-l-nomatch"])
@pytest.mark.parametrize("preset", ["default", "paper"])
def test_running_jobs_stay_in_submission_order_whatever_the_policy_sorts(policy, preset):
    """Policies sort their own copies: the core's queue (and so running_jobs()) stays in
    submission order. Later jobs are shorter and larger, so the keys that sort (remaining
    time or GPU-time, fairness rank, size for placement) would put them first."""
    core = make_core(spec(nodes=1, gpus=8), policy, get_preset(preset))
    core.submit(job(0, num_gpu=1, iterations=5000, stages=(0.1, 0.2, 0.1)), 0.0)
    core.submit(job(1, num_gpu=2, submit=1.0, iterations=500, stages=(0.2, 0.1, 0.1)), 1.0)
    core.submit(job(2, num_gpu=4, submit=2.0, iterations=50, stages=(0.1, 0.1, 0.2)), 2.0)
    for t in (2.0, 30.0, 60.0):
        core.advance(t, {j.id: 1.0 for j in core.running_jobs()})
        core.round(t)
        assert [j.id for j in core.queue] == [0, 1, 2]
        assert [j.id for j in core.running_jobs()] == \
            [j for j in (0, 1, 2) if core.jobs[j].status is Status.RUNNING]
    assert len(core.running_jobs()) == 3
