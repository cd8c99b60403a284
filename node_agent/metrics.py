"""A node agent's Prometheus metrics (`--metrics HOST:PORT` on its command line).

Why: the scheduler knows what it planned; only the node sees who actually holds each
resource. The stage gates report every grant and release (their `on_event`), which this
module folds into hold times per resource (a histogram, and a running total whose rate is
the resource's occupancy); trainers and GPUs are read from the job table when scraped.
One CollectorRegistry per agent, no process-global state.
"""
from __future__ import annotations

import threading
from typing import Any, Iterator

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

HOLD_BUCKETS = (.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10)


class AgentMetrics(Collector):
    """The agent's registry: gate hold times as they happen, the table when scraped."""

    def __init__(self, node: str, gpus: tuple[int, ...], table: Any):
        self.node, self.gpus, self.table = node, tuple(gpus), table
        self.registry = CollectorRegistry(auto_describe=True)
        self.holds = Histogram(
            "interlace_gate_hold_seconds", "How long a trainer held a resource's turn at its "
            "node's stage gate (the measured stage time), wall seconds",
            ["node", "resource"], buckets=HOLD_BUCKETS, registry=self.registry)
        self._lock = threading.Lock()
        self._held: dict[tuple[str, str], tuple[Any, float]] = {}  # (gate, stage) -> job, since
        self._held_total: dict[str, float] = {}  # resource -> seconds held, all gates
        self.registry.register(self)

    # -- from the gates' threads -----------------------------------------------------------
    def gate_event(self, gate: str, event: dict) -> None:
        """One event of a stage gate (node_agent.gate_turns): grants open a hold, releases
        close it; a member that leaves or is dropped closes whatever it held."""
        kind, t = event.get("event"), event.get("t")
        if not isinstance(t, (int, float)):
            return
        with self._lock:
            if kind == "grant":
                self._held[(gate, event["stage"])] = (event["job"], t)
            elif kind == "release":
                self._close((gate, event["stage"]), t)
            elif kind in ("left", "dropped"):
                for key in [k for k, (job, _) in self._held.items()
                            if k[0] == gate and job == event.get("job")]:
                    self._close(key, t)

    def _close(self, key: tuple[str, str], t: float) -> None:
        held = self._held.pop(key, None)
        if held is None:
            return
        seconds = max(t - held[1], 0.0)
        resource = key[1]
        self._held_total[resource] = self._held_total.get(resource, 0.0) + seconds
        self.holds.labels(node=self.node, resource=resource).observe(seconds)

    # -- at scrape time --------------------------------------------------------------------
    def describe(self) -> list:
        return []

    def collect(self) -> Iterator[Any]:
        table = self.table
        with table.lock:
            jobs = list(table.jobs.values())
            launches = table.launches
        allocated = len({g for job in jobs for g in job.gpus})
        gates = len({job.gate for job in jobs if job.gate})
        with self._lock:
            now_held: dict[str, int] = {}
            for _, stage in self._held:
                now_held[stage] = now_held.get(stage, 0) + 1
            totals = dict(self._held_total)
        node = [self.node]
        yield _gauge("interlace_agent_trainers", "Jobs whose trainers run on this node",
                     node, len(jobs))
        yield _gauge("interlace_agent_gpus", "GPUs this agent offers", node, len(self.gpus))
        yield _gauge("interlace_agent_gpus_allocated", "GPUs held by trainers on this node",
                     node, allocated)
        yield _gauge("interlace_gates", "Stage gates open on this node (interleaved groups of "
                     "torch jobs)", node, gates)
        held = GaugeMetricFamily("interlace_gate_held", "Gates on this node whose turn on the "
                                 "resource is held right now", labels=["node", "resource"])
        for stage in sorted(set(now_held) | set(totals)):
            held.add_metric([self.node, stage], now_held.get(stage, 0))
        yield held
        busy = CounterMetricFamily("interlace_gate_held_seconds", "Seconds the resource's "
                                   "turn was held, summed over this node's gates; its rate "
                                   "is the occupancy", labels=["node", "resource"])
        for stage in sorted(totals):
            busy.add_metric([self.node, stage], totals[stage])
        yield busy
        launched = CounterMetricFamily("interlace_agent_launches", "Trainer launches on this "
                                       "node", labels=["node"])
        launched.add_metric(node, launches)
        yield launched


def _gauge(name: str, doc: str, node: list[str], value: float) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=["node"])
    family.add_metric(node, value)
    return family
