"""The scheduler's state model: jobs as the core sees them, groups, and the plan of a round.

These are plain value objects. The core owns the `Job` objects and updates them from events;
policies read them (as `JobView`s) and return a `Plan`; drivers (simulator, live service) act
on the plan.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, NamedTuple, Protocol

from traces.record import JobRecord


class Status(str, Enum):
    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"


@dataclass(slots=True, eq=False)
class Job:
    """One job's scheduling state. Identity matters (eq=False): two jobs are never equal.

    Every field is the core's: the core sets it at submit and changes it from events (time
    moving on, rounds, stops, measurements). Policies read a job through `JobView` and
    never write one; what a policy derives per job it keeps itself (a dict by job id)."""

    record: JobRecord
    solo_time: float  # calibrated solo iteration time, seconds
    profile: tuple[float, ...]  # per-stage seconds used by the interleave model
    remaining: float  # remaining iterations (float: the simulator accounts fractions)
    # remaining solo time as the scheduler knows it (seconds): remaining x solo time, or
    # before the job has run the trace's duration where the policy plans by it
    remaining_estimate: float
    status: Status = Status.PENDING
    attained: float = 0.0  # wall seconds spent running (incl. restart overheads)
    pending_since_run: float = 0.0  # seconds pending after first run, until the last resume
    pending_mark: float | None = None  # when it last stopped running
    last_update: float = 0.0  # when its attained service was last brought up to date
    first_start: float | None = None
    running_since: float | None = None  # when it last (re)started: its newest checkpoint
    finish_time: float | None = None
    preemptions: int = 0
    starts: int = 0
    relaunches: int = 0  # restarts while it runs: moved, or regrouped where that restarts it
    group_key: tuple[int, ...] = ()  # ids of the current group's members
    restart_overhead: float = 0.0  # seconds a (re)start costs it: the cost model's, then measured
    stop_time: float = 0.0  # seconds its last stop took before its GPUs were free (measured)
    # GPU memory it holds on each GPU (GB): the record's, until its trainers measure it
    gpu_mem_gb: float = field(init=False)
    # it must run alone: it ran out of GPU memory beside others once (never grouped again)
    alone: bool = False
    # the record's id and #GPUs, copied once (the record is frozen): every round reads them
    # for every running job, and a slot is cheaper to read than a property
    id: int = field(init=False, repr=False)
    num_gpu: int = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.id = self.record.job_id
        self.num_gpu = self.record.num_gpu
        self.gpu_mem_gb = self.record.gpu_mem_gb

    @property
    def submit_time(self) -> float:
        return self.record.submit_time

    @property
    def model(self) -> str:
        return self.record.model_name

    @property
    def priority(self) -> int:
        return self.record.priority

    @property
    def remaining_time(self) -> float:
        return self.remaining * self.solo_time

    @property
    def restart_cost(self) -> float:
        """Seconds of work a stop and restart of this job loses: its stop and its start."""
        return self.stop_time + self.restart_overhead


class JobView(Protocol):
    """A job as a policy sees it: the core's `Job`, read-only (the Policy API's job type;
    `Job` is one). docs/policies.md says what each means."""

    @property
    def id(self) -> int: ...
    @property
    def num_gpu(self) -> int: ...
    @property
    def record(self) -> JobRecord: ...
    @property
    def submit_time(self) -> float: ...
    @property
    def model(self) -> str: ...
    @property
    def priority(self) -> int: ...
    @property
    def status(self) -> Status: ...
    @property
    def solo_time(self) -> float: ...
    @property
    def profile(self) -> tuple[float, ...]: ...
    @property
    def remaining(self) -> float: ...
    @property
    def remaining_estimate(self) -> float: ...
    @property
    def remaining_time(self) -> float: ...
    @property
    def attained(self) -> float: ...
    @property
    def pending_since_run(self) -> float: ...
    @property
    def pending_mark(self) -> float | None: ...
    @property
    def last_update(self) -> float: ...
    @property
    def first_start(self) -> float | None: ...
    @property
    def running_since(self) -> float | None: ...
    @property
    def finish_time(self) -> float | None: ...
    @property
    def preemptions(self) -> int: ...
    @property
    def starts(self) -> int: ...
    @property
    def relaunches(self) -> int: ...
    @property
    def group_key(self) -> tuple[int, ...]: ...
    @property
    def restart_overhead(self) -> float: ...
    @property
    def stop_time(self) -> float: ...
    @property
    def restart_cost(self) -> float: ...
    @property
    def gpu_mem_gb(self) -> float: ...
    @property
    def alone(self) -> bool: ...


_new_tuple = tuple.__new__


class NodeSlice(NamedTuple):
    """GPUs taken on one node. A value: equal slices are the same GPUs."""

    node: int
    gpus: tuple[int, ...]


class Group(NamedTuple):
    """Jobs that share the same GPUs, in slot order. A lone job is a group of one.

    A value (a named tuple: made and compared as plain tuples are, which every round does
    for every group that runs): equal groups run alike."""

    jobs: tuple[int, ...]  # job ids in slot order (the interleave order)
    num_gpu: int
    tt: float  # every member's iteration time in this group (members advance in lockstep)
    placement: tuple[NodeSlice, ...]
    empty_slot: bool = False  # the 3-stage "member 0, empty slot, member 1" layout


def alone(job_id: int, num_gpu: int, tt: float, placement: tuple[NodeSlice, ...]) -> Group:
    """A job's group alone on `placement` (made as the tuple it is: every round of a
    simulation makes groups for the jobs that moved)."""
    return _new_tuple(Group, ((job_id,), num_gpu, tt, placement, False))




class Plan(NamedTuple):
    """The outcome of one round: what runs, where, how fast; and when to wake the core.

    A policy returns the groups; the core hands the plan on with `changes` (a
    plan_changes.PlanChanges), what it changes against what ran before it."""

    groups: tuple[Group, ...]
    wakeup: float | None = None  # a time at which the policy wants a round without any event
    shared_gpus: bool = False  # groups may overlap on GPUs (AntMan's opportunistic jobs)
    changes: Any = None  # PlanChanges, set by the core (None on a policy's own plan)

    def running(self) -> dict[int, Group]:
        return {j: g for g in self.groups for j in g.jobs}
