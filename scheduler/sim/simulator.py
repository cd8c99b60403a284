"""The simulator: the driver loop (scheduler/loop.py) over a simulated cluster
(scheduler/sim/cluster.py), and what a run gives back.

A preset gives the run its cost model and policy settings; where it turns the artifact mode
on (scheduler/sim/artifact.py), the core reads times the artifact's way and the cluster
accounts events and overheads as the artifact did. The core never knows it is simulated.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from scheduler.core.engine import Core
from scheduler.core.metrics import JobOutcome, Summary, summarize
from scheduler.core.state import Plan
from scheduler.loop import Loop
from scheduler.plugins import make_policy
from scheduler.presets import Preset
from scheduler.sim import artifact
from scheduler.sim.cluster import Accounting, Faults, SimulatedCluster
from scheduler.sim.tenant_usage import TenantUsage
from specs.spec import ClusterSpec
from specs.tenants import Tenancy
from traces.record import JobRecord


@dataclass
class SimResult:
    policy: str
    preset: str
    outcomes: list[JobOutcome]
    summary: Summary
    utilisation: list[tuple[float, int]] = field(default_factory=list)  # (time, busy GPUs)
    rounds: int = 0
    wall_s: float = 0.0
    # with a tenants file: per tenant what it held and got (TenantUsage.summary), and each
    # change of a tenant's GPUs in use (time, tenant, GPUs)
    tenants: dict | None = None
    tenant_rows: list[tuple[float, str, int]] = field(default_factory=list)


def core_preset(preset: Preset) -> Preset:
    """`preset` as a simulation's core and policies get it: through the artifact mode where
    the preset turns it on."""
    return artifact.for_core(preset) if preset.artifact else preset


def make_core(spec: ClusterSpec, policy: str, preset: Preset,
              tenancy: Tenancy | None = None) -> Core:
    """The core a simulation of `policy` under `preset` runs (for `tenancy`'s tenants)."""
    preset = core_preset(preset)
    return Core(spec, make_policy(policy, preset), preset.model, tenancy)


class Simulator:
    def __init__(self, records: Sequence[JobRecord], spec: ClusterSpec, policy: str,
                 preset: Preset, progress: Callable[[int, int], None] | None = None,
                 on_round: Callable[[float, Plan, Core], None] | None = None,
                 faults: Faults | None = None, tenancy: Tenancy | None = None,
                 watch: Tenancy | None = None, round_interval: float = 0.0):
        """`round_interval`: the cluster plans only every so many seconds (SimulatedCluster).
        `watch`, in a run without `tenancy`: count each tenant's figures as a tenants run
        does (a job is `watch.tenant_of` its trace's tenant), enforcing nothing; so one
        queue for all can be compared with quotas tenant by tenant. Every job's tenant must
        be one of `watch`'s (say, one per name the trace holds)."""
        self.spec = spec
        self.preset = preset
        self.policy_name = policy
        self.core = make_core(spec, policy, preset, tenancy)
        if tenancy is not None:
            self.usage = TenantUsage(tenancy, self.core.tenants.tenant)  # filled as jobs come
        elif watch is not None:
            self.usage = TenantUsage(watch, {r.job_id: watch.tenant_of(r.tenant).name
                                             for r in records})
        else:
            self.usage = None
        accounting = artifact.accounting(self.core.policy) if preset.artifact else Accounting()
        self.cluster = SimulatedCluster(records, self.core.model, accounting, faults, progress,
                                        round_interval)
        # on_round sees every round's plan and the core after it (a sweep's time series)
        self._on_round = on_round
        # each job's GPU types as it ran on them, on a spec that states pools
        self.ran_on: dict[int, list[str]] = {}
        self._types = [spec.layout[p].gpu_type for p in spec.node_pools()] if spec.pools \
            else None
        hook = on_round if self._types is None and self.usage is None else self._each_round
        self.loop = Loop(self.core, self.cluster, hook)

    def _each_round(self, now: float, plan: Plan, core: Core) -> None:
        if self._types is not None:
            self._note_types(plan)
        if self.usage is not None:
            self.usage(now, plan, core)
        if self._on_round is not None:
            self._on_round(now, plan, core)

    def _note_types(self, plan: Plan) -> None:
        """Where the plan's started and changed groups run: their nodes' GPU types."""
        types, ran_on = self._types, self.ran_on
        for group in plan.changes.added if plan.changes is not None else ():
            kinds = {types[piece.node] for piece in group.placement}
            for job in group.jobs:
                seen = ran_on.setdefault(job, [])
                seen.extend(sorted(k for k in kinds if k and k not in seen))

    def run(self) -> SimResult:
        started = time.perf_counter()
        self.loop.run()
        ran_on = self.ran_on
        outcomes = [JobOutcome.of(job, "|".join(ran_on.get(job.id, ())))
                    for job in self.core.jobs.values()]
        wall = time.perf_counter() - started
        utilisation = self.cluster.utilisation
        summary = summarize(outcomes, utilisation, self.spec.total_gpus)
        result = SimResult(self.policy_name, self.preset.name, outcomes, summary,
                           utilisation, self.loop.rounds, wall)
        if self.usage is not None:
            self.usage(summary.makespan, self.core.plan_now, self.core)  # held till the end
            result.tenants = self.usage.summary(outcomes, summary.makespan)
            result.tenant_rows = self.usage.rows
        return result


def simulate(records: Sequence[JobRecord], spec: ClusterSpec, policy: str, preset: Preset,
             progress: Callable[[int, int], None] | None = None,
             on_round: Callable[[float, Plan, Core], None] | None = None,
             faults: Faults | None = None, tenancy: Tenancy | None = None,
             watch: Tenancy | None = None, round_interval: float = 0.0) -> SimResult:
    return Simulator(records, spec, policy, preset, progress, on_round, faults,
                     tenancy, watch, round_interval).run()
