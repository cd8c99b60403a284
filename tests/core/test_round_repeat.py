"""A round that repeats the last one changes nothing, and placement that remembers its
answers answers as the definition does. Invisible in the results: whole simulations are
compared with a simulator whose placement makes every answer anew by the definition (search,
then take) and whose core compares every job of every plan."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from scheduler.core.engine import Core
from scheduler.core.placement import ClusterState, Demand
from scheduler.presets import get_preset
from scheduler.core.state import NodeSlice, Status
from scheduler.loop import Loop
from scheduler.sim.simulator import Simulator, make_core
from tests.helpers import job as record, run_outcomes, spec, traces
from tests.core.test_placement_incremental import ScanEverything


class DefinitionCluster(ClusterState):
    """place() making a new answer every time: equal to the remembered one, never the same."""

    __slots__ = ()

    def place(self, num_gpu, pools=None):
        answer = super().place(num_gpu, pools)
        if answer is None:
            return None
        return tuple(NodeSlice(piece.node, piece.gpus) for piece in answer)


class EveryJobCore(Core):
    """Every round compares every job of the plan, as if something had changed."""

    def round(self, now):
        self._disturbed = True
        return super().round(now)


def outcomes(plain, records, cluster_spec, policy, preset):
    sim = Simulator(records, cluster_spec, policy, preset)
    if plain:
        sim.core = EveryJobCore(cluster_spec, sim.core.policy, sim.core.model)
        sim.core.cluster = DefinitionCluster(cluster_spec, sim.core.cluster.demand)
        sim.loop = Loop(sim.core, sim.cluster)
    return run_outcomes(sim)


@settings(max_examples=60, deadline=None)
@given(traces(), st.sampled_from(["srtf", "srsf", "fifo", "tiresias", "antman", "muri-s"]),
       st.sampled_from(["paper", "default"]), st.sampled_from([(2, 4, 64), (3, 8, 40)]))
def test_rounds_handed_back_unchanged_give_what_redoing_every_round_gives(
        records, policy, preset, shape):
    nodes, gpus, cpus = shape
    cluster_spec = spec(nodes=nodes, gpus=gpus, cpus=cpus)
    p = get_preset(preset)
    assert (outcomes(False, records, cluster_spec, policy, p)
            == outcomes(True, records, cluster_spec, policy, p))


def test_a_job_stopped_between_two_equal_rounds_runs_again():
    """The policy hands back the groups of the last round, but the core was told in
    between that the job stopped: the round must start it again, not skip it."""
    preset = get_preset("paper")
    core = make_core(spec(nodes=1, gpus=4), "srtf", preset)
    core.submit(record(0, num_gpu=2, iterations=1000), 0.0)
    first = core.round(0.0)
    core.stop(0, 1.0)
    assert core.jobs[0].status is Status.PENDING
    again = core.round(1.0)
    assert again.groups == first.groups  # the shortcut's case, but for the stop
    job = core.jobs[0]
    assert job.status is Status.RUNNING and job.starts == 2 and job.preemptions == 1
    assert [j.id for j in core.running_jobs()] == [0]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([1, 1, 2, 3, 4, 8]), max_size=12),
       st.sets(st.integers(0, 2), max_size=1))
def test_placement_answers_equal_the_definition(requests, offline):
    cluster_spec = spec(nodes=3, gpus=4, cpus=40)
    cluster = ClusterState(cluster_spec, Demand(6, 2))
    cluster.offline.update(offline)
    cluster.reset()
    plain = ScanEverything(cluster_spec, Demand(6, 2), cluster.offline)
    assert cluster.free_when_empty() == cluster.free_total
    first = []
    for gpus in requests:
        answer = cluster.place(gpus)
        assert answer == plain.place(gpus) and cluster.free_total == sum(map(len, plain.free))
        first.append(answer)
    cluster.reset()
    again = [cluster.place(gpus) for gpus in requests]
    assert again == first  # the same requests from empty: the same answers
