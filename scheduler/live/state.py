"""What the live scheduler knows, shared by its threads: its parts, under one lock.

The core is not among what the threads share: the loop (main thread) is its only writer.
The service thread's handlers and the main thread's duties change the live parts below under
`lock` (re-entrant), which the loop never holds while the core plans; what they ask of the
core they put in `inbox` as events (scheduler/events.py) for the loop's next turn, and what
they read of it is `view`, the snapshot the loop takes after each round (coreview.py). It
holds parts, not rules:

| part | what it is |
|---|---|
| `opt`, `log`, `clock`, `now()` | what it was told, where it logs, wall and trace time |
| `nodes` | each node's pool: its GPUs, GPU memory and type (nodes.py) |
| `core` | the scheduling core: the loop's alone (main thread) |
| `inbox`, `view` | events for the core; the core as the last round left it |
| `journal` | the durable record (journal.py) |
| `ledger` | where trainers run and which launches are out (ledger.py) |
| `jobs` | each job's phase, and the transitions that change it (lifecycle.py) |
| `agents` | the registered agents by node name (gateway.AgentSeen) |
| `rounds` | when the next round is due, and the counts so far (rounds.py) |
| `stop_waits` | rounds waiting for stops to end (stopwaits.py) |
| `outbox`, `metrics` | what goes out: events for subscribers, Prometheus |
| `refusals`, `gate_feed` | refusal counts; the gate turns agents measured (web view) |
| `failures` | each job's last failure of its own, and the backoff rule (failures.py) |
| `measured` | what trainers measured: progress, profile estimates, paces, GPU stage times by type (measured.py) |
"""
from __future__ import annotations

import threading
from typing import Any, Callable

from scheduler.core.engine import Core
from scheduler.core.placement import cpu_misfit
from scheduler.events import Inbox
from scheduler.live import coreview
from scheduler.presets import get_preset
from scheduler.live.failures import Failures
from scheduler.live.gatefeed import GateFeed
from scheduler.live.journal import Journal
from scheduler.live.ledger import Ledger
from scheduler.live.measured import Measured
from scheduler.live.lifecycle import Lifecycle
from scheduler.live.metrics import NoMetrics
from scheduler.live.nodes import NodeLayout
from scheduler.live.options import Options
from scheduler.live.rounds import Rounds
from scheduler.live.stopwaits import StopWaits
from scheduler.plugins import make_policy
from specs.tenants import job_problem


class TraceClock:
    """Trace seconds: scaled wall time since start, continuing from where a journal left off."""

    def __init__(self, wall: Callable[[], float], offset: float, scale: float):
        self.wall, self.offset, self.scale = wall, offset, scale
        self.started = wall()  # wall time at start

    def now(self) -> float:
        return self.offset + (self.wall() - self.started) * self.scale


class LiveState:
    """The parts of one live scheduler (the module's table says what each is)."""

    def __init__(self, options: Options, log: Any, clock: Callable[[], float]):
        from broker.client import RefusalLog

        self.opt, self.log, self.clock = options, log, clock
        self.nodes = NodeLayout.of(options.spec)
        self.lock = threading.RLock()
        # a torch trainer that ran alone holds no stage gate: joining a group restarts it;
        # one that shares its GPUs regroups at its gate, and so does every trainer that takes
        # turns (the agents do it): the preset, which the core and the plan comparison read,
        # says so
        preset = get_preset(options.preset, regroup_in_gate=True, **(
            {"regroup_in_place": False} if options.workload == "torch" else {}), **(
            {} if options.interference else {"group_slowdown": {}}), **(
            {"gpu_speed": dict(options.gpu_speed)} if options.gpu_speed else {}))
        self.core = Core(options.spec, make_policy(options.policy, preset), preset.model,
                         options.tenancy)
        self._demand = self.core.cluster.demand  # what a node's CPUs hold: never changes
        self.inbox = Inbox()
        self.view = coreview.take(self.core, options.time_scale, self.nodes.gpus_of)
        self.journal = Journal(options.journal_path)
        # True once requests are answered by a service that syncs the journal before it
        # sends a batch's replies: a submission's commit then need not wait for the disk
        self.sync_before_reply = False
        # when the service thread last found no request waiting (clock seconds; None: no
        # service thread reads requests): what agents sent before then has been heard
        self.caught_up: float | None = None
        self.trace = TraceClock(clock, self.journal.clock(), options.time_scale)
        self.ledger = Ledger()
        self.jobs = Lifecycle(self)
        self.measured = Measured(options.profile_threshold)
        scale = options.time_scale
        self.failures = Failures(options.failure_backoff * scale,
                                 options.failure_backoff_cap * scale, options.max_failures)
        self.agents: dict[str, Any] = {}  # name -> gateway.AgentSeen
        self.rounds = Rounds()
        self.stop_waits = StopWaits()
        self.outbox: list[tuple[str, dict[str, Any]]] = []  # events for the main thread
        self.metrics = NoMetrics()  # SchedulerMetrics under --metrics (metrics.py)
        # input refused anywhere (schema, handlers, core): counted by kind, logged once per
        # sender and kind; shared by the service thread's Service and the main thread
        self.refusals = RefusalLog(log)
        self.gate_feed = GateFeed()  # the agents' measured gate turns (web view)

    def now(self) -> float:
        return self.trace.now()

    def publish_view(self) -> None:
        """The core as it is now, for readers: call it from the loop's thread only."""
        self.view = coreview.take(self.core, self.opt.time_scale, self.nodes.gpus_of)

    def submit_problem(self, record: Any) -> str | None:
        """Why a job cannot be taken on this cluster (its CPUs, its tenant), or None: from
        the spec and the tenants file, which never change, so any thread may ask."""
        spec, tenancy = self.opt.spec, self.opt.tenancy
        return cpu_misfit(self._demand, spec, record) or (
            job_problem(tenancy, record.job_id, record.tenant, record.num_gpu,
                        record.priority_class) if tenancy is not None else None)

    def silent_for(self, last_seen: float, wall: float) -> float:
        """Seconds an agent last heard at `last_seen` has been silent at wall time `wall`, as
        far as the scheduler has read what was sent: up to when its service thread last
        caught up with its requests. A service thread starved of the CPU (a long round, a
        loaded machine) leaves heartbeats waiting unread; they are not silence."""
        heard = wall if self.caught_up is None else min(wall, self.caught_up)
        return heard - last_seen

    def note_caught_up(self) -> None:
        self.caught_up = self.clock()
