from hypothesis import given, settings, strategies as st

from scheduler.core.placement import ClusterState, Demand
from tests.helpers import spec


def test_small_jobs_take_the_first_node_with_room():
    c = ClusterState(spec(nodes=2, gpus=4))
    assert [s.node for s in c.place(3)] == [0]
    assert [s.node for s in c.place(2)] == [1]  # node 0 has one GPU left
    assert [s.node for s in c.place(1)] == [0]


def test_large_jobs_take_whole_idle_nodes_plus_one_for_the_rest():
    c = ClusterState(spec(nodes=4, gpus=4))
    c.place(1)  # node 0 is no longer idle
    slices = c.place(10)
    assert [(s.node, len(s.gpus)) for s in slices] == [(1, 4), (2, 4), (0, 2)]


def test_a_fragmented_cluster_refuses_what_its_free_count_would_allow():
    c = ClusterState(spec(nodes=2, gpus=4))
    c.place(3), c.place(3)
    assert c.free_total == 2
    assert c.place(2) is None


def test_cpus_limit_placement():
    c = ClusterState(spec(nodes=1, gpus=8, cpus=12), Demand(cpu_per_gpu=6, cpu_single_gpu=2))
    assert c.place(2) is not None  # 12 CPUs
    assert c.place(2) is None  # GPUs free, CPUs not
    assert c.place(1) is None


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([1, 2, 3, 4, 6, 8, 12]), max_size=20),
       st.integers(1, 4), st.sampled_from([2, 4, 8]))
def test_placement_never_hands_out_a_gpu_twice(sizes, nodes, gpus):
    c = ClusterState(spec(nodes=nodes, gpus=gpus, cpus=1000))
    taken = set()
    for n in sizes:
        slices = c.place(n)
        if slices is None:
            continue
        cells = [(s.node, g) for s in slices for g in s.gpus]
        assert len(cells) == n
        assert not taken & set(cells)
        taken |= set(cells)
        assert len({s.node for s in slices}) == (1 if n <= gpus else -(-n // gpus))
    assert c.free_total == nodes * gpus - len(taken)


@settings(max_examples=300, deadline=None)
@given(nodes=st.integers(1, 4), gpus=st.integers(1, 8), cpus=st.integers(1, 64),
       per_gpu=st.integers(1, 12), single=st.integers(1, 12), job=st.integers(1, 32))
def test_a_job_is_called_cpu_short_exactly_when_an_empty_cluster_cannot_place_it(
        nodes, gpus, cpus, per_gpu, single, job):
    """`Demand.misfit` predicts placement: on an empty cluster of enough nodes, a job of any
    size is placed unless it says no node has the CPUs (the oracle is placement itself)."""
    from specs.fit import layout_of

    if job > nodes * gpus:
        return  # too large for the cluster: the pool rule's, not this one's
    demand = Demand(per_gpu, single)
    cluster_spec = spec(nodes=nodes, gpus=gpus, cpus=cpus)
    placed = ClusterState(cluster_spec, demand).place(job) is not None
    assert (demand.misfit(job, layout_of(cluster_spec)) is None) == placed
