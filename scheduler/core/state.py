"""The scheduler's state model: jobs as the core sees them, groups, and the plan of a round.

These are plain value objects. The core owns the `Job` objects and updates them from events;
policies read them and return a `Plan`; drivers (simulator, live service) act on the plan.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from traces.record import JobRecord


class Status(str, Enum):
    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"


@dataclass(slots=True, eq=False)
class Job:
    """One job's scheduling state. Identity matters (eq=False): two jobs are never equal."""

    record: JobRecord
    solo_time: float  # calibrated solo iteration time, seconds
    profile: tuple[float, ...]  # per-stage seconds used by the interleave model
    remaining: float  # remaining iterations (float: the simulator accounts fractions)
    remaining_estimate: float  # remaining solo time as the policy believes it (seconds)
    status: Status = Status.PENDING
    attained: float = 0.0  # wall seconds spent running (incl. restart overheads)
    queue_attained: float = 0.0  # wall seconds that decide a 2D-LAS queue (promotion resets it)
    pending_since_run: float = 0.0  # seconds pending after first run, until the last resume
    pending_mark: float | None = None  # when it last stopped running
    queue: int = 0  # 2D-LAS queue index
    last_update: float = 0.0
    first_start: float | None = None
    finish_time: float | None = None
    preemptions: int = 0
    starts: int = 0
    promotions: int = 0
    group_tt: float = 0.0  # iteration time in its current group (== solo_time alone)
    group_key: tuple[int, ...] = ()  # ids of the current group's members
    restart_overhead: float = 0.0  # seconds a (re)start costs it: the preset's, then measured
    policy_data: dict = field(default_factory=dict)  # per-policy bookkeeping (e.g. Themis)
    # the record's id and #GPUs, copied once (the record is frozen): every round reads them
    # for every running job, and a slot is cheaper to read than a property
    id: int = field(init=False, repr=False)
    num_gpu: int = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.id = self.record.job_id
        self.num_gpu = self.record.num_gpu

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


@dataclass(frozen=True, slots=True)
class NodeSlice:
    """GPUs taken on one node."""

    node: int
    gpus: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Group:
    """Jobs that share the same GPUs, in slot order. A lone job is a group of one."""

    jobs: tuple[int, ...]  # job ids in slot order (the interleave order)
    num_gpu: int
    tt: float  # every member's iteration time in this group (members advance in lockstep)
    placement: tuple[NodeSlice, ...]
    empty_slot: bool = False  # the 3-stage "member 0, empty slot, member 1" layout


def _alone_maker():
    """Group((job_id,), num_gpu, tt, placement) for a job alone, made by setting the slots
    directly: a frozen dataclass's __init__ goes through object.__setattr__ per field, and
    every round of a simulation makes groups for the jobs that moved."""
    new = object.__new__
    set_jobs, set_gpus, set_tt, set_where, set_empty = (
        Group.__dict__[name].__set__
        for name in ("jobs", "num_gpu", "tt", "placement", "empty_slot"))

    def alone(job_id: int, num_gpu: int, tt: float,
              placement: tuple[NodeSlice, ...]) -> Group:
        group = new(Group)
        set_jobs(group, (job_id,))
        set_gpus(group, num_gpu)
        set_tt(group, tt)
        set_where(group, placement)
        set_empty(group, False)
        return group

    return alone


alone = _alone_maker()


@dataclass(frozen=True, slots=True)
class Plan:
    """The outcome of one round: what runs, where, how fast; and when to wake the core."""

    groups: tuple[Group, ...]
    wakeup: float | None = None  # a time at which the policy wants a round without any event
    shared_gpus: bool = False  # groups may overlap on GPUs (AntMan's opportunistic jobs)

    def running(self) -> dict[int, Group]:
        return {j: g for g in self.groups for j in g.jobs}
