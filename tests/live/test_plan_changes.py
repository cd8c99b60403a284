"""The one comparison of a plan with the next (scheduler/core/plan_changes.py), and both drivers
using it: the simulator's overhead charging and the live service's stops, regroups and
launches."""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from scheduler.core import plan_changes
from scheduler.core.plan_changes import Change
from scheduler.presets import get_preset
from scheduler.sim.simulator import simulate
from scheduler.core.state import NodeSlice
from tests.helpers import job, spec
from tests.live.test_service import DEADLINE, harness, wait_for  # noqa: F401 (fixture)
from scheduler.live.journal import Journal

# at the cyclic model's pace (no interference factor), where the pair below pays
IN_PLACE = get_preset("default", group_slowdown={})
RESTARTS = get_preset("default", regroup_in_place=False, group_slowdown={})

# a few placements and groups, so that the same ones are drawn often
PLACES = st.sampled_from([(NodeSlice(0, (0,)),), (NodeSlice(0, (1,)),),
                          (NodeSlice(0, (0, 1)),), (NodeSlice(1, (0,)), NodeSlice(2, (0,)))])
GROUPS = st.lists(st.integers(0, 5), min_size=1, max_size=3, unique=True).map(tuple)
RUNS = st.dictionaries(st.integers(0, 5), st.tuples(GROUPS, PLACES), max_size=6)


@given(RUNS, RUNS, st.booleans())
def test_every_job_is_classified_once_and_as_its_placements_say(before, after, in_place):
    kinds = plan_changes.compare(before, after, in_place)
    assert set(kinds) == set(before) | set(after)
    for j, kind in kinds.items():
        was, now = before.get(j), after.get(j)
        if was is None:
            assert kind is Change.START
        elif now is None:
            assert kind is Change.STOP
        elif was[1] != now[1]:
            assert kind is Change.MOVE
        elif was[0] != now[0]:
            assert kind is (Change.REGROUP if in_place else Change.RESTART)
        else:
            assert kind is Change.KEEP
    # what restarts is stopped first and started after; in place and kept jobs are neither
    changes = plan_changes.PlanChanges({j: k for j, k in kinds.items() if k is not Change.KEEP})
    stopping, starting = set(changes.stopping), set(changes.starting)
    assert stopping == {j for j in before if kinds[j] not in (Change.KEEP, Change.REGROUP)}
    assert starting == {j for j in after if kinds[j] not in (Change.KEEP, Change.REGROUP)}
    assert not set(changes.regrouped_in_place) & (stopping | starting)
    assert in_place or not changes.regrouped_in_place


def test_a_regroup_on_the_same_gpus_is_in_place_only_where_the_preset_says():
    where = (NodeSlice(0, (0, 1)),)
    before = {1: ((1,), where)}
    after = {1: ((1, 2), where), 2: ((1, 2), where)}
    assert plan_changes.compare(before, after, True) == {1: Change.REGROUP, 2: Change.START}
    assert plan_changes.compare(before, after, False) == {1: Change.RESTART, 2: Change.START}
    assert not get_preset("paper").model.regroup_in_place  # the paper preset restarts
    moved = {1: ((1, 2), (NodeSlice(1, (0, 1)),))}
    assert plan_changes.compare(before, moved, True) == {1: Change.MOVE}
    assert plan_changes.compare(before, {}, True) == {1: Change.STOP}
    with pytest.raises(ValueError, match="neither"):
        plan_changes.classify(None, None, True)


def test_where_regroups_restart_a_job_that_shares_its_gpus_regroups_at_its_gate():
    """The live rule (`regroup_in_gate`): a new slot order or new members on the GPUs a job
    already shares are its stage gate's business; a job that ran alone has no gate: it
    restarts. The simulator's presets leave it off (the artifact restarts every regroup)."""
    where = (NodeSlice(0, (0,)),)
    pair, flipped = {1: ((1, 2), where), 2: ((1, 2), where)}, {1: ((2, 1), where),
                                                              2: ((2, 1), where)}
    assert plan_changes.compare(pair, flipped, False, True) == {1: Change.REGROUP,
                                                                2: Change.REGROUP}
    assert plan_changes.compare(pair, flipped, False) == {1: Change.RESTART, 2: Change.RESTART}
    alone = {1: ((1,), where)}
    assert plan_changes.compare(alone, flipped, False, True) == {1: Change.RESTART,
                                                                 2: Change.START}
    shrunk = {1: ((1,), where)}  # 2 leaves the pair: 1 goes on at the gate, alone
    assert plan_changes.compare(pair, shrunk, False, True) == {1: Change.REGROUP,
                                                               2: Change.STOP}
    assert not any(p.model.regroup_in_gate for p in map(get_preset, ("paper", "default")))


def test_simulator_charges_a_restart_only_for_what_the_comparison_restarts():
    """Job 0 runs alone, job 1 joins it on its GPU: in place job 0 pays its start only; with
    restarts it pays again at the regroup and job 1 pays its own start in both."""
    first = job(0, iterations=200, stages=(0.1, 0.2, 0.05), model="bert")
    second = job(1, submit=50.0, iterations=5000, stages=(0.05, 0.1, 0.2), model="vgg16")
    started = {}
    for preset in (IN_PLACE, RESTARTS):
        res = simulate([first, second], spec(gpus=1), "muri-s", preset)
        started[preset.model.regroup_in_place] = {o.job_id: o.end for o in res.outcomes}
    assert started[False][0] - started[True][0] == pytest.approx(IN_PLACE.model.overhead("bert", 1))


def test_live_paper_preset_restarts_a_regrouped_job_as_the_simulator_does(harness):  # noqa: F811
    """Under the paper preset a regroup restarts the job (the simulator charges it a
    restart): the live service stops and relaunches it, even with emulated trainers that
    could go on in place, and never asks for job.regroup."""
    h = harness(policy="muri-s", spec=spec(nodes=1, gpus=4), preset="paper")
    h.start_scheduler()
    n0 = h.agent("n0", regroups=True)
    h.wait_online("n0")
    h.submit(job(1, num_gpu=4, stages=(0.3, 0.05, 0.05), iterations=100_000))
    assert n0.next_launch()["group"] == [1]
    h.submit(job(2, num_gpu=4, stages=(0.05, 0.3, 0.05), iterations=100_000))
    assert n0.stops.get(timeout=DEADLINE) == 1
    launches = {}
    while len(launches) < 2:
        launch = n0.next_launch()
        launches[launch["job_id"]] = launch
    assert sorted(launches[1]["group"]) == [1, 2] == sorted(launches[2]["group"])
    wait_for(lambda: h.job(1)["state"] == "running" and len(h.job(1)["group"]) == 2)
    assert n0.regroups.empty()
    with Journal(h.run_dir / "journal.db") as log:
        assert [e[1] for e in log.events(1)] == ["submitted", "started", "stopped", "started"]


def test_service_torch_workload_builds_its_preset_without_regroup_in_place(tmp_path):
    """The service asks the preset, never the workload, at each round; torch trainers cannot
    regroup in place, so the preset it builds for them says so."""
    from scheduler.live.options import Options
    from scheduler.live.service import SchedulerService

    for workload, expected in (("emulated", True), ("torch", False)):
        (tmp_path / workload).mkdir()
        svc = SchedulerService(None, Options(spec=spec(), run_dir=tmp_path / workload,
                                             workload=workload))
        try:
            assert svc.state.core.model.regroup_in_place is expected
            assert svc.state.core.policy.model is svc.state.core.model
        finally:
            svc.close()
