"""The placement's shortcuts (GPU bit masks, the first node that may fit each request size,
idle nodes counted per switch) must decide exactly what scanning every node's GPU list from
scratch decides, for any sequence of requests, keeps, resets and offline nodes."""
from hypothesis import given, settings, strategies as st

from scheduler.core.placement import ClusterState, Demand
from scheduler.core.state import NodeSlice
from specs.spec import ClusterSpec


class ScanEverything:
    """The rule written plainly: lists of free GPU ids, every request scans from node 0."""

    def __init__(self, spec: ClusterSpec, demand: Demand, offline: set[int]):
        g, n = spec.gpus_per_node, spec.num_nodes
        self.g, self.demand, self.spec = g, demand, spec
        self.free = [[] if node in offline else list(range(g)) for node in range(n)]
        self.cpus = [0 if node in offline else spec.cpus_per_node for node in range(n)]

    def _take(self, node, count, job_gpus):
        taken, self.free[node] = tuple(self.free[node][:count]), self.free[node][count:]
        self.cpus[node] -= self.demand.cpus(count, job_gpus)
        return NodeSlice(node, taken)

    def place(self, num_gpu):
        if num_gpu > sum(map(len, self.free)):
            return None
        d, g = self.demand, self.g
        if num_gpu <= g:
            for node in range(len(self.free)):
                if len(self.free[node]) >= num_gpu and self.cpus[node] >= d.cpus(num_gpu, num_gpu):
                    return (self._take(node, num_gpu, num_gpu),)
            return None
        per = self.spec.nodes_per_switch
        full_needed, rest = divmod(num_gpu, g)
        for s in range(self.spec.num_switch):
            nodes = range(s * per, (s + 1) * per)
            full = [n for n in nodes if len(self.free[n]) == g
                    and self.cpus[n] >= d.cpus(g, num_gpu)][:full_needed]
            if len(full) < full_needed:
                continue
            found = [(n, g) for n in full]
            if rest:
                last = next((n for n in nodes if n not in full and len(self.free[n]) >= rest
                             and self.cpus[n] >= d.cpus(rest, num_gpu)), None)
                if last is None:
                    continue
                found.append((last, rest))
            return tuple(self._take(n, c, num_gpu) for n, c in found)
        return None

    def keep(self, slices, job_gpus):
        if sum(len(s.gpus) for s in slices) != job_gpus:
            return False
        d = self.demand
        for s in slices:
            if not set(s.gpus) <= set(self.free[s.node]) \
                    or self.cpus[s.node] < d.cpus(len(s.gpus), job_gpus):
                return False
        for s in slices:
            self.free[s.node] = [x for x in self.free[s.node] if x not in s.gpus]
            self.cpus[s.node] -= d.cpus(len(s.gpus), job_gpus)
        return True


_step = st.one_of(
    st.tuples(st.just("place"), st.sampled_from([1, 2, 3, 4, 5, 8, 12, 16, 20, 32])),
    st.tuples(st.just("reserve"), st.sampled_from([1, 2, 4, 8, 16])),
    st.tuples(st.just("keep"), st.integers(0, 30)),  # a placement handed out earlier
    st.tuples(st.just("reset"), st.sets(st.integers(0, 11), max_size=3)),
)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 3), st.integers(1, 4), st.sampled_from([1, 2, 4, 8]),
       st.sampled_from([8, 20, 48, 92]), st.lists(_step, max_size=60))
def test_shortcuts_place_what_scanning_every_node_places(switches, per_switch, gpus, cpus,
                                                         steps):
    spec = ClusterSpec(switches, per_switch, gpus, cpus, 256)
    demand = Demand(cpu_per_gpu=6, cpu_single_gpu=2)
    fast = ClusterState(spec, demand)
    plain = ScanEverything(spec, demand, set())
    handed: list = []
    for op, arg in steps:
        if op == "place":
            got = fast.place(arg)
            assert got == plain.place(arg)
            if got is not None:
                handed.append((got, arg))
        elif op == "reserve":
            assert fast.can_place(arg) == (plain.place(arg) is not None)
        elif op == "keep" and handed:
            slices, size = handed[arg % len(handed)]
            assert fast.keep(slices, size) == plain.keep(slices, size)
        elif op == "reset":
            fast.offline = {n for n in arg if n < spec.num_nodes}
            fast.reset()
            plain = ScanEverything(spec, demand, fast.offline)
        assert fast.free_gpus == plain.free
        assert fast.free_cpus == plain.cpus
        assert fast.free_count == [len(f) for f in plain.free]
        assert fast.free_total == sum(map(len, plain.free))


def test_keep_refuses_gpu_ids_no_node_has():
    c = ClusterState(ClusterSpec(1, 1, 4, 64, 256))
    assert not c.keep((NodeSlice(0, (-1,)),), 1)
    assert not c.keep((NodeSlice(0, (4,)),), 1)
    assert c.free_total == 4
