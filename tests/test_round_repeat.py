"""A round that repeats the last one is not redone (issue 12, fast policies): placement hands
out one answer object per distinct placement, a policy then hands back last round's groups
(the same tuple), and the core and the simulator skip what those groups already set. All of
it must be invisible in the results: whole simulations are compared with a plain simulator
whose placement makes every answer anew by the definition (search, then take), whose core
updates every job of every plan, and whose runs are classified and built anew each round."""
from __future__ import annotations

import heapq

from hypothesis import given, settings, strategies as st

from scheduler.core.engine import Core
from scheduler.core.placement import ClusterState, Demand
from scheduler.plugins import make_policy
from scheduler.core.presets import get_preset
from scheduler.core.state import Status
from scheduler.sim.simulator import Simulator, _end_heap, _grouped_ends
from tests.helpers import job as record, spec
from tests.test_round_reuse import PlainSimulator, traces


class DefinitionCluster(ClusterState):
    """place() as defined: the first fit searched, a new answer made every time."""

    __slots__ = ()

    def place(self, num_gpu):
        found = self._find(num_gpu)
        if found is None:
            return None
        return tuple(self._take(node, count, num_gpu) for node, count in found)


class EveryJobCore(Core):
    """Every round updates every job of the plan, as if something had changed."""

    def round(self, now):
        self._disturbed = True
        return super().round(now)


class PlainestSimulator(PlainSimulator):
    def __init__(self, records, cluster_spec, policy, preset):
        super().__init__(records, cluster_spec, policy, preset)
        self.core = EveryJobCore(cluster_spec, make_policy(policy, preset), preset)
        self.core.cluster = DefinitionCluster(cluster_spec, self.core.cluster.demand)


def outcomes(kind, records, cluster_spec, policy, preset):
    try:
        result = kind(records, cluster_spec, policy, preset).run()
    except RuntimeError as error:  # a job no node can hold (too few CPUs): both must say so
        return str(error)
    return ([(o.job_id, o.start, o.end, o.preemptions, o.starts) for o in result.outcomes],
            result.rounds, result.utilisation)


@settings(max_examples=60, deadline=None)
@given(traces(), st.sampled_from(["srtf", "srsf", "fifo", "tiresias", "antman", "muri-s"]),
       st.sampled_from(["paper", "default"]), st.sampled_from([(2, 4, 64), (3, 8, 40)]))
def test_rounds_handed_back_unchanged_give_what_redoing_every_round_gives(
        records, policy, preset, shape):
    nodes, gpus, cpus = shape
    cluster_spec = spec(nodes=nodes, gpus=gpus, cpus=cpus)
    p = get_preset(preset)
    assert (outcomes(Simulator, records, cluster_spec, policy, p)
            == outcomes(PlainestSimulator, records, cluster_spec, policy, p))


def test_a_job_stopped_between_two_equal_rounds_runs_again():
    """The policy hands back the very groups of the last round, but the core was told in
    between that the job stopped: the round must start it again, not skip it."""
    preset = get_preset("paper")
    core = Core(spec(nodes=1, gpus=4), make_policy("srtf", preset), preset)
    core.submit(record(0, num_gpu=2, iterations=1000), 0.0)
    first = core.round(0.0)
    core.stop(0, 1.0)
    assert core.jobs[0].status is Status.PENDING
    again = core.round(1.0)
    assert again.groups is first.groups  # the shortcut's case
    job = core.jobs[0]
    assert job.status is Status.RUNNING and job.starts == 2 and job.preemptions == 1
    assert [j.id for j in core.running_jobs()] == [0]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([1, 1, 2, 3, 4, 8]), max_size=12),
       st.sets(st.integers(0, 2), max_size=1))
def test_placement_answers_are_shared_and_equal_the_definition(requests, offline):
    cluster_spec = spec(nodes=3, gpus=4, cpus=40)
    cluster = ClusterState(cluster_spec, Demand(6, 2))
    plain = DefinitionCluster(cluster_spec, Demand(6, 2))
    for c in (cluster, plain):
        c.offline.update(offline)
        c.reset()
    assert cluster.free_when_empty() == cluster.free_total
    first = []
    for gpus in requests:
        answer = cluster.place(gpus)
        assert answer == plain.place(gpus) and cluster.free_total == plain.free_total
        first.append(answer)
    cluster.reset()
    again = [cluster.place(gpus) for gpus in requests]
    # the same requests from empty: the same answers, and single-node ones the same objects
    assert again == first
    assert all(a is b for a, b, g in zip(again, first, requests) if a is not None and g <= 4)


ENDS = st.lists(st.tuples(st.sampled_from([1.0, 1.0 + 1e-10, 1.0 + 1.5e-9, 1.0 + 2.2e-9, 2.0,
                                           2.0 + 3e-9, 2.0 - 2e-9, 5.0, 100.0, 0.0, -1.0,
                                           -1.0 - 1e-9, float("inf")]),
                          st.integers(0, 1000)), max_size=14, unique_by=lambda e: e[1])


@settings(max_examples=500, deadline=None)
@given(ENDS, st.sampled_from([0.0, 1e-9, 2e-9, 1e-8, 0.6]))
def test_the_end_heap_pops_what_the_grouped_ends_pop(ends, rel):
    grouped = _grouped_ends(list(ends), rel)
    heapq.heapify(grouped)
    fast = _end_heap(list(ends), rel)
    assert ([heapq.heappop(fast) for _ in range(len(fast))]
            == [heapq.heappop(grouped) for _ in range(len(grouped))])
