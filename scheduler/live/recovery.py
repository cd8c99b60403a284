"""Starting again from the journal: the queue, the trace clock and the jobs' progress.

A restarted scheduler knows only what the journal and the checkpoints say. Its nodes stay
offline until their agents speak, and no round runs until every node that ran a journaled job
has re-registered (or an agent timeout has passed), so a trainer still running from before
the restart is found as a stray and stopped before its job could start a second time.
"""
from __future__ import annotations

from scheduler.core.engine import SchedulingError
from scheduler.live.state import LiveState


def recover(state: LiveState) -> None:
    """Queue the journal's unfinished jobs; nodes stay offline until their agents speak."""
    for node in range(state.opt.spec.num_nodes):
        state.core.set_node_online(node, False)
    now = state.now()
    # jobs finished before this start: only status replies still mention them
    state.finished_before = {e.record.job_id: e for e in state.journal.finished()}
    # Trainers may still run where the journal last started its running jobs; until those
    # nodes' agents re-register (and their trainers are found as strays and stopped), a
    # round could start a second copy of such a job elsewhere. See `pending`.
    state.awaiting = state.journal.running_nodes()
    entries = state.journal.unfinished()
    for entry in entries:
        record = entry.record
        try:
            state.core.submit(record, min(entry.submit_trace, now))
        except SchedulingError as err:  # e.g. the spec shrank since it was accepted
            state.log.error("job_unschedulable", job_id=record.job_id, reason=str(err))
            continue
        done = max(entry.iterations_done, state.checkpoint_of(record.job_id) or 0.0)
        state.core.set_remaining(record.job_id, record.iterations - done)
        if entry.state == "running":  # it was running when the scheduler died
            state.journal.mark_stopped(record.job_id, done, now,
                                       detail={"reason": "scheduler restart"})
    if entries or state.offset:
        state.log.info("recovered", jobs=len(entries), clock=now,
                       awaiting=sorted(state.awaiting),
                       finished=len(state.journal.finished_ids()))
    state.wake_reasons.add("start")


def pending(state: LiveState, wall: float) -> bool:
    """After a restart, no round until every node that ran a journaled job has
    re-registered, or an agent timeout has passed (an agent that stays silent that long
    is dead, and its jobs are free to run elsewhere). Called with the lock held."""
    if not state.awaiting:
        return False
    if wall - state.wall0 <= state.opt.agent_timeout:
        return True
    state.log.warning("recovery_gave_up_waiting", nodes=sorted(state.awaiting))
    state.awaiting.clear()
    return False
