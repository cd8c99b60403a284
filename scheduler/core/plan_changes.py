"""What a plan changes against what runs, decided once for both backends.

The core compares every plan it makes with the groups that run (`diff`) and hands the result
on with the plan (`Plan.changes`): the simulated cluster charges restart overheads by it and
the agent cluster stops, regroups and launches trainers by it, so a regroup is "in place" (no
restart) in both or in neither. Pure: groups in, a classification out.
"""
from __future__ import annotations

from enum import Enum
from itertools import chain
from operator import attrgetter
from types import MappingProxyType
from typing import Any, Hashable, Mapping, NamedTuple, Sequence

from scheduler.core.state import Group

# job id -> (the ids of its group's members in slot order, where the group runs)
Where = Mapping[int, tuple[tuple[int, ...], Hashable]]


class Change(str, Enum):
    START = "start"  # runs now, did not before
    STOP = "stop"  # ran before, does not now
    MOVE = "move"  # runs elsewhere now: stop, then start
    RESTART = "restart"  # same GPUs, another group, and the model does not regroup in place
    REGROUP = "regroup"  # same GPUs, another group, goes on in place at the new group's pace
    KEEP = "keep"  # same group on the same GPUs


START, STOP, MOVE = Change.START, Change.STOP, Change.MOVE
REGROUP, RESTART, KEEP = Change.REGROUP, Change.RESTART, Change.KEEP

#: the changes whose jobs (re)start and pay a restart
STARTS = frozenset((Change.START, Change.MOVE, Change.RESTART))
#: the changes whose trainers must stop
STOPS = frozenset((Change.STOP, Change.MOVE, Change.RESTART))


class PlanChanges(NamedTuple):
    """A plan against what ran before it.

    `kinds` names every job whose running changes (never KEEP); a job it does not name runs
    on as it did. `added` holds the plan's groups that did not run as they are (new members,
    placement, slot order or pace); a job of an added group that `kinds` does not name goes
    on where it was, at the group's pace."""

    kinds: Mapping[int, Change]
    added: tuple[Group, ...] = ()

    @property
    def none(self) -> bool:
        """Nothing runs otherwise than before."""
        return not self.added and not self.kinds

    def of(self, *kinds: Change) -> list[int]:
        return [j for j, k in self.kinds.items() if k in kinds]

    @property
    def stopping(self) -> list[int]:
        """Jobs whose trainers must stop: stopped, moved, or regrouped by a restart."""
        return self.of(*STOPS)

    @property
    def starting(self) -> list[int]:
        """Jobs that (re)start and pay a restart: started, moved, or regrouped by a restart."""
        return self.of(*STARTS)

    @property
    def regrouped_in_place(self) -> list[int]:
        return self.of(Change.REGROUP)


NO_CHANGES = PlanChanges(MappingProxyType({}))


def goes_on(group_was: Sequence[int], in_place: bool, in_gate: bool) -> bool:
    """Whether a job regrouped on the GPUs it runs on goes on without a restart: always
    (`in_place`), or (`in_gate`) where it already shared them, its trainers taking turns
    at a stage gate that takes the new members and slot order in place."""
    return in_place or (in_gate and len(group_was) > 1)


def classify(before: tuple[tuple[int, ...], Any] | None,
             after: tuple[tuple[int, ...], Any] | None, in_place: bool,
             in_gate: bool = False) -> Change:
    """One job's change, from its (group, placement) before and after (None: not running);
    `in_place`, `in_gate`: which regroups go on without a restart (`goes_on`)."""
    if before is None and after is None:
        raise ValueError("a job that runs in neither plan has no change")
    if before is None:
        return Change.START
    if after is None:
        return Change.STOP
    (group_was, where_was), (group, where) = before, after
    if where != where_was:
        return Change.MOVE
    if group != group_was:
        return Change.REGROUP if goes_on(group_was, in_place, in_gate) else Change.RESTART
    return Change.KEEP


def compare(before: Where, after: Where, in_place: bool,
            in_gate: bool = False) -> dict[int, Change]:
    """Every job that runs before or after, classified (KEEP included): the definition that
    `diff` computes from groups, job by job."""
    kinds = {j: classify(was, after.get(j), in_place, in_gate) for j, was in before.items()}
    kinds.update((j, Change.START) for j in after if j not in before)
    return kinds


def diff(running: Mapping[int, Group], groups: Sequence[Group], in_place: bool,
         waiting: Mapping[int, int], max_group: int, in_gate: bool = False) -> PlanChanges:
    """The plan's `groups` against `running` (each running job's group: a member whose
    partners stopped is still in the group it was started in, which its trainer still runs).

    A group that runs as it is, every member still running, costs a comparison; only the
    jobs of the other groups are classified. A plan that cannot be compared (ValueError):
    one that names a job twice, starts a job that is not `waiting` (each job that may start,
    by id: its #GPUs), gives a job a group of another size, or groups more than `max_group`
    jobs."""
    planned = set(chain.from_iterable(map(_members, groups)))
    if len(planned) != sum(map(len, map(_members, groups))):
        raise ValueError(f"job {_twice(groups)} is in two groups")
    kinds: dict[int, Change] = {}
    added: list[Group] = []
    add, get = added.append, running.get
    starts = 0
    start, move = START, MOVE
    regroup = REGROUP if in_place else RESTART
    gated = in_gate and not in_place  # then a job that shared its GPUs regroups in place
    for group in groups:
        members, num_gpu, _, where, _ = group  # a Group, unpacked: read once each
        was = get(members[0])
        if was is not None and was == group \
                and (len(members) == 1 or all(j in running for j in members)):
            continue  # runs on as it is
        if len(members) > max_group:
            raise ValueError(f"group {list(members)} has {len(members)} jobs; at most "
                             f"{max_group} may share GPUs")
        add(group)
        for job_id in members:
            was = get(job_id)
            if was is None:
                if waiting.get(job_id) != num_gpu:
                    raise ValueError(_not_waiting(job_id, group, waiting))
                kinds[job_id] = start
                starts += 1
                continue
            if was.num_gpu != num_gpu:
                raise ValueError(_resized(job_id, was, group))
            # classify(), inlined: this runs for every job a plan moves
            if was.placement != where:
                kinds[job_id] = move
            elif was.jobs != members:
                kinds[job_id] = REGROUP if gated and len(was.jobs) > 1 else regroup
    if len(planned) - starts < len(running):  # some running jobs are in no group of the plan
        for job_id in running.keys() - planned:
            kinds[job_id] = STOP
    return _new_changes(PlanChanges, (kinds, tuple(added)))


_new_changes = tuple.__new__  # a PlanChanges made as the tuple it is, once a round
_members = attrgetter("jobs")


def _twice(groups: Sequence[Group]) -> int:
    seen: set[int] = set()
    for group in groups:
        for job_id in group.jobs:
            if job_id in seen:
                return job_id
            seen.add(job_id)
    raise AssertionError("no job is named twice")  # pragma: no cover


def _resized(job_id: int, was: Group, group: Group) -> str:
    return (f"group {list(group.jobs)} is of {group.num_gpu} GPUs but job {job_id} runs on "
            f"{was.num_gpu}")


def _not_waiting(job_id: int, group: Group, waiting: Mapping[int, int]) -> str:
    if job_id not in waiting:
        return f"job {job_id} is not waiting to run (unknown, running elsewhere or finished)"
    return (f"group {list(group.jobs)} is of {group.num_gpu} GPUs but job {job_id} needs "
            f"{waiting[job_id]}")
