"""Telemetry in and events out: trainers' progress and stage timings fold into the state;
the events the state queued (`outbox`) go to subscribers. Telemetry is advice and lossy by
design: a bad event costs itself only, and a failed publish is logged, never fatal.

It runs on the loop's thread between rounds, so it reads the core as it is; what it learns
goes to the core as events (scheduler/events.py) the loop applies at its next turn, checked
here against the core's bounds first so that a bad figure is refused where it came in."""
from __future__ import annotations

import math
from typing import Any

from scheduler.core.engine import MAX_SLOWDOWN, MIN_SLOWDOWN, SchedulingError
from scheduler.events import (MemoryMeasured, OverheadMeasured, ProfileMeasured,
                              SlowdownMeasured, SpeedMeasured)
from scheduler.live.state import LiveState
from scheduler.live.type_speeds import to_reference
from specs.gpu_speed import MAX_SPEED, MIN_SPEED
from specs.limits import MAX_GPU_MEM_GB
from scheduler.core.state import Status

# how far one measured pace moves a group slowdown toward itself, and the change below which
# it is left as it is (each change re-plans every group of that size)
CALIBRATION_STEP, CALIBRATION_TOLERANCE = 0.2, 0.01


def pump(state: LiveState, subscriber: Any, wait: float) -> None:
    """Fold progress telemetry in; waits up to `wait` for the first event."""
    msg = subscriber.recv(wait)
    count = 0
    while msg is not None and count < 10_000:
        try:
            if msg.type == "event.progress":
                with state.lock:
                    if msg["job_id"] in state.ledger.placed:
                        state.measured.note_progress(msg["job_id"], float(msg["iterations"]))
            elif msg.type == "event.timing":
                with state.lock:
                    note_timing(state, msg)
        except Exception as err:  # telemetry is advice: a bad event costs itself only
            state.refusals.refuse(f"{msg.type}:internal", msg.sender,
                                  f"{type(err).__name__}: {err}", job_id=msg.get("job_id"))
        count += 1
        msg = subscriber.recv(0)


def note_timing(state: LiveState, msg: Any) -> None:
    """A trainer measured its stages (trace seconds): fold them into the job's profile;
    a move big enough re-weights the matching at once. Called with the lock held. A queued
    job's report counts too: a preempted trainer's last one arrives after the plan that
    stopped it, and its stage times are still its own."""
    job = state.core.jobs.get(msg["job_id"])
    if job is None or job.status is Status.DONE:
        return
    state.metrics.stage_times(msg["stages"])
    overhead = msg.get("restart_overhead")
    inbox = state.inbox
    try:
        if overhead is not None and overhead != job.restart_overhead:
            inbox.put(OverheadMeasured(job.id, checked(
                overhead, 0.0, math.inf, f"job {job.id}: restart overhead"), msg.sender))
        memory = msg.get("gpu_mem_gb")
        if memory is not None:
            memory = checked(memory, 0.0, MAX_GPU_MEM_GB, f"job {job.id}: GPU memory (GB)")
            outgrown = state.core.outgrows_group(job.id, memory)
            inbox.put(MemoryMeasured(job.id, memory, msg.sender))
            if outgrown:
                # it no longer fits beside the jobs on its GPUs: stopped before it runs out
                state.jobs.requeue(job.id, state.now(),
                                   f"needs {memory:g} GB of GPU memory, more than fits "
                                   "beside its group: runs alone", alone=True)
                return
        calibrate(state, job.id, float(msg["iteration_time"]))
        stages = on_reference_type(state, job, msg["stages"])
        if stages is None:
            return
        profile = state.measured.profiles.fold(job.id, job.profile, stages)
        if profile is None:
            return
        inbox.put(ProfileMeasured(job.id, checked_profile(job, profile), msg.sender))
    except SchedulingError as err:  # the core is the last line: refused, nothing changed
        state.measured.profiles.forget(job.id)  # the estimate it refused must not seed the next
        state.refusals.refuse("event.timing:refused_by_core", msg.sender, str(err),
                              job_id=job.id)
        return
    state.rounds.wake("profile")
    state.log.info("profile_updated", job_id=job.id, profile=[round(t, 6) for t in profile],
                   measured=dict(msg["stages"]))


def checked(value: Any, low: float, high: float, what: str) -> float:
    """`value` as a float within [low, high], else SchedulingError naming `what`."""
    number = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        else math.nan
    if not (math.isfinite(number) and low <= number <= high):
        raise SchedulingError(f"{what} must be a finite number in [{low:g}, {high:g}], "
                              f"got {value!r}")
    return number


def checked_profile(job: Any, profile: Any) -> tuple[float, ...]:
    """A measured profile the core will take: one finite time >= 0 per stage, not all zero."""
    times = tuple(checked(t, 0.0, math.inf, f"job {job.id}: a stage time") for t in profile)
    if len(times) != len(job.profile) or not 0 < sum(times) < math.inf:
        raise SchedulingError(f"job {job.id}: profile {times} has {len(times)} stages of the "
                              f"job's {len(job.profile)}, or adds up to nothing")
    return times


def on_reference_type(state: LiveState, job: Any, stages: dict) -> dict | None:
    """The measured stages at a V100's pace, as profiles are (type_speeds.py), having let
    the GPU type's speed learn from them; None when the type they ran on is not known (a
    late report of a job no longer placed, on a cluster of several types)."""
    placed = state.ledger.placed.get(job.id)
    kind = state.nodes.placement_type(placed.slices) if placed is not None else ""
    if not kind:
        return None if len(set(state.nodes.gpus_by_type())) > 1 else stages
    gpu = stages.get("gpu")
    learned = state.measured.type_paces.observe(job.id, job.model, kind, gpu, state.core.speeds) \
        if isinstance(gpu, (int, float)) else None
    speed = state.core.speeds.of(job.model, kind)
    if learned is not None:
        was, speed = speed, min(max(learned, MIN_SPEED), MAX_SPEED)
        state.inbox.put(SpeedMeasured(job.model, kind, speed))
        state.log.info("gpu_speed_calibrated", model=job.model, gpu_type=kind,
                       speed=round(speed, 4), was=round(was, 4), job_id=job.id)
        state.rounds.wake("calibration")
    return to_reference(stages, speed)


def calibrate(state: LiveState, job_id: int, measured: float) -> None:
    """A grouped job's measured iteration time against its group's planned one moves the
    cost model's slowdown for groups of that size toward what it shows (a step of
    CALIBRATION_STEP of the way): the interference term learns this cluster's contention.
    An emulated trainer paces itself to the plan, so its reports move nothing. Only a steady
    group's reports count: not a launch's first (members start up apart, and the first to
    start waits at the gate for the others' turns), nor one before every member reported."""
    where = state.ledger.placed.get(job_id)
    if where is None or len(where.group) < 2 or not measured > 0 or not where.tt > 0:
        return
    paced = state.measured.paced
    steady = paced.get(job_id) == where.key
    paced[job_id] = where.key
    if not steady or any(paced.get(m) != where.key for m in where.group):
        return
    members = len(where.group)
    current = state.core.model.slowdown(members)
    observed = min(max(measured / (where.tt / current), MIN_SLOWDOWN), MAX_SLOWDOWN)
    factor = current + CALIBRATION_STEP * (observed - current)
    if abs(factor - current) <= CALIBRATION_TOLERANCE * current:
        return
    state.inbox.put(SlowdownMeasured(members, factor))
    state.log.info("interference_calibrated", members=members, factor=round(factor, 4),
                   was=round(current, 4), observed=round(observed, 4), job_id=job_id)
    state.rounds.wake("calibration")


def publish(state: LiveState, publisher: Any) -> None:
    """Send the queued events (taken under the lock, sent without it)."""
    with state.lock:
        out, state.outbox = state.outbox, []
    for type_, fields in out:
        try:
            publisher.publish(type_, **fields)
        except Exception:  # telemetry is lossy by design; never fatal
            state.log.exception("publish_failed", type=type_)
