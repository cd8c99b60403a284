"""What changes from one plan to the next, decided once for both drivers.

The simulator charges restart overheads by it and the live service stops, regroups and
launches trainers by it, so a regroup is "in place" (no restart) in both or in neither: the
preset's `regroup_in_place` says which (the live service builds its preset with it off where
its trainers cannot regroup in place). Pure: mappings in, a classification out.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Hashable, Mapping

from scheduler.core.presets import Preset

# job id -> (the ids of its group's members in slot order, where the group runs)
Where = Mapping[int, tuple[tuple[int, ...], Hashable]]


class Change(str, Enum):
    START = "start"  # runs now, did not before
    STOP = "stop"  # ran before, does not now
    MOVE = "move"  # runs elsewhere now: stop, then start
    RESTART = "restart"  # same GPUs, another group, and the preset does not regroup in place
    REGROUP = "regroup"  # same GPUs, another group, goes on in place at the new group's pace
    KEEP = "keep"  # same group on the same GPUs


#: the changes whose jobs (re)start and pay a restart
STARTS = frozenset((Change.START, Change.MOVE, Change.RESTART))


@dataclass(frozen=True)
class PlanChanges:
    """Every job of before ∪ after, classified exactly once; ids in the order first met
    (before's order, then after's)."""

    kinds: Mapping[int, Change]

    def of(self, *kinds: Change) -> list[int]:
        return [j for j, k in self.kinds.items() if k in kinds]

    @property
    def stopping(self) -> list[int]:
        """Jobs whose trainers must stop: stopped, moved, or regrouped by a restart."""
        return self.of(Change.STOP, Change.MOVE, Change.RESTART)

    @property
    def starting(self) -> list[int]:
        """Jobs that (re)start and pay a restart: started, moved, or regrouped by a restart."""
        return self.of(*STARTS)

    @property
    def regrouped_in_place(self) -> list[int]:
        return self.of(Change.REGROUP)


def classify(before: tuple[tuple[int, ...], Any] | None,
             after: tuple[tuple[int, ...], Any] | None, preset: Preset) -> Change:
    """One job's change, from its (group, placement) before and after (None: not running)."""
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
        return Change.REGROUP if preset.regroup_in_place else Change.RESTART
    return Change.KEEP


def compare(before: Where, after: Where, preset: Preset) -> PlanChanges:
    """Classify every job that runs before (what runs now) or after (the new plan)."""
    kinds = {j: classify(was, after.get(j), preset) for j, was in before.items()}
    kinds.update((j, Change.START) for j in after if j not in before)
    return PlanChanges(kinds)
