"""The core's check of every plan a policy makes, before anything acts on it.

A policy is code the core does not trust: a plug-in, or a built-in with a bug. A plan that
names an unknown or finished job, puts a job in two groups, groups jobs of different sizes
or more jobs than the policy may group (plan_changes.diff finds those), or places a group
on GPUs that do not exist, are offline or are taken by another group (unless the plan
declares shared GPUs), or puts more GPU memory on a GPU than its group budget
(scheduler/core/memory.py), or puts a job in a pool it may not run in (a GPU type it does not
accept, a group past that pool's memory) is refused with a `PlanError` that names the policy; nothing
changes.

A plan that changes nothing that runs is not checked again.
"""
from __future__ import annotations

import math
from functools import reduce
from operator import attrgetter, eq, or_
from typing import Mapping

from scheduler.core.memory import Room, fits, held_gb, on_each_gpu
from scheduler.core.state import Group, NodeSlice, Plan
from specs.spec import ClusterSpec


class PlanError(ValueError):
    """A policy's plan that the core refuses."""


class PlanCheck:
    """Checks each plan's placements as sets of GPUs, one bit per GPU of the cluster (bit
    node x gpus_per_node + i: GPU i of that node): a plan is a few operations on whole sets,
    not a step per GPU, so every group of every changed plan is checked."""

    def __init__(self, spec: ClusterSpec, room: Room):
        self.spec = spec
        self.room = room
        self._node_gpus = spec.node_gpus()
        self._pool_of = spec.node_pools()
        # placement -> its set of GPUs (-1: not GPUs of this cluster); a plan names few
        # distinct placements, and the same ones round after round
        self._bits: dict[tuple[NodeSlice, ...], int] = {}

    def bits(self, placement: tuple[NodeSlice, ...]) -> int:
        """The set of GPUs of `placement`; -1 when it names a node or GPU that does not
        exist, or a GPU twice."""
        found = self._bits.get(placement)
        if found is None:
            per_node, nodes = self.spec.gpus_per_node, self.spec.num_nodes
            sizes = self._node_gpus
            found = 0
            for piece in placement:
                node = piece.node
                for gpu in piece.gpus:
                    if not (isinstance(node, int) and isinstance(gpu, int)
                            and 0 <= node < nodes and 0 <= gpu < sizes[node]) \
                            or found >> (node * per_node + gpu) & 1:
                        found = -1
                        break
                    found |= 1 << (node * per_node + gpu)
                if found < 0:
                    break
            if len(self._bits) > 65536:
                self._bits.clear()
            self._bits[placement] = found
        return found

    def check(self, policy: str, plan: Plan, offline: set[int], unplaced_ok: bool) -> None:
        """Refuse `plan` (PlanError) where its placements break a rule, the whole plan at
        once (plan_changes.diff has checked its groups' members)."""
        groups = plan.groups
        wanted = list(map(self._bits.get, map(_placement, groups)))
        if None in wanted:
            wanted = [self.bits(g.placement) for g in groups]
        taken = reduce(or_, wanted, 0)  # -1 where one is not GPUs of this cluster
        sizes = list(map(_gpus, groups))
        if 0 in wanted and unplaced_ok:  # groups on no GPU (the artifact's quirk) need none
            sizes = [n if bits else 0 for bits, n in zip(wanted, sizes)]
        if taken < 0 or not all(map(eq, map(int.bit_count, wanted), sizes)):
            raise _refuse(policy, self._misplaced(groups, unplaced_ok))
        if offline and taken & self._offline_bits(offline):
            raise _refuse(policy, self._misplaced(groups, unplaced_ok, offline))
        # each group has as many GPUs as it needs: fewer in all means two share one
        if not plan.shared_gpus and taken.bit_count() != sum(sizes):
            raise _refuse(policy, "two of its groups are given the same GPU")

    def check_memory(self, policy: str, plan: Plan, added, jobs: Mapping,
                     lonely: bool = False) -> None:
        """Refuse `plan` where the jobs on one GPU may not share it (memory.fits: their memory
        past the budget, or one that must run alone) or a job runs in a pool it may not (see
        memory.Room): the members of each group it starts or changes (`added`), or under
        shared GPUs every group on each GPU. `jobs`: job id -> the core's job; `lonely`: some
        job must run alone."""
        room = self.room
        if room.simple:
            budget = room.budget
            if budget == math.inf and not lonely:
                return
            if not plan.shared_gpus:
                for group in added:
                    if len(group.jobs) > 1 and not fits([jobs[j] for j in group.jobs], budget):
                        raise _refuse(policy, _crowded(f"group {list(group.jobs)}", group.jobs,
                                                       jobs, budget))
                return
        pool_of = self._pool_of
        if not plan.shared_gpus:
            for group in added:
                members = [jobs[j] for j in group.jobs]
                allowed = room.pools_for(members)
                for piece in group.placement:
                    if pool_of[piece.node] not in allowed:
                        raise _refuse(policy, self._misfit(f"group {list(group.jobs)}",
                                                           group.jobs, jobs, piece.node))
            return
        for (node, gpu), members in on_each_gpu(plan.groups).items():
            if not room.fits_in([jobs[j] for j in members], pool_of[node]):
                raise _refuse(policy, self._misfit(f"GPU {gpu} of node {node}, with jobs "
                                                   f"{members},", members, jobs, node))

    def _misfit(self, what: str, members, jobs: Mapping, node: int) -> str:
        """Why jobs may not run (together) on `node`: its pool's type or memory."""
        pool = self.spec.layout[self._pool_of[node]]
        types = {t for j in members for t in jobs[j].record.gpu_types}
        if pool.gpu_type and any(jobs[j].record.gpu_types and pool.gpu_type not in
                                 jobs[j].record.gpu_types for j in members):
            return (f"{what} is placed on node {node} of pool {pool.name!r} ({pool.gpu_type}), "
                    f"a type not every member accepts ({'|'.join(sorted(types))})")
        return _crowded(f"{what} on node {node} of pool {pool.name!r}", members, jobs,
                        self.room.budgets[self._pool_of[node]] if len(members) > 1
                        else pool.gpu_mem_gb)

    def _offline_bits(self, offline: set[int]) -> int:
        per_node, sizes = self.spec.gpus_per_node, self._node_gpus
        return reduce(or_, (((1 << sizes[node]) - 1) << node * per_node for node in offline), 0)

    def _misplaced(self, groups: tuple[Group, ...], unplaced_ok: bool,
                   offline: set[int] = frozenset()) -> str:
        """Why a group's placement is refused (the slow path: only when one is)."""
        spec = self.spec
        for group in groups:
            members = list(group.jobs)
            if not group.placement:
                if not unplaced_ok:
                    return f"group {members} is placed on no GPU"
                continue
            for piece in group.placement:
                if piece.node in offline:
                    return f"group {members} is placed on node {piece.node}, which is offline"
            if self.bits(group.placement) < 0:
                return (f"group {members} is placed on {[tuple(p) for p in group.placement]}:"
                        f" there are nodes 0..{spec.num_nodes - 1} of GPUs "
                        f"0..{spec.gpus_per_node - 1}"
                        f"{' (fewer on smaller nodes)' if spec.pools else ''}, each named once")
            count = self.bits(group.placement).bit_count()
            if count != group.num_gpu:
                return f"group {members} needs {group.num_gpu} GPUs and is placed on {count}"
        return "a placement is wrong"  # pragma: no cover (the fast checks found one)


_placement = attrgetter("placement")
_gpus = attrgetter("num_gpu")


def _crowded(what: str, members, jobs: Mapping, budget: float) -> str:
    """Why jobs may not share GPUs: one must run alone, or their memory is past `budget`."""
    lone = [j for j in members if jobs[j].alone]
    if lone:
        return f"{what} holds job {lone[0]}, which must run alone (it ran out of GPU memory)"
    held = held_gb(jobs[j] for j in members)
    return f"{what} holds {held:g} GB on each GPU; at most {budget:g} GB may be"


def _refuse(policy: str, why: str) -> PlanError:
    return PlanError(f"policy {policy!r} made a plan the core refuses: {why}")
