"""GPU types that run a job's GPU stage faster or slower than its profile says.

Profiles are a V100's (specs/gpu_speed.py). A group placed on another type runs its members'
GPU stages at that type's speed, so its iteration time is the interleave model's on the
scaled profiles, times the group's interference factor as planned: `retime` gives the core's
plan those times. Placement asks `tiers` to try the types where jobs run fastest first.
A cluster whose types all run every model at speed 1 (a Muri-form spec, untyped pools,
V100s) is `inactive`, and nothing here is called.
"""
from __future__ import annotations

from typing import Mapping, Sequence

from scheduler.core.interleave import group_tt
from scheduler.core.state import Group, JobView
from specs.gpu_speed import FAMILY, speed
from specs.shape import ClusterSpec

#: the GPU stage's index in a profile of each length (traces.record's stage layouts)
GPU_STAGE = {3: 1, 4: 2}


class Pooled(frozenset):
    """The pools a job may use (a frozenset, as placement takes it), with `tiers`: the same
    pools in the order to try them, fastest for the job first."""

    tiers: tuple[frozenset[int], ...] = ()


class TypeSpeeds:
    """Each (model, GPU type)'s speed: the overrides (measured, or given; model "": every
    model), else the shipped table."""

    def __init__(self, spec: ClusterSpec, overrides: Mapping[tuple[str, str], float]):
        self.types = tuple(pool.gpu_type for pool in spec.layout)
        self._node_pool = spec.node_pools()
        self.overrides = dict(overrides)
        self._known: dict[tuple[str, str], float] = {}
        self._retimed: dict[tuple, Group] = {}
        models = list(FAMILY) + ["(other)"] + [m for m, _ in self.overrides]
        self.active = any(self.of(m, t) != 1.0 for t in set(self.types) if t for m in models)

    def of(self, model: str, gpu_type: str) -> float:
        key = (model, gpu_type)
        found = self._known.get(key)
        if found is None:
            found = self.overrides.get(key, self.overrides.get(("", gpu_type)))
            if found is None:
                found = speed(model, gpu_type)
            self._known[key] = found
        return found

    def pool_speed(self, jobs: Sequence[JobView], pool: int) -> float:
        """The members' mean speed on `pool`'s type: what placement ranks pools by."""
        kind = self.types[pool]
        return sum(self.of(j.model, kind) for j in jobs) / len(jobs)

    def tiers(self, jobs: Sequence[JobView], pools: frozenset[int]) -> frozenset[int]:
        """`pools`, as a `Pooled` with tiers where their types run `jobs` at different
        speeds (fastest first; pools of one speed share a tier)."""
        by_speed: dict[float, set[int]] = {}
        for pool in pools:
            by_speed.setdefault(self.pool_speed(jobs, pool), set()).add(pool)
        if len(by_speed) < 2:
            return pools
        found = Pooled(pools)
        found.tiers = tuple(frozenset(by_speed[s]) for s in sorted(by_speed, reverse=True))
        return found

    def profiles_on(self, members: Sequence[JobView], placement: Sequence) -> tuple:
        """The members' profiles as they run on `placement`'s type: what a group's figures
        (GPU-busy share, efficiency) are worked out from."""
        kind = self.types[self._node_pool[placement[0].node]] if placement else ""
        return tuple(scaled(j.profile, self.of(j.model, kind)) if kind else j.profile
                     for j in members)

    def retime(self, groups: Sequence[Group], jobs: Mapping[int, JobView]) -> tuple[Group, ...]:
        """The groups with each one's iteration time on the type it is placed on."""
        return tuple(self._retime(group, jobs) for group in groups)

    def _retime(self, group: Group, jobs: Mapping[int, JobView]) -> Group:
        if not group.placement:
            return group
        kind = self.types[self._node_pool[group.placement[0].node]]
        if not kind:
            return group
        members = [jobs[j] for j in group.jobs]
        profiles = tuple(j.profile for j in members)
        key = (group, kind, profiles)
        found = self._retimed.get(key)
        if found is None:
            speeds = [self.of(j.model, kind) for j in members]
            if all(s == 1.0 for s in speeds):
                found = group
            else:
                found = group._replace(tt=group.tt * _factor(profiles, speeds,
                                                              group.empty_slot))
            if len(self._retimed) > 65536:
                self._retimed.clear()
            self._retimed[key] = found
        return found


def scaled(profile: tuple[float, ...], speed_: float) -> tuple[float, ...]:
    """`profile` with its GPU stage run at `speed_` (the whole iteration where the layout
    names no GPU stage)."""
    stage = GPU_STAGE.get(len(profile))
    if stage is None:
        return tuple(t / speed_ for t in profile)
    return profile[:stage] + (profile[stage] / speed_,) + profile[stage + 1:]


def _factor(profiles: tuple, speeds: Sequence[float], empty_slot: bool) -> float:
    """How much longer (or shorter) an iteration of the group takes at these speeds: the
    interleave model's time on the scaled profiles over its time on the profiles."""
    new = tuple(scaled(p, s) for p, s in zip(profiles, speeds))
    if len(profiles) == 1:
        base, after = sum(profiles[0]), sum(new[0])
    else:
        def order(ps: tuple) -> tuple:
            return (ps[0], None, ps[1]) if empty_slot else ps
        base, after = group_tt(order(profiles)), group_tt(order(new))
    if not base > 0:
        return 1.0 / speeds[0]
    return after / base
