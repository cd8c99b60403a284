"""What every policy shares: the round's inputs and the small hooks the core calls."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from scheduler.placement import ClusterState
from scheduler.presets import Preset
from scheduler.state import Group, Job, NodeSlice, Plan, Status


@dataclass(slots=True)
class RoundContext:
    """One round's view. `queue` is the runnable jobs in the core's persistent order: a policy
    may sort it in place, and ties in later rounds are broken by that order (as in the paper's
    artifact, whose results depend on it)."""

    now: float
    queue: list[Job]
    cluster: ClusterState
    preset: Preset
    previous: dict[int, tuple[NodeSlice, ...]]  # where running jobs are now (if sticky)

    def where(self, job: Job) -> tuple[NodeSlice, ...] | None:
        return self.previous.get(job.id)


class Policy:
    """Base policy: hooks are no-ops; subclasses implement `plan`."""

    name = "base"
    interleaves = False

    def __init__(self, preset: Preset):
        self.preset = preset

    def on_submit(self, job: Job, now: float) -> None:
        """A job arrived: set policy bookkeeping (queues, first estimates)."""

    def on_advance(self, job: Job, now: float) -> None:
        """Time moved on and `job` ran or waited: update bookkeeping (e.g. demotion)."""

    def on_profile(self, job: Job) -> None:
        """A job's measured profile replaced the old one: drop what was derived from it."""

    def on_finish(self, job: Job, now: float) -> None:
        """A job completed; release whatever the policy held for it."""

    def plan(self, ctx: RoundContext) -> Plan:
        raise NotImplementedError


def solo_group(job: Job, placement: Sequence[NodeSlice]) -> Group:
    return Group(jobs=(job.id,), num_gpu=job.num_gpu, tt=job.solo_time,
                 placement=tuple(placement))


def place_units(ctx: RoundContext, units: Sequence[tuple[int, Sequence[Job]]]) -> list:
    """Place units (#GPUs, member jobs) in the given order on an emptied cluster; returns the
    placement of each (None where it does not fit).

    With sticky placement (ctx.previous), units whose members already run somewhere keep
    those GPUs first, so that a newcomer placed earlier in the order cannot take them and
    force a checkpoint-and-restart; the rest are placed after, in order.
    """
    cluster = ctx.cluster
    cluster.reset()
    result: list = [None] * len(units)
    if ctx.previous:
        for i, (gpus, members) in enumerate(units):
            for job in members:
                where = ctx.where(job)
                if where is not None and cluster.keep(where, gpus):
                    result[i] = where
                    break
    for i, (gpus, members) in enumerate(units):
        if result[i] is None:
            result[i] = cluster.place(gpus)
    return result


def place_in_order(ctx: RoundContext, order: Sequence[Job]) -> list[Group]:
    """Greedy consolidated placement on an emptied cluster: each job in turn, if it fits.

    With sticky placement, which jobs run is still decided greedily in priority order (on an
    empty cluster); where they run then prefers where they already are.
    """
    cluster = ctx.cluster
    if ctx.previous:
        cluster.reset()
        order = [job for job in order if cluster.can_place(job.num_gpu)]
    placements = place_units(ctx, [(job.num_gpu, (job,)) for job in order])
    return [solo_group(job, slices) for job, slices in zip(order, placements)
            if slices is not None]


def is_running(job: Job) -> bool:
    return job.status is Status.RUNNING
