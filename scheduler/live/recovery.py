"""Starting again from the journal: each job's phase by replaying its transitions, then the
queue, the trace clock and the jobs' progress.

A restarted scheduler knows only what the journal and the checkpoints say. Replaying the
journal's transitions (lifecycle.replay) gives each job the phase it had when the last
scheduler stopped: an ended job stays ended (status replies and metrics count it), a queued
one is queued again from its resume point (still backing off, where its last failure of its
own said so), and one whose trainers may still run (launching, running, stopping) is
requeued ("scheduler restart"); each job's failures in a row go on counting from its last.
The nodes stay offline until their agents speak, and no round runs until every node of such
a job's last launch has re-registered (or an agent timeout has passed), so a trainer still
running from before the restart is found as a stray and stopped before its job could start a
second time.
"""
from __future__ import annotations

import time

from scheduler.events import Checkpointed, NodeOnline, RunFailed, RunsAlone, Submitted
from scheduler.live.lifecycle import ENDED, FINISHED, OUT, Phase, replay
from scheduler.live.state import LiveState


def recover(state: LiveState) -> None:
    """Rebuild the jobs' phases from the journal, and the core's queue by events for the
    loop's first turn; nodes stay offline until their agents speak."""
    for node in range(state.opt.spec.num_nodes):
        state.inbox.put(NodeOnline(node, False))
    now = state.now()
    history = replay(state.journal.transitions())
    if history.refused:  # a hand-edited or version-1 journal: the table skips those rows
        state.log.warning("journal_replay_refused", count=len(history.refused),
                          first=[(j, b and b.value, a.value) for j, b, a in history.refused[:10]])
    live, ended, out = 0, 0, []
    # trace seconds the scheduler was away (the trace clock goes on from the journal's);
    # a journal from before this was kept: as long as since the first submit, the most
    away_since = state.journal.clock_wall()
    if away_since is None:
        away_since = min((e.submit_wall for e in state.journal.entries()), default=time.time())
    away = max(0.0, time.time() - away_since) * state.opt.time_scale
    for entry in state.journal.entries():  # arrival order: the order the core queues them in
        record = entry.record
        job_id = record.job_id
        phase = history.phases.get(job_id, Phase(entry.phase))
        if phase.value != entry.phase:  # the jobs table is what the transitions add up to
            state.log.warning("journal_disagrees", job_id=job_id, replayed=phase.value,
                              table=entry.phase)
        failure = history.failures.get(job_id)
        if phase in ENDED:
            state.jobs.restore(job_id, phase, entry, failure=failure)
            if phase is FINISHED and entry.finish_trace is not None:
                start = entry.first_start_trace
                state.metrics.job_finished(entry.finish_trace - entry.submit_trace,
                                           None if start is None else start - entry.submit_trace)
            ended += 1
            continue
        if phase in OUT:  # its trainers may still run where it was last launched
            state.rounds.awaiting |= history.launched_on.get(job_id, frozenset())
        problem = state.core.submit_problem(record)  # e.g. the spec shrank since
        if problem:
            state.log.error("job_unschedulable", job_id=job_id, reason=problem)
            continue
        state.inbox.put(Submitted(record, min(entry.submit_trace, now)))
        # its checkpoint judged against the journal's count, and the time since it was
        # settled (the scheduler's time away included: its trainers may have run on)
        at = (state.journal.last_ts(job_id) or entry.submit_trace) - away
        state.jobs.restore(job_id, phase, entry, entry.iterations_done, failure)
        state.jobs.guard.good(job_id, entry.iterations_done, at)
        done = max(entry.iterations_done, state.jobs.checkpoint_of(job_id) or 0.0)
        state.jobs.settled[job_id] = done
        state.jobs.guard.good(job_id, done, at)
        if job_id in history.alone:  # it ran out of GPU memory beside others once
            state.inbox.put(RunsAlone(job_id))
        state.inbox.put(Checkpointed(job_id, record.iterations - done))
        if failure is not None and failure.not_before is not None \
                and failure.not_before > now:  # it still backs off
            state.inbox.put(RunFailed(job_id, failure.at, record.iterations - done,
                                      failure.not_before))
        live += 1
        if phase in OUT:
            out.append(job_id)
    for job_id in out:  # it was out when the scheduler died
        state.jobs.requeue(job_id, now, "scheduler restart")
    if live or ended or state.trace.offset:
        state.log.info("recovered", jobs=live, clock=now, awaiting=sorted(state.rounds.awaiting),
                       finished=ended, requeued=out, migrated_from=state.journal.migrated_from)
    state.rounds.wake("start")


def pending(state: LiveState, wall: float) -> bool:
    """After a restart, no round until every node that ran a journaled job has
    re-registered, or an agent timeout has passed (an agent that stays silent that long
    is dead, and its jobs are free to run elsewhere). Called with the lock held."""
    awaiting = state.rounds.awaiting
    if not awaiting:
        return False
    if wall - state.trace.started <= state.opt.agent_timeout:
        return True
    state.log.warning("recovery_gave_up_waiting", nodes=sorted(awaiting))
    awaiting.clear()
    return False
