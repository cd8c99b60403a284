"""The live scheduler's Prometheus metrics (`--metrics HOST:PORT`).

Why two kinds: what happens (a round, a finished job, a journal write, a timing report) is
observed where it happens into histograms, an O(1) cost on its path; what *is* (jobs by
state, groups, GPUs, agents, refusals) is read from the state only when Prometheus scrapes,
by `StateCollector`, so rounds pay nothing for it. Each scheduler has its own
CollectorRegistry (no process-global registry), so tests can run many side by side.
"""
from __future__ import annotations

from collections import Counter
from typing import Any, Iterator, Mapping

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from scheduler.core.interleave import efficiency
from scheduler.core.profiles import LAYOUTS
from scheduler.live.nodes import UNSTATED
from scheduler.live.tenant_metrics import families as tenant_families

# round phases are milliseconds to seconds; JCT and queueing delay are trace seconds (minutes
# to weeks); journal commits are fsyncs (sub-ms to tens of ms); stage times are per iteration
ROUND_BUCKETS = (.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30)
JOB_BUCKETS = (60, 300, 900, 1800, 3600, 7200, 14400, 28800, 86400, 172800, 604800, 2419200)
JOURNAL_BUCKETS = (.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1)
STAGE_BUCKETS = (.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5)


class NoMetrics:
    """What the state observes into when no `--metrics` was asked for: nothing."""

    def round_planned(self, seconds: float) -> None:
        pass

    def round_done(self, seconds: float) -> None:
        pass

    def job_finished(self, jct: float, queue_delay: float | None) -> None:
        pass

    def stage_times(self, stages: Mapping[str, float]) -> None:
        pass

    def journal_write(self, seconds: float) -> None:
        pass


class SchedulerMetrics(NoMetrics):
    """The event-side metrics and the registry that also holds the scrape-time collector."""

    def __init__(self, state: Any = None):
        self.registry = CollectorRegistry(auto_describe=True)
        reg = self.registry
        self.planning = Histogram(
            "interlace_round_planning_seconds", "Wall time the core took to plan one round",
            buckets=ROUND_BUCKETS, registry=reg)
        self.whole = Histogram(
            "interlace_round_seconds", "Wall time of one whole round: plan, stops, regroups, "
            "launches, each answered", buckets=ROUND_BUCKETS, registry=reg)
        self.jct = Histogram(
            "interlace_job_completion_seconds", "Job completion time (trace seconds from "
            "submission to finish)", buckets=JOB_BUCKETS, registry=reg)
        self.queueing = Histogram(
            "interlace_job_queueing_delay_seconds", "Trace seconds from a job's submission to "
            "its first start", buckets=JOB_BUCKETS, registry=reg)
        self.stages = Histogram(
            "interlace_measured_stage_seconds", "Per-iteration stage times trainers measured "
            "and reported (event.timing), trace seconds", ["resource"],
            buckets=STAGE_BUCKETS, registry=reg)
        self.journal = Histogram(
            "interlace_journal_write_seconds", "Wall time of one durable journal transaction",
            buckets=JOURNAL_BUCKETS, registry=reg)
        if state is not None:
            reg.register(StateCollector(state))

    def round_planned(self, seconds: float) -> None:
        self.planning.observe(seconds)

    def round_done(self, seconds: float) -> None:
        self.whole.observe(seconds)

    def job_finished(self, jct: float, queue_delay: float | None) -> None:
        self.jct.observe(max(jct, 0.0))
        if queue_delay is not None:
            self.queueing.observe(max(queue_delay, 0.0))

    def stage_times(self, stages: Mapping[str, float]) -> None:
        for resource, seconds in stages.items():
            self.stages.labels(resource=resource).observe(seconds)

    def journal_write(self, seconds: float) -> None:
        self.journal.observe(seconds)


def _group_figures(where: Any, profiles: tuple) -> tuple[int, float, float | None]:
    """A launched group's GPUs, predicted GPU-busy share, and predicted efficiency."""
    gpus = sum(len(s.gpus) for s in where.slices)
    eff = efficiency(profiles, where.tt) if profiles and where.tt > 0 else None
    return gpus, _gpu_busy(profiles, where.tt), eff


def _gpu_busy(profiles: tuple[tuple[float, ...], ...], tt: float) -> float:
    """Share of the group's iteration during which its GPUs compute, as the planner predicts."""
    if not profiles or not tt > 0:
        return 0.0
    busy = 0.0
    for profile in profiles:
        names = LAYOUTS.get(len(profile), ())
        if "gpu" in names:
            busy += profile[names.index("gpu")]
    return min(busy / tt, 1.0)


class StateCollector(Collector):
    """Gauges read from a LiveState at scrape time: the core's figures from the last round's
    view (never the core: a scrape and a round never wait for each other), the live parts'
    under the state's lock (O(running jobs) references, O(1) counts); each group's GPUs, predicted GPU share and efficiency are computed after, outside
    the lock, and kept from one scrape to the next while the group is unchanged."""

    def __init__(self, state: Any):
        self.state = state
        self._groups: dict[tuple, tuple[int, float, float | None]] = {}  # per launched group

    def describe(self) -> list:
        return []  # families are made per scrape; nothing to check at registration

    def collect(self) -> Iterator[Any]:
        state = self.state
        view = state.view  # the core after the last round
        with state.lock:
            placed = state.ledger.placed
            counts = state.jobs.status_counts()  # ended before a restart too
            refused_moves = dict(state.jobs.refused)
            groups = {p.group: p for j, p in placed.items() if not state.jobs.ended(j)}
            nodes = state.nodes
            agents = len(state.agents)
            offline = state.opt.spec.num_nodes - agents
            rounds, failures = state.rounds.count, state.rounds.failures
        launched = [(where, view.speeds.profiles_on(
            [view.jobs[j] for j in where.group if j in view.jobs], where.slices))
            for where in groups.values()] if view.speeds is not None else []
        total_gpus = state.opt.spec.total_gpus
        tenants = view.tenants  # None without --tenants
        refused = state.refusals.counts()  # the refusal log has a lock of its own
        by_size: Counter[int] = Counter()
        eff_sum: Counter[int] = Counter()
        eff_n: Counter[int] = Counter()
        allocated = busy = 0.0
        busy_by_type = nodes.busy_by_type(s for where, _ in launched for s in where.slices)
        known, self._groups = self._groups, {}
        for key in launched:
            figures = known.get(key)
            if figures is None:
                figures = _group_figures(*key)
            self._groups[key] = figures
            gpus, gpu_share, eff = figures
            size = len(key[0].group)
            by_size[size] += 1
            allocated += gpus
            busy += gpus * gpu_share
            if eff is not None:
                eff_sum[size] += eff
                eff_n[size] += 1

        jobs = GaugeMetricFamily("interlace_jobs", "Jobs by state, as status.query counts them",
                                 labels=["state"])
        for name, value in counts.items():
            jobs.add_metric([name], value)
        yield jobs
        yield GaugeMetricFamily("interlace_queue_length",
                                "Jobs waiting for GPUs (submitted, not running, not finished)",
                                value=counts["pending"])
        sizes = GaugeMetricFamily("interlace_groups", "Running groups by number of members",
                                  labels=["size"])
        for size in sorted(by_size):
            sizes.add_metric([str(size)], by_size[size])
        yield sizes
        yield GaugeMetricFamily("interlace_gpus", "GPUs in the cluster spec", value=total_gpus)
        yield GaugeMetricFamily("interlace_gpus_allocated",
                                "GPUs held by running groups", value=allocated)
        spec_types = nodes.gpus_by_type()
        by_type = GaugeMetricFamily("interlace_gpus_by_type", "GPUs in the cluster spec, by "
                                    f"its pools' GPU type ({UNSTATED}: a pool that states "
                                    "none)", labels=["gpu_type"])
        for name in sorted(spec_types):
            by_type.add_metric([name], spec_types[name])
        yield by_type
        busy_type = GaugeMetricFamily("interlace_gpus_busy_by_type", "GPUs held by running "
                                      "groups, by their node's pool's GPU type",
                                      labels=["gpu_type"])
        for name in sorted(set(spec_types) | set(busy_by_type)):  # 0 where none is busy
            busy_type.add_metric([name], busy_by_type.get(name, 0))
        yield busy_type
        yield GaugeMetricFamily(
            "interlace_gpu_utilisation_ratio", "Predicted share of the cluster's GPU time spent "
            "computing: running groups' GPU stage time over their iteration time, per GPU",
            value=busy / total_gpus if total_gpus else 0.0)
        eff = GaugeMetricFamily(
            "interlace_group_predicted_efficiency_ratio", "The planner's mean predicted "
            "efficiency of running groups (busy resource-time share), by group size",
            labels=["size"])
        for size in sorted(eff_sum):
            eff.add_metric([str(size)], eff_sum[size] / eff_n[size])
        yield eff
        yield GaugeMetricFamily("interlace_agents_alive", "Registered agents with a heartbeat "
                                "within --agent-timeout", value=agents)
        yield GaugeMetricFamily("interlace_nodes_offline", "Nodes of the spec without a live "
                                "agent", value=offline)
        refusals = CounterMetricFamily("interlace_messages_refused",
                                       "Input refused (schema, handlers, core), by reason",
                                       labels=["reason"])
        for reason, count in refused.items():
            refusals.add_metric([reason], count)
        yield refusals
        yield CounterMetricFamily("interlace_rounds", "Rounds run", value=rounds)
        yield CounterMetricFamily("interlace_round_failures", "Rounds that raised",
                                  value=failures)
        moves = CounterMetricFamily("interlace_transitions_refused", "Job lifecycle "
                                    "transitions refused as not allowed (a bug: each is "
                                    "logged as transition_refused)", labels=["transition"])
        for name, count in refused_moves.items():
            moves.add_metric([name], count)
        yield moves
        if tenants is not None:
            yield from tenant_families(tenants)
