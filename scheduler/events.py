"""What happened, as the driver loop hands it to the core: one typed value per kind of event.

The core has one writer, the loop (scheduler/loop.py). A backend turns what it hears (a
submission, a trainer's report, an agent gone) into these values; the loop applies them in
order, then plans. Each names what the core does with it, so a reader of a backend sees every
change it asks of the core here, and nowhere else. `Inbox` is where the live side's threads
leave them for the loop's next turn.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Sequence

from traces.record import JobRecord


@dataclass(frozen=True, slots=True)
class Submitted:
    """A job was accepted at `at` (trace seconds); the core queues it (at its clock, where a
    round moved that past `at`)."""

    record: JobRecord
    at: float


@dataclass(frozen=True, slots=True)
class Finished:
    """A job ended at `at`: it finished, a user cancelled it (`cancelled`), or it failed too
    often to be run again (`failed`)."""

    job_id: int
    at: float
    cancelled: bool = False
    failed: bool = False


@dataclass(frozen=True, slots=True)
class Requeued:
    """A job stopped outside a plan at `at` (an agent lost, a trainer failed, a restart) and
    waits again from `remaining` iterations; `alone`: it shares no GPU from now on."""

    job_id: int
    at: float
    remaining: float
    alone: bool = False


@dataclass(frozen=True, slots=True)
class RunFailed:
    """A run of the job failed at `at` (its program exited with an error, or would not
    start): it waits again from `remaining` iterations, no round plans it before
    `not_before` (its backoff, trace seconds), and the stop is no preemption."""

    job_id: int
    at: float
    remaining: float
    not_before: float


@dataclass(frozen=True, slots=True)
class Checkpointed:
    """A waiting or stopped job's trainers left a checkpoint: it resumes with `remaining`
    iterations."""

    job_id: int
    remaining: float


@dataclass(frozen=True, slots=True)
class RunsAlone:
    """A job ran out of GPU memory beside others once: it shares no GPU from now on."""

    job_id: int


@dataclass(frozen=True, slots=True)
class NodeOnline:
    """A node's agent is there (`online`) or gone: an offline node takes no work (what ran
    there comes as `Requeued` events of its own)."""

    node: int
    online: bool


@dataclass(frozen=True, slots=True)
class ProfileMeasured:
    """A job's trainers measured its stage times (at a V100's pace): the next round plans
    with them."""

    job_id: int
    profile: tuple[float, ...]
    sender: str = ""


@dataclass(frozen=True, slots=True)
class MemoryMeasured:
    """A job's trainers hold `gb` of GPU memory on each GPU: it replaces the declared figure."""

    job_id: int
    gb: float
    sender: str = ""


@dataclass(frozen=True, slots=True)
class OverheadMeasured:
    """What a restart of this job was measured to cost (seconds)."""

    job_id: int
    seconds: float
    sender: str = ""


@dataclass(frozen=True, slots=True)
class SpeedMeasured:
    """`gpu_type` runs `model`'s GPU stage at `speed` (a V100 being 1)."""

    model: str
    gpu_type: str
    speed: float


@dataclass(frozen=True, slots=True)
class SlowdownMeasured:
    """Groups of `members` jobs run `factor` times the cyclic model's time here."""

    members: int
    factor: float


@dataclass(frozen=True, slots=True)
class LaunchFailed:
    """A job the plan started did not start: it waits again for a round."""

    job_id: int
    reason: str = ""


@dataclass(frozen=True, slots=True)
class StopTook:
    """A job's stop took `seconds` (its trainer checkpointing) before its GPUs were free:
    what a later restart of it costs counts that too."""

    job_id: int
    seconds: float


Event = (Submitted | Finished | Requeued | RunFailed | Checkpointed | RunsAlone | NodeOnline
         | ProfileMeasured | MemoryMeasured | OverheadMeasured | SpeedMeasured
         | SlowdownMeasured | LaunchFailed | StopTook)


class Inbox:
    """Events left by any thread, taken in the order they were put by the loop's thread.
    Its lock is held only to put or take, never while the core plans."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: list[Event] = []

    def put(self, event: Event) -> None:
        with self._lock:
            self._events.append(event)

    def take(self) -> Sequence[Event]:
        with self._lock:
            taken, self._events = self._events, []
        return taken

    def __len__(self) -> int:
        return len(self._events)
