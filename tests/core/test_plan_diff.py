"""A plan's changes against what runs (plan_changes.diff, which the core hands on as
`Plan.changes`) against their definition, job by job (plan_changes.compare), and the core's
refusal of plans that cannot run (plan_check)."""
from __future__ import annotations

from unittest.mock import patch

import pytest
from hypothesis import given, settings, strategies as st

from scheduler.core import engine, plan_changes
from scheduler.core.engine import Core
from scheduler.core.plan_changes import KEEP, Change, diff
from scheduler.core.plan_check import PlanError
from scheduler.core.policies.base import Policy
from scheduler.presets import get_preset
from scheduler.core.state import Group, NodeSlice, Plan, Status
from scheduler.loop import Loop
from scheduler.plugins import make_policy
from scheduler.sim.simulator import Simulator
from tests.helpers import job as record, run_outcomes, spec, traces

PLACES = [(NodeSlice(0, (0,)),), (NodeSlice(0, (1,)),), (NodeSlice(1, (0,)),)]


@st.composite
def plans(draw):
    """(running, groups): what runs (job -> its group, members placed alike) and a plan; jobs
    0-5, each in at most one group of each, lone or in pairs, at one of a few places/paces."""
    def groups_of(jobs):
        out, jobs = [], list(jobs)
        while jobs:
            size = draw(st.sampled_from([1, 1, 2])) if len(jobs) > 1 else 1
            members, jobs = tuple(jobs[:size]), jobs[size:]
            out.append(Group(members, 1, draw(st.sampled_from([1.0, 2.0])),
                             draw(st.sampled_from(PLACES))))
        return out

    ran = draw(st.permutations(range(6)))[:draw(st.integers(0, 6))]
    runs = draw(st.permutations(range(6)))[:draw(st.integers(0, 6))]
    running = {j: g for g in groups_of(ran) for j in g.jobs}
    for j in draw(st.lists(st.sampled_from(ran), max_size=2)) if ran else ():
        running.pop(j, None)  # a member that stopped outside a plan (its partner runs on)
    return running, groups_of(runs)


@settings(max_examples=500, deadline=None)
@given(plans(), st.booleans(), st.booleans())
def test_the_changes_are_the_definition_job_by_job(case, in_place, in_gate):
    running, groups = case
    waiting = {j: 1 for j in range(6) if j not in running}
    changes = diff(running, groups, in_place, waiting, 2, in_gate)
    kinds = plan_changes.compare({j: (g.jobs, g.placement) for j, g in running.items()},
                                 {j: (g.jobs, g.placement) for g in groups for j in g.jobs},
                                 in_place, in_gate)
    assert dict(changes.kinds) == {j: k for j, k in kinds.items() if k is not KEEP}
    # added: every group of the plan that does not run as it is, with every member
    assert set(changes.added) == {g for g in groups
                                  if any(running.get(j) != g for j in g.jobs)}


def test_a_member_whose_partner_stopped_is_in_a_changed_group_when_the_pair_is_planned_again():
    pair = Group((1, 2), 1, 2.0, PLACES[0])
    changes = diff({1: pair}, [pair], True, {2: 1}, 4)  # 2 stopped outside a plan
    assert changes.kinds == {2: Change.START} and changes.added == (pair,)


# -- whole simulations against a core that classifies every job of every round -----------
def definition_diff(running, groups, in_place, waiting, max_group, in_gate=False):
    kinds = plan_changes.compare({j: (g.jobs, g.placement) for j, g in running.items()},
                                 {j: (g.jobs, g.placement) for g in groups for j in g.jobs},
                                 in_place, in_gate)
    added = tuple(g for g in groups if any(running.get(j) != g for j in g.jobs))
    return plan_changes.PlanChanges({j: k for j, k in kinds.items() if k is not KEEP}, added)


def outcomes(records, cluster_spec, policy, preset, definition):
    sim = Simulator(records, cluster_spec, policy, preset)
    if definition:  # every round compared job by job, none skipped as unchanged
        class DefinitionCore(Core):
            def round(self, now):
                self._disturbed = True
                return super().round(now)
        sim.core = DefinitionCore(cluster_spec, sim.core.policy, sim.core.model)
        sim.loop = Loop(sim.core, sim.cluster)
    return run_outcomes(sim)


@settings(max_examples=40, deadline=None)
@given(traces(), st.sampled_from(["muri-s", "muri-l", "srsf", "tiresias", "antman", "fifo"]),
       st.sampled_from(["paper", "default"]), st.sampled_from([(2, 4, 64), (3, 8, 40)]))
def test_simulations_equal_those_that_classify_every_job_every_round(
        records, policy, preset, shape):
    cluster_spec = spec(nodes=shape[0], gpus=shape[1], cpus=shape[2])
    p = get_preset(preset)
    fast = outcomes(records, cluster_spec, policy, p, definition=False)
    with patch.object(engine, "diff", definition_diff):
        plain = outcomes(records, cluster_spec, policy, p, definition=True)
    assert fast == plain


# -- plans the core refuses -------------------------------------------------------------------
class Scripted(Policy):
    """A policy that hands back whatever the test gives it."""

    name = "scripted"

    def __init__(self, preset, interleaves=False):
        super().__init__(preset)
        self.interleaves = interleaves
        self.next = Plan(())

    def plan(self, ctx):
        return self.next


def scripted_core(interleaves=False, gpus=(1, 1, 2, 1)):
    preset = get_preset("default")
    policy = Scripted(preset.model, interleaves)
    core = Core(spec(nodes=2, gpus=4), policy, preset.model)
    for job_id, num_gpu in enumerate(gpus):
        core.submit(record(job_id, num_gpu=num_gpu), 0.0)
    return core, policy


def lone(job_id, node, gpus, tt=1.0):
    return Group((job_id,), len(gpus), tt, (NodeSlice(node, tuple(gpus)),))


GOOD = Plan((lone(0, 0, [0]), lone(1, 0, [1])))
BAD_PLANS = {
    "unknown": (Plan((lone(9, 0, [0]),)), "job 9 is not waiting"),
    "twice": (Plan((lone(0, 0, [0]), lone(0, 0, [1]))), "job 0 is in two groups"),
    "same GPU": (Plan((lone(0, 0, [0]), lone(1, 0, [0]))), "the same GPU"),
    "no such GPU": (Plan((lone(0, 0, [7]),)), "each named once"),
    "no such node": (Plan((lone(0, 5, [0]),)), "nodes 0..1"),
    "GPU twice in a group": (Plan((Group((2,), 2, 1.0, (NodeSlice(0, (1, 1)),)),)),
                             "each named once"),
    "too few GPUs": (Plan((Group((2,), 2, 1.0, (NodeSlice(0, (1,)),)),)), "needs 2 GPUs"),
    "wrong size": (Plan((Group((0,), 2, 1.0, (NodeSlice(0, (0, 1)),)),)), "runs on 1"),
    "unplaced": (Plan((Group((0,), 1, 1.0, ()),)), "placed on no GPU"),
    "grouped by a policy that does not interleave": (
        Plan((Group((0, 1), 1, 1.0, (NodeSlice(0, (0,)),)),)), "at most 1"),
}


@pytest.mark.parametrize("case", sorted(BAD_PLANS))
def test_a_bad_plan_is_refused_naming_the_policy_and_changes_nothing(case):
    core, policy = scripted_core()
    policy.next = GOOD
    core.round(0.0)
    before = ({j: (job.status, job.starts, job.preemptions) for j, job in core.jobs.items()},
              dict(core.placed))
    policy.next, why = BAD_PLANS[case]
    with pytest.raises(PlanError, match="policy 'scripted'") as refused:
        core.round(1.0)
    assert why in str(refused.value)
    after = ({j: (job.status, job.starts, job.preemptions) for j, job in core.jobs.items()},
             dict(core.placed))
    assert after == before


def test_a_finished_job_and_an_offline_node_are_refused():
    core, policy = scripted_core()
    core.finish(3, 0.0)
    policy.next = Plan((lone(3, 0, [0]),))
    with pytest.raises(PlanError, match="job 3 is not waiting"):
        core.round(0.0)
    core.set_node_online(1, False)
    policy.next = Plan((lone(0, 1, [0]),))
    with pytest.raises(PlanError, match="offline"):
        core.round(0.0)


def test_a_group_may_take_the_gpus_a_moved_group_left_and_shared_gpus_may_overlap():
    core, policy = scripted_core(interleaves=True)
    policy.next = GOOD
    core.round(0.0)
    policy.next = Plan((lone(1, 0, [0]), lone(0, 0, [1])))  # the two swap GPUs
    assert core.round(1.0).changes.kinds == {0: Change.MOVE, 1: Change.MOVE}
    policy.next = Plan((lone(0, 0, [0]), lone(1, 0, [0])), shared_gpus=True)
    core.round(2.0)
    assert core.jobs[1].status is Status.RUNNING
    pair = Group((0, 1), 1, 1.5, (NodeSlice(1, (3,)),))
    policy.next = Plan((pair,))
    assert core.round(3.0).changes.kinds == {0: Change.MOVE, 1: Change.MOVE}
    policy.next = Plan((Group((0, 1, 3, 2), 1, 1.5, (NodeSlice(1, (3,)),)),))
    with pytest.raises(PlanError, match="job 2 needs 2"):  # a member of another size
        core.round(4.0)
    for job_id in (4, 5):
        core.submit(record(job_id), 4.0)
    policy.next = Plan((Group((0, 1, 3, 4, 5), 1, 1.5, (NodeSlice(1, (3,)),)),))
    with pytest.raises(PlanError, match="at most 4"):  # more than the preset's max_group
        core.round(5.0)
    policy.next = Plan((Group((0, 1, 3, 4), 1, 1.5, (NodeSlice(1, (3,)),)),))
    core.round(6.0)
    assert set(core.placed) == {0, 1, 3, 4}


def test_a_profile_change_repaces_a_group_where_it_runs():
    preset = get_preset("default", group_slowdown={})  # the cyclic model's pace
    core = Core(spec(nodes=1, gpus=1), make_policy("muri-s", preset), preset.model)
    core.submit(record(1, stages=(0.3, 0.1, 0.2, 0.05)), 0.0)
    core.submit(record(2, stages=(0.05, 0.4, 0.05, 0.3)), 0.0)
    first = core.round(0.0)
    (pair,) = first.groups
    assert sorted(pair.jobs) == [1, 2]  # two jobs, one GPU: they interleave
    core.advance(10.0, {1: 5.0, 2: 5.0})
    assert core.round(10.0).changes.none  # nothing changed: nothing to do
    core.update_profile(2, profile=(0.3, 0.1, 0.2, 0.05))  # now as job 1: a slower pair
    again = core.round(11.0)
    (slower,) = again.groups
    assert sorted(slower.jobs) == [1, 2] and slower.placement == pair.placement
    assert slower.tt > pair.tt
    # the same GPUs, a new pace: the group is changed, no job stops or starts
    assert again.changes.added == (slower,) and not again.changes.starting
