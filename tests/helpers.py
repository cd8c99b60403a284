"""Small builders shared by the tests."""
from __future__ import annotations

from operator import attrgetter

from hypothesis import strategies as st

from scheduler.core.policies.priority import PriorityPolicy
from specs.spec import ClusterSpec
from traces.record import JobRecord


def spec(nodes: int = 1, gpus: int = 4, cpus: int = 64, switches: int = 1) -> ClusterSpec:
    return ClusterSpec(num_switch=switches, nodes_per_switch=nodes, gpus_per_node=gpus,
                       cpus_per_node=cpus, mem_per_node=256)


def job(job_id: int, num_gpu: int = 1, submit: float = 0.0, iterations: int = 100,
        stages: tuple = (0.1, 0.1, 0.1), iteration_time: float | None = None,
        model: str = "resnet18", priority: int = 0) -> JobRecord:
    it = sum(stages) if iteration_time is None else iteration_time
    return JobRecord(job_id=job_id, num_gpu=num_gpu, submit_time=submit, iterations=iterations,
                     model_name=model, batch_size=32, duration=iterations * it, interval=0.0,
                     iteration_time=it, stage_times=tuple(stages), priority=priority)


# absent edges, repeated values (ties) and arbitrary positive weights
EDGE_WEIGHTS = st.one_of(
    st.just(0.0),
    st.sampled_from([0.25, 0.5, 1.0]),
    st.floats(min_value=1e-6, max_value=1.0, allow_nan=False),
)


@st.composite
def graphs(draw, max_nodes=10, edge_weight=EDGE_WEIGHTS):
    """(n, {(i, j): weight} for i < j) for the matching tests."""
    n = draw(st.integers(0, max_nodes))
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    weights = draw(st.lists(edge_weight, min_size=len(pairs), max_size=len(pairs)))
    return n, dict(zip(pairs, weights))


@st.composite
def traces(draw):
    """Small random traces: up to 25 jobs of 1-8 GPUs, bursts and spread arrivals, a few
    stage mixes (so that interleaving policies find pairs)."""
    out = []
    for i in range(draw(st.integers(1, 25))):
        out.append(job(
            i, num_gpu=draw(st.sampled_from([1, 1, 2, 4, 8])),
            submit=draw(st.sampled_from([0.0, 0.0, 5.0, 60.0, 600.0])) + i * draw(
                st.sampled_from([0.0, 1.0])),
            iterations=draw(st.sampled_from([10, 100, 500, 2000])),
            stages=draw(st.sampled_from([(0.1, 0.2, 0.1, 0.1), (0.3, 0.1, 0.2, 0.05),
                                         (0.05, 0.4, 0.05, 0.3)]))))
    return out


def run_outcomes(sim) -> tuple | str:
    """A simulation's every job (id, start, end, preemptions, starts), its rounds and its
    utilisation, for comparing two runs; or the error of one that cannot run (a job no node
    can hold: both runs must say so)."""
    try:
        result = sim.run()
    except RuntimeError as error:
        return str(error)
    return ([(o.job_id, o.start, o.end, o.preemptions, o.starts) for o in result.outcomes],
            result.rounds, result.utilisation)


class Log:
    """A structlog-like logger for tests that keeps (event, fields) of every record."""

    def __init__(self) -> None:
        self.records: list[tuple[str, dict]] = []

    def __getattr__(self, level: str):
        return lambda event, **kw: self.records.append((event, kw))

    def of(self, event: str) -> list[dict]:
        return [kw for e, kw in self.records if e == event]


class KeepsItsJobs(PriorityPolicy):
    """A plug-in policy that cannot plan a partial queue (`plans_partial = False`): the core
    refuses it with tenants. Named `tests.helpers:KeepsItsJobs` on a command line."""

    plans_partial = False

    def __init__(self, model):
        super().__init__(model, "keeps-its-jobs", attrgetter("record.submit_time"))


class _RaisesRefusals:
    """A backend for `settle`: an event the core refuses fails the test."""

    def refused(self, event, error):
        raise error


def settle(state) -> None:
    """The events a live state's threads left in its inbox, into its core, as the driver
    loop's next turn applies them (without a round): what a test of the live parts checks
    the core against."""
    from scheduler.loop import Loop

    Loop(state.core, _RaisesRefusals()).apply(state.inbox.take())
